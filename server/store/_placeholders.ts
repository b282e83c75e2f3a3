/**
 * Placeholders of portable raw statements: they are written with `?` (SQLite's form); PostgreSQL wants
 * `$1`, `$2`, …. The translation skips quoted text (`'…'` strings, `"…"` identifiers) and comments.
 */

/** `sqlText` with each `?` placeholder replaced by `$n`, numbered from 1 in order. */
export function postgresPlaceholders(sqlText: string): string {
  let out = "";
  let n = 0;
  let i = 0;
  while (i < sqlText.length) {
    const c = sqlText[i];
    if (c === "'" || c === '"') {
      // Quoted text runs to the matching quote; a doubled quote is an escaped one and stays inside.
      let end = i + 1;
      while (end < sqlText.length) {
        if (sqlText[end] === c) {
          if (sqlText[end + 1] === c) end += 2;
          else break;
        } else end++;
      }
      out += sqlText.slice(i, end + 1);
      i = end + 1;
    } else if (c === "-" && sqlText[i + 1] === "-") {
      const end = sqlText.indexOf("\n", i);
      const stop = end === -1 ? sqlText.length : end;
      out += sqlText.slice(i, stop);
      i = stop;
    } else if (c === "/" && sqlText[i + 1] === "*") {
      const end = sqlText.indexOf("*/", i + 2);
      const stop = end === -1 ? sqlText.length : end + 2;
      out += sqlText.slice(i, stop);
      i = stop;
    } else if (c === "?") {
      out += `$${++n}`;
      i++;
    } else {
      out += c;
      i++;
    }
  }
  return out;
}
