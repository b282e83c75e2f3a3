/**
 * Checks that bytes are the JSON text of one value, a chunk at a time, without building the value. A
 * big result from a worker is validated this way (a slice per turn of the event loop) and then handed
 * through as text, instead of one `JSON.parse` that blocks for its whole length. Only ASCII is accepted:
 * the worker encodes with Python's default `ensure_ascii`, so any other byte is a protocol violation.
 */

/** The bytes are not the JSON text of one value. */
export class InvalidJson extends Error {
  constructor(message: string, readonly offset: number) {
    super(`${message} at byte ${offset}`);
    this.name = "InvalidJson";
  }
}

// What the next byte may be.
const VALUE = 0; // a value (after `[`, `,` or `:`, or at the start)
const VALUE_OR_CLOSE = 1; // a value or `]` (right after `[`)
const AFTER = 2; // `,`, a closing bracket, or the end (after a value)
const KEY = 3; // a member's name (after `,` in an object)
const KEY_OR_CLOSE = 4; // a member's name or `}` (right after `{`)
const COLON = 5;
const STRING = 6;
const ESCAPE = 7;
const HEX = 8;
const LITERAL = 9;
const MINUS = 10; // after `-`: a digit
const ZERO = 11; // after a leading 0: `.`, `e` or the end of the number
const INT = 12;
const POINT = 13; // after `.`: a digit
const FRACTION = 14;
const EXP = 15; // after `e`: a sign or a digit
const EXP_SIGN = 16; // a digit
const EXPONENT = 17;

const ARRAY = 1;
const OBJECT = 2;

/** 1 for a byte that may stand in a string as itself: printable ASCII but `"` and `\`. */
const PLAIN = new Uint8Array(256).map((_, byte) =>
  byte >= 0x20 && byte < 0x80 && byte !== 0x22 && byte !== 0x5c ? 1 : 0
);

/** From this length on, a string's contents are read four bytes at a time (`plainWords`). */
const WORD_RUN_BYTES = 64;
const LOW_BITS = 0x01010101;
const HIGH_BITS = 0x80808080;

/** Whether any byte of the 32-bit word `x` is zero. */
function hasZeroByte(x: number): number {
  return (x - LOW_BITS) & ~x & HIGH_BITS;
}

/**
 * Skips the plain bytes of a string's contents from `i` four at a time, as far as whole aligned words go
 * with none that may not stand as itself (`"`, `\`, a control character, a byte past ASCII); the byte
 * loop reads the rest. Returns where it stopped.
 */
function plainWords(chunk: Uint8Array, i: number): number {
  while (((chunk.byteOffset + i) & 3) !== 0 && PLAIN[chunk[i]] === 1) i++;
  if (((chunk.byteOffset + i) & 3) !== 0) return i;
  const words = new Uint32Array(chunk.buffer, chunk.byteOffset + i, (chunk.length - i) >>> 2);
  let w = 0;
  for (; w < words.length; w++) {
    const x = words[w];
    // A byte past ASCII, one below 0x20, a quote or a backslash.
    if (
      (x & HIGH_BITS) | ((x - 0x20202020) & ~x & HIGH_BITS) | hasZeroByte(x ^ 0x22222222) | hasZeroByte(x ^ 0x5c5c5c5c)
    ) {
      break;
    }
  }
  return i + w * 4;
}

const isDigit = (c: number) => c >= 0x30 && c <= 0x39;
const isSpace = (c: number) => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
const isHex = (c: number) => isDigit(c) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66);

/** An incremental JSON validator: `push` each chunk in order, then `end`; both throw `InvalidJson`. */
export class JsonValidator {
  #state = VALUE;
  readonly #stack: number[] = [];
  #stringIsKey = false;
  #hexLeft = 0;
  #literal = "";
  #literalAt = 0;
  #offset = 0;

  /** Checks the next chunk of the text; throws `InvalidJson` at the first byte that cannot be there. */
  push(chunk: Uint8Array): void {
    const n = chunk.length;
    let i = 0;
    while (i < n) {
      switch (this.#state) {
        case STRING:
          i = this.#stringRun(chunk, i);
          break;
        case ZERO:
        case INT:
        case FRACTION:
        case EXPONENT:
          if (this.#number(chunk[i])) i++; // else the number ended; this byte is read again
          break;
        case ESCAPE:
        case HEX:
        case LITERAL:
        case MINUS:
        case POINT:
        case EXP_SIGN:
        case EXP:
          this.#inToken(chunk[i], i);
          i++;
          break;
        default: // COLON, KEY, KEY_OR_CLOSE, AFTER, VALUE, VALUE_OR_CLOSE
          this.#betweenTokens(chunk[i], i);
          i++;
      }
    }
    this.#offset += n;
  }

  #fail(what: string, at: number): never {
    throw new InvalidJson(what, this.#offset + at);
  }

  /** Reads a string's contents from `chunk[i]` up to its end or the chunk's; returns where it stopped. */
  #stringRun(chunk: Uint8Array, i: number): number {
    const n = chunk.length;
    // The hot loop: most of a big result (or item) is string contents.
    if (n - i >= WORD_RUN_BYTES) i = plainWords(chunk, i);
    while (i < n && PLAIN[chunk[i]] === 1) i++;
    if (i === n) return i;
    const d = chunk[i];
    if (d === 0x22) this.#state = this.#stringIsKey ? COLON : AFTER;
    else if (d === 0x5c) this.#state = ESCAPE;
    else this.#fail(d >= 0x80 ? "a byte that is not ASCII" : "a control character in a string", i);
    return i + 1;
  }

  /** A byte `c` after a number's digits, point or exponent: whether the number takes it (else it ended). */
  #number(c: number): boolean {
    const state = this.#state;
    if (isDigit(c) && state !== ZERO) return true;
    if (c === 0x2e && (state === ZERO || state === INT)) {
      this.#state = POINT;
      return true;
    }
    if ((c === 0x65 || c === 0x45) && state !== EXPONENT) {
      this.#state = EXP;
      return true;
    }
    this.#state = AFTER;
    return false;
  }

  /** A byte `c` (at `at` in its chunk) inside an escape, a literal or a number's sign, point or exponent. */
  #inToken(c: number, at: number): void {
    switch (this.#state) {
      case ESCAPE:
        if (c === 0x75) {
          this.#state = HEX;
          this.#hexLeft = 4;
        } else if ('"\\/bfnrt'.includes(String.fromCharCode(c))) this.#state = STRING;
        else this.#fail("an invalid escape", at);
        break;
      case HEX:
        if (!isHex(c)) this.#fail("an invalid \\u escape", at);
        if (--this.#hexLeft === 0) this.#state = STRING;
        break;
      case LITERAL:
        if (c !== this.#literal.charCodeAt(this.#literalAt)) this.#fail("an invalid literal", at);
        if (++this.#literalAt === this.#literal.length) this.#state = AFTER;
        break;
      case MINUS:
        if (c === 0x30) this.#state = ZERO;
        else if (isDigit(c)) this.#state = INT;
        else this.#fail("a minus sign without digits", at);
        break;
      case POINT:
      case EXP_SIGN:
        if (!isDigit(c)) this.#fail("a number without digits", at);
        this.#state = this.#state === POINT ? FRACTION : EXPONENT;
        break;
      default: // EXP
        if (c === 0x2b || c === 0x2d) this.#state = EXP_SIGN;
        else if (isDigit(c)) this.#state = EXPONENT;
        else this.#fail("an exponent without digits", at);
    }
  }

  /** A byte `c` (at `at` in its chunk) where a value, a member's name, a colon, a comma or a bracket may be. */
  #betweenTokens(c: number, at: number): void {
    const state = this.#state;
    if (isSpace(c)) return;
    switch (state) {
      case COLON:
        if (c === 0x3a) this.#state = VALUE;
        else this.#fail("a member name without a colon", at);
        break;
      case KEY:
      case KEY_OR_CLOSE:
        if (c === 0x22) {
          this.#stringIsKey = true;
          this.#state = STRING;
        } else if (c === 0x7d && state === KEY_OR_CLOSE) {
          this.#stack.pop();
          this.#state = AFTER;
        } else this.#fail("an object member without a name", at);
        break;
      case AFTER: {
        const top = this.#stack[this.#stack.length - 1];
        if (top === undefined) this.#fail("text after the value", at);
        if (c === 0x2c) this.#state = top === ARRAY ? VALUE : KEY;
        else if (c === (top === ARRAY ? 0x5d : 0x7d)) {
          this.#stack.pop();
          this.#state = AFTER;
        } else this.#fail("a missing comma or bracket", at);
        break;
      }
      default: // VALUE, VALUE_OR_CLOSE
        this.#value(c, at);
    }
  }

  /** The first byte `c` (at `at` in its chunk) of a value, or `]` right after `[`. */
  #value(c: number, at: number): void {
    if (c === 0x22) {
      this.#stringIsKey = false;
      this.#state = STRING;
    } else if (c === 0x5b) {
      this.#stack.push(ARRAY);
      this.#state = VALUE_OR_CLOSE;
    } else if (c === 0x7b) {
      this.#stack.push(OBJECT);
      this.#state = KEY_OR_CLOSE;
    } else if (c === 0x5d && this.#state === VALUE_OR_CLOSE) {
      this.#stack.pop();
      this.#state = AFTER;
    } else if (c === 0x2d) this.#state = MINUS;
    else if (c === 0x30) this.#state = ZERO;
    else if (isDigit(c)) this.#state = INT;
    else if (c === 0x74 || c === 0x66 || c === 0x6e) {
      this.#literal = c === 0x74 ? "true" : c === 0x66 ? "false" : "null";
      this.#literalAt = 1;
      this.#state = LITERAL;
    } else {
      this.#fail("an unexpected character", at);
    }
  }

  /** Checks that the text pushed so far is one whole value. */
  end(): void {
    const state = this.#state;
    const complete = state === AFTER || state === ZERO || state === INT || state === FRACTION || state === EXPONENT;
    if (!complete || this.#stack.length) throw new InvalidJson("the text ended inside a value", this.#offset);
  }
}
