/**
 * Parses a Go duration such as `24h`, `1h30m`, `90s` into seconds.
 * @returns undefined when the text is not a duration.
 */
export function parseGoDuration(text: string): number | undefined {
  const re = /(\d+(?:\.\d+)?)(h|ms|m|s)/gy;
  let total = 0;
  let matched = 0;
  for (let m = re.exec(text); m; m = re.exec(text)) {
    const n = Number(m[1]);
    total += m[2] === 'h' ? n * 3600 : m[2] === 'm' ? n * 60 : m[2] === 's' ? n : n / 1000;
    matched = re.lastIndex;
  }
  return matched === text.length && text.length > 0 ? total : undefined;
}
