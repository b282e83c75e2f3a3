import { join } from "node:path";
import { calculateJwkThumbprint, exportJWK, generateKeyPair, importJWK, type JWK } from "jose";
import { loadOrCreateKeyFile } from "../keys/key_file.ts";

/** The public key of a signing key, as served in the JWKS (no private member). */
export type PublicSigningJwk = JWK & { kty: "OKP"; crv: "Ed25519"; x: string; kid: string; alg: "EdDSA"; use: "sig" };

/** The server's token-signing key pair and its public JWK. */
export interface SigningKey {
  kid: string;
  privateKey: CryptoKey;
  publicKey: CryptoKey;
  /** The public key as served in the JWKS (no private member). */
  publicJwk: PublicSigningJwk;
}

/**
 * The signing keys a process knows: the one that signs new tokens, and every one whose tokens it
 * accepts (found by the `kid` of a token's header).
 */
export interface SigningKeys {
  /** The key new tokens are signed with. */
  current: SigningKey;
  /** The key of `kid`, or undefined when no key of that id may verify tokens. */
  find(kid: string): Promise<SigningKey | undefined>;
  /** The public keys of every key that may still have live tokens, for the JWKS. */
  jwks(): Promise<PublicSigningJwk[]>;
}

/** A new Ed25519 private key, as JWK text (how it is kept in a file or sealed in the database). */
export async function generateSigningJwk(): Promise<string> {
  const pair = await generateKeyPair("EdDSA", { crv: "Ed25519", extractable: true });
  return JSON.stringify(await exportJWK(pair.privateKey));
}

/** The signing key of a private Ed25519 JWK's text; its `kid` is the RFC 7638 thumbprint. */
export async function signingKeyFromJwk(text: string): Promise<SigningKey> {
  const privateJwk = JSON.parse(text) as JWK;
  const { d: _private, ...publicMembers } = privateJwk;
  const kid = await calculateJwkThumbprint(publicMembers);
  const privateKey = (await importJWK({ ...privateJwk, alg: "EdDSA" }, "EdDSA")) as CryptoKey;
  const publicKey = (await importJWK({ ...publicMembers, alg: "EdDSA" }, "EdDSA")) as CryptoKey;
  return {
    kid,
    privateKey,
    publicKey,
    publicJwk: { ...publicMembers, kid, alg: "EdDSA", use: "sig" } as PublicSigningJwk,
  };
}

/**
 * Loads the Ed25519 signing key from `dataDir/keys/signing_key.jwk.json`, creating it (mode 0600) on
 * first use.
 */
export async function loadOrCreateSigningKey(dataDir: string): Promise<SigningKey> {
  const file = await loadOrCreateKeyFile(join(dataDir, "keys", "signing_key.jwk.json"), generateSigningJwk);
  return await signingKeyFromJwk(file.toString("utf8"));
}

/** The signing keys of a process that has one key (the data dir's file, on SQLite). */
export function singleSigningKey(key: SigningKey): SigningKeys {
  return {
    current: key,
    find: (kid) => Promise.resolve(kid === key.kid ? key : undefined),
    jwks: () => Promise.resolve([key.publicJwk]),
  };
}
