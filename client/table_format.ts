import { stripTerminalControls } from "./terminal_text.ts";

/**
 * Rows under a header line, each column as wide as its widest cell and two spaces apart; the last column
 * is not padded. Cells are made safe for a terminal and kept to one line (names and errors come from
 * elsewhere). Lists print this for people; `--json` stays the form for scripts.
 */
export function formatTable(headers: string[], rows: Array<Array<string | number | null | undefined>>): string {
  const cells = [headers, ...rows.map((row) => row.map(cellText))];
  const widths = headers.map((_, column) => Math.max(...cells.map((row) => (row[column] ?? "").length)));
  return cells.map((row) =>
    row.map((cell, column) => column === row.length - 1 ? cell : cell.padEnd(widths[column])).join("  ").trimEnd()
  ).join("\n");
}

function cellText(value: string | number | null | undefined): string {
  if (value === null || value === undefined || value === "") return "-";
  return stripTerminalControls(String(value)).replace(/\s*\n\s*/g, " ");
}

/** Writes `formatTable(headers, rows)` and a newline on stdout. */
export function writeTable(
  io: { stdout: NodeJS.WritableStream },
  headers: string[],
  rows: Array<Array<string | number | null | undefined>>,
): void {
  io.stdout.write(`${formatTable(headers, rows)}\n`);
}
