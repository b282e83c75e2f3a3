import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { stripTerminalControls } from "../../client/terminal_text.ts";

describe("stripTerminalControls", () => {
  it("removes CSI sequences: colours, cursor moves, screen and line clears, private modes", () => {
    assert.equal(
      stripTerminalControls("\x1b[31mred\x1b[0m \x1b[2J\x1b[H\x1b[1;1H\x1b[K\x1b[?25l\x1b[?1049h ok"),
      "red  ok",
    );
  });

  it("removes OSC strings ended by BEL or ST, and an unterminated one to the end", () => {
    assert.equal(stripTerminalControls("a\x1b]0;pwned\x07b"), "ab");
    assert.equal(stripTerminalControls("\x1b]8;;https://evil.example\x1b\\link\x1b]8;;\x1b\\"), "link");
    assert.equal(stripTerminalControls("\x1b]52;c;aGVsbG8=\x07copied?"), "copied?");
    assert.equal(stripTerminalControls("before\x1b]0;never ended"), "before");
  });

  it("removes DCS, SOS, PM and APC strings, and two-byte escapes", () => {
    assert.equal(stripTerminalControls("\x1bP+q544e\x1b\\a\x1bXsos\x1b\\b\x1b^pm\x07c\x1b_apc\x1b\\d"), "abcd");
    assert.equal(stripTerminalControls("\x1bc\x1b(B\x1b7x\x1b8\x1b="), "x");
  });

  it("removes the 8-bit forms: CSI U+009B, OSC U+009D ended by ST U+009C, and stray C1 controls", () => {
    assert.equal(stripTerminalControls("\x9b2J\x9d0;title\x9cx\x85\x8dy"), "xy");
  });

  it("removes other C0 controls, DEL and a lone ESC, keeping newline and tab", () => {
    assert.equal(
      stripTerminalControls("one\r\ntwo\tthree\x07\x08\x00\x7f\x1b\nfour\rfive"),
      "one\ntwo\tthree\nfourfive",
    );
  });

  it("keeps printable text, Unicode included", () => {
    const text = 'Grüße, 世界 — naïve café 🚀 [31m] ~!@#$%^&*()_+{}|:"<>?';
    assert.equal(stripTerminalControls(text), text);
  });
});
