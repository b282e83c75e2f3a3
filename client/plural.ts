/** Counted words for people: `1 attempt`, `2 attempts`, `0.5 cores`. */

/** `count` and `word`, the word in its plural (`many`, default `word + "s"`) unless `count` is exactly 1. */
export function plural(count: number, word: string, many = `${word}s`): string {
  return `${count} ${count === 1 ? word : many}`;
}
