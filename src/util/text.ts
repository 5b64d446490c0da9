/**
 * Echoing input back in messages. An error that quotes the offending token whole puts a 50 MB line of a corrupt file,
 * or a pasted blob given as an option value, on the terminal; every message that quotes input cuts it here.
 */

/** How many characters of an echoed token are shown. */
export const SHOWN_CHARACTERS = 40;

/**
 * `text`, cut to its first `max` characters (code points, so that no character is split) followed by "…" when it is
 * longer; control characters are shown as escapes, so that a binary token cannot move the cursor or end the line.
 */
export function cut(text: string, max = SHOWN_CHARACTERS): string {
  return shorten(text, max).shown;
}

/**
 * `text` in single quotes, cut as `cut` does; a cut token is followed by its length, so that the reader knows how
 * much was left out: `'aaaa…' (52428800 characters)`.
 */
export function quote(text: string, max = SHOWN_CHARACTERS): string {
  const { shown, whole } = shorten(text, max);
  return whole ? `'${shown}'` : `'${shown}' (${text.length} characters)`;
}

/** A JSON value (of a parsed file) for a message: its JSON text, cut (`"bogus"`, `[1,2,…`, `{"a":1}`). */
export function showValue(value: unknown, max = SHOWN_CHARACTERS): string {
  if (value === undefined) return "undefined";
  let json: string;
  try {
    json = JSON.stringify(value) ?? String(value);
  } catch {
    json = String(value);
  }
  return cut(json, max);
}

function shorten(text: string, max: number): { shown: string; whole: boolean } {
  let shown = "";
  let n = 0;
  for (const ch of text) {
    if (n === max) return { shown: `${shown}…`, whole: false };
    shown += visible(ch);
    n++;
  }
  return { shown, whole: true };
}

function visible(ch: string): string {
  const c = ch.codePointAt(0)!;
  if (c >= 0x20 && c !== 0x7f && !(c >= 0x80 && c < 0xa0) && c !== 0x2028 && c !== 0x2029) return ch;
  if (c === 0x0a) return "\\n";
  if (c === 0x0d) return "\\r";
  if (c === 0x09) return "\\t";
  return `\\u${c.toString(16).padStart(4, "0")}`;
}
