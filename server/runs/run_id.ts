/**
 * Run ids: `run_` + 26 lowercase base32 characters, 10 of time (ms) then 16 of randomness, so ids sort
 * by creation time (ids made in the same millisecond by this process keep their order too).
 */
import { randomBytesPooled } from "../random/mod.ts";

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

/** A new run id, greater than every id this process made before. */
export function newRunId(now: number = Date.now()): string {
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
  return `run_${head}${tail}`;
}

/** Whether `value` has the shape of a run id. */
export function isRunId(value: string): boolean {
  return /^run_[0-9a-z]{26}$/.test(value);
}
