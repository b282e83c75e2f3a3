/**
 * Text from elsewhere (an app's build log, a function's output and errors, a server's messages) made safe
 * to print on a terminal: a hostile app can print escape sequences that set the window title, clear the
 * screen, move the cursor over earlier lines, plant hyperlinks or, on some terminals, answer back into
 * the shell's input.
 */

/**
 * ESC-introduced sequences, and their 8-bit (C1) forms: CSI (`ESC [` or U+009B, parameters,
 * intermediates, a final byte); the string commands OSC, DCS, SOS, PM and APC (`ESC ]`, `ESC P`,
 * `ESC X`, `ESC ^`, `ESC _` or U+009D, U+0090, U+0098, U+009E, U+009F) up to BEL or ST (`ESC \` or
 * U+009C), or to the end of the text when unterminated, as a terminal would swallow it; and the other
 * escapes (`ESC`, intermediates, a final byte: `ESC c`, `ESC ( B`).
 */
const SEQUENCE =
  /(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?|\x1b[\x20-\x2f]*[\x30-\x7e]/g;

/** What is left of controls once sequences are gone: C0 but tab and newline, DEL, C1 (a lone ESC too). */
const CONTROL = /[\x00-\x08\x0b-\x1f\x7f-\x9f]/g;

/**
 * `text` without terminal control sequences (CSI, OSC and the other escapes, in 7- and 8-bit form) and
 * without any other C0 or C1 control but newline and tab (carriage return and backspace included: they
 * can hide what came before them on the line). Printable text, Unicode included, is kept as it is.
 */
export function stripTerminalControls(text: string): string {
  return text.replace(SEQUENCE, "").replace(CONTROL, "");
}
