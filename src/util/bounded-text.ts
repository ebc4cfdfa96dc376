/** Text from outside (a NACK's message, a refused pod's field) cut to a bound and made safe to log. */

/**
 * Control characters (C0 but tab and newline, DEL, C1), bidirectional overrides, isolates and
 * marks, and the line and paragraph separators: replaced by `?` by {@link boundedText}.
 */
const UNSAFE_CHARS = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]/g;

/** A high surrogate not followed by a low one, or a low one not preceded by a high one. */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/**
 * `message` cut to `maxChars` characters, with how much was cut
 * (`… [N more characters cut]`), and made safe to log: control characters, bidirectional
 * overrides and line separators become `?`, a lone surrogate U+FFFD (one character for one,
 * so JSON escaping at most doubles what is kept: tab, newline, `"` and `\\`).
 */
export function boundedText(message: string, maxChars: number): string {
  const kept = message.length <= maxChars ? message : message.slice(0, maxChars);
  const safe = kept.replace(UNSAFE_CHARS, '?').replace(LONE_SURROGATE, '\ufffd');
  if (kept === message) return safe;
  return `${safe}… [${message.length - maxChars} more characters cut]`;
}
