/**
 * Secrets at rest (webhook secrets, GitHub tokens): AES-256-GCM with a key kept in the data dir
 * (`keys/secret_box.key`, mode 0600, created on first use). Sealed values never hold the plaintext.
 */
import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto";
import { join } from "node:path";
import { loadOrCreateKeyFile } from "../keys/key_file.ts";

/** Seals and opens secrets with the data dir's key. */
export interface SecretBox {
  /** Encrypts `plaintext`; the result is `v1.<iv>.<ciphertext+tag>` in base64url. */
  seal(plaintext: string): string;
  /** Decrypts a sealed value; throws when it was not sealed with this key or was altered. */
  open(sealed: string): string;
}

const VERSION = "v1";

/** Loads the data dir's secret key, creating it on first use, and returns a box that uses it. */
export async function loadSecretBox(dataDir: string): Promise<SecretBox> {
  const path = join(dataDir, "keys", "secret_box.key");
  const key = await loadOrCreateKeyFile(path, () => randomBytes(32));
  if (key.length !== 32) {
    throw new Error(`${path} must hold 32 bytes; restore it from a backup or remove it to start over`);
  }
  return createSecretBox(key);
}

/** A box over a 32-byte key. */
export function createSecretBox(key: Uint8Array): SecretBox {
  return {
    seal(plaintext) {
      const iv = randomBytes(12);
      const cipher = createCipheriv("aes-256-gcm", key, iv);
      const body = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final(), cipher.getAuthTag()]);
      return `${VERSION}.${iv.toString("base64url")}.${body.toString("base64url")}`;
    },
    open(sealed) {
      const [version, iv, body] = sealed.split(".");
      if (version !== VERSION || !iv || !body) throw new Error("Not a sealed secret");
      const bytes = Buffer.from(body, "base64url");
      const decipher = createDecipheriv("aes-256-gcm", key, Buffer.from(iv, "base64url"));
      decipher.setAuthTag(bytes.subarray(bytes.length - 16));
      return Buffer.concat([decipher.update(bytes.subarray(0, bytes.length - 16)), decipher.final()]).toString("utf8");
    },
  };
}
