import { chmod, mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { calculateJwkThumbprint, exportJWK, generateKeyPair, importJWK, type JWK } from "jose";

/** The server's token-signing key pair and its public JWK. */
export interface SigningKey {
  kid: string;
  privateKey: CryptoKey;
  publicKey: CryptoKey;
  /** The public key as served in the JWKS (no private member). */
  publicJwk: JWK & { kid: string; alg: "EdDSA"; use: "sig" };
}

/**
 * Loads the Ed25519 signing key from `dataDir/keys/signing_key.jwk.json`, creating it (mode 0600) on
 * first use.
 */
export async function loadOrCreateSigningKey(dataDir: string): Promise<SigningKey> {
  const dir = join(dataDir, "keys");
  const path = join(dir, "signing_key.jwk.json");
  let privateJwk: JWK;
  try {
    privateJwk = JSON.parse(await readFile(path, "utf8")) as JWK;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
    const pair = await generateKeyPair("EdDSA", { crv: "Ed25519", extractable: true });
    privateJwk = await exportJWK(pair.privateKey);
    await mkdir(dir, { recursive: true, mode: 0o700 });
    // `wx` fails if another process created the key meanwhile; then use theirs.
    try {
      await writeFile(path, JSON.stringify(privateJwk), { mode: 0o600, flag: "wx" });
    } catch (writeError) {
      if ((writeError as NodeJS.ErrnoException).code !== "EEXIST") throw writeError;
      privateJwk = JSON.parse(await readFile(path, "utf8")) as JWK;
    }
    await chmod(path, 0o600);
  }
  const { d: _private, ...publicMembers } = privateJwk;
  const kid = await calculateJwkThumbprint(publicMembers);
  const privateKey = (await importJWK({ ...privateJwk, alg: "EdDSA" }, "EdDSA")) as CryptoKey;
  const publicKey = (await importJWK({ ...publicMembers, alg: "EdDSA" }, "EdDSA")) as CryptoKey;
  return { kid, privateKey, publicKey, publicJwk: { ...publicMembers, kid, alg: "EdDSA", use: "sig" } };
}
