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

  push(chunk: Uint8Array): void {
    const n = chunk.length;
    let state = this.#state;
    let i = 0;
    const fail = (what: string): never => {
      throw new InvalidJson(what, this.#offset + i);
    };
    while (i < n) {
      const c = chunk[i];
      switch (state) {
        case STRING: {
          // The hot loop: most of a big result is string contents.
          while (i < n) {
            const d = chunk[i];
            if (d === 0x22 || d === 0x5c || d < 0x20 || d >= 0x80) break;
            i++;
          }
          if (i === n) break;
          const d = chunk[i];
          if (d === 0x22) state = this.#stringIsKey ? COLON : AFTER;
          else if (d === 0x5c) state = ESCAPE;
          else fail(d >= 0x80 ? "a byte that is not ASCII" : "a control character in a string");
          i++;
          break;
        }
        case ESCAPE:
          if (c === 0x75) {
            state = HEX;
            this.#hexLeft = 4;
          } else if ('"\\/bfnrt'.includes(String.fromCharCode(c))) state = STRING;
          else fail("an invalid escape");
          i++;
          break;
        case HEX:
          if (!isHex(c)) fail("an invalid \\u escape");
          if (--this.#hexLeft === 0) state = STRING;
          i++;
          break;
        case LITERAL:
          if (c !== this.#literal.charCodeAt(this.#literalAt)) fail("an invalid literal");
          if (++this.#literalAt === this.#literal.length) state = AFTER;
          i++;
          break;
        case MINUS:
          if (c === 0x30) state = ZERO;
          else if (isDigit(c)) state = INT;
          else fail("a minus sign without digits");
          i++;
          break;
        case POINT:
        case EXP_SIGN:
          if (!isDigit(c)) fail("a number without digits");
          state = state === POINT ? FRACTION : EXPONENT;
          i++;
          break;
        case EXP:
          if (c === 0x2b || c === 0x2d) state = EXP_SIGN;
          else if (isDigit(c)) state = EXPONENT;
          else fail("an exponent without digits");
          i++;
          break;
        case ZERO:
        case INT:
        case FRACTION:
        case EXPONENT:
          if (isDigit(c) && state !== ZERO) i++;
          else if (c === 0x2e && (state === ZERO || state === INT)) {
            state = POINT;
            i++;
          } else if ((c === 0x65 || c === 0x45) && state !== EXPONENT) {
            state = EXP;
            i++;
          } else state = AFTER; // the number ended; this byte is read again
          break;
        case COLON:
          if (isSpace(c)) i++;
          else if (c === 0x3a) {
            state = VALUE;
            i++;
          } else fail("a member name without a colon");
          break;
        case KEY:
        case KEY_OR_CLOSE:
          if (isSpace(c)) i++;
          else if (c === 0x22) {
            this.#stringIsKey = true;
            state = STRING;
            i++;
          } else if (c === 0x7d && state === KEY_OR_CLOSE) {
            this.#stack.pop();
            state = AFTER;
            i++;
          } else fail("an object member without a name");
          break;
        case AFTER:
          if (isSpace(c)) i++;
          else {
            const top = this.#stack[this.#stack.length - 1];
            if (top === undefined) fail("text after the value");
            if (c === 0x2c) state = top === ARRAY ? VALUE : KEY;
            else if (c === (top === ARRAY ? 0x5d : 0x7d)) {
              this.#stack.pop();
              state = AFTER;
            } else fail("a missing comma or bracket");
            i++;
          }
          break;
        default: // VALUE, VALUE_OR_CLOSE
          if (isSpace(c)) i++;
          else {
            i++;
            if (c === 0x22) {
              this.#stringIsKey = false;
              state = STRING;
            } else if (c === 0x5b) {
              this.#stack.push(ARRAY);
              state = VALUE_OR_CLOSE;
            } else if (c === 0x7b) {
              this.#stack.push(OBJECT);
              state = KEY_OR_CLOSE;
            } else if (c === 0x5d && state === VALUE_OR_CLOSE) {
              this.#stack.pop();
              state = AFTER;
            } else if (c === 0x2d) state = MINUS;
            else if (c === 0x30) state = ZERO;
            else if (isDigit(c)) state = INT;
            else if (c === 0x74 || c === 0x66 || c === 0x6e) {
              this.#literal = c === 0x74 ? "true" : c === 0x66 ? "false" : "null";
              this.#literalAt = 1;
              state = LITERAL;
            } else {
              i--;
              fail("an unexpected character");
            }
          }
      }
    }
    this.#state = state;
    this.#offset += n;
  }

  /** Checks that the text pushed so far is one whole value. */
  end(): void {
    const state = this.#state;
    const complete = state === AFTER || state === ZERO || state === INT || state === FRACTION || state === EXPONENT;
    if (!complete || this.#stack.length) throw new InvalidJson("the text ended inside a value", this.#offset);
  }
}
