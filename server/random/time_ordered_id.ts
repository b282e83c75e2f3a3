/** Time-ordered ids (run ids, deployment ids): sortable by creation time, random in their tail. */
import { randomBytesPooled } from "./pooled_bytes.ts";

const ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz";

let lastTime = -1;
let lastRandom: number[] = [];

function randomDigits(): number[] {
  const bytes = randomBytesPooled(16);
  const digits = new Array<number>(16);
  for (let i = 0; i < 16; i++) digits[i] = bytes[i] & 31;
  return digits;
}

function increment(digits: number[]): number[] {
  const next = [...digits];
  for (let i = next.length - 1; i >= 0; i--) {
    if (next[i] < 31) {
      next[i]++;
      return next;
    }
    next[i] = 0;
  }
  return randomDigits();
}

/**
 * `prefix` and 26 lowercase base32 characters, 10 of time (ms) then 16 of randomness: ids sort by
 * creation time, and each is greater than every id this process made before.
 */
export function timeOrderedId(prefix: string, now: number = Date.now()): string {
  let time = Math.max(now, lastTime);
  lastRandom = time === lastTime ? increment(lastRandom) : randomDigits();
  lastTime = time;
  let head = "";
  for (let i = 0; i < 10; i++) {
    head = ALPHABET[time % 32] + head;
    time = Math.floor(time / 32);
  }
  let tail = "";
  for (const digit of lastRandom) tail += ALPHABET[digit];
  return `${prefix}${head}${tail}`;
}
