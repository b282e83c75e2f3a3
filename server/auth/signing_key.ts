import { join } from "node:path";
import { calculateJwkThumbprint, exportJWK, generateKeyPair, importJWK, type JWK } from "jose";
import { loadOrCreateKeyFile } from "../keys/key_file.ts";

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
  const file = await loadOrCreateKeyFile(join(dataDir, "keys", "signing_key.jwk.json"), async () => {
    const pair = await generateKeyPair("EdDSA", { crv: "Ed25519", extractable: true });
    return JSON.stringify(await exportJWK(pair.privateKey));
  });
  const privateJwk = JSON.parse(file.toString("utf8")) as JWK;
  const { d: _private, ...publicMembers } = privateJwk;
  const kid = await calculateJwkThumbprint(publicMembers);
  const privateKey = (await importJWK({ ...privateJwk, alg: "EdDSA" }, "EdDSA")) as CryptoKey;
  const publicKey = (await importJWK({ ...publicMembers, alg: "EdDSA" }, "EdDSA")) as CryptoKey;
  return { kid, privateKey, publicKey, publicJwk: { ...publicMembers, kid, alg: "EdDSA", use: "sig" } };
}
