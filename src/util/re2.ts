const regexCache = new Map<string, RegExp | Error>();

/**
 * Compiles an RE2 pattern as a JavaScript RegExp (an approximation: leading `(?i)`/`(?s)`
 * become flags, `(?P<name>` becomes `(?<name>`, `\z` becomes `$`).
 * @returns the RegExp, or the Error the JavaScript engine threw.
 */
export function compileRe2(pattern: string): RegExp | Error {
  const cached = regexCache.get(pattern);
  if (cached) return cached;
  let source = pattern;
  let flags = 'u';
  const lead = /^\(\?([ims]+)\)/.exec(source);
  if (lead) {
    source = source.slice(lead[0].length);
    for (const f of lead[1]!) if (!flags.includes(f)) flags += f;
  }
  source = source.replace(/\(\?P</g, '(?<').replace(/\\z/g, '$');
  let out: RegExp | Error;
  try {
    out = new RegExp(source, flags);
  } catch {
    try {
      out = new RegExp(source, flags.replace('u', ''));
    } catch (err) {
      out = err instanceof Error ? err : new Error(String(err));
    }
  }
  regexCache.set(pattern, out);
  return out;
}

/**
 * Why Envoy would reject `pattern` as a `safe_regex` (RE2), or undefined when it is
 * acceptable: empty, a lookaround or backreference (RE2 has neither), or a syntax error.
 * The syntax check compiles the pattern as a JavaScript RegExp ({@link compileRe2}), an
 * approximation of RE2.
 */
export function re2Problem(pattern: string): string | undefined {
  if (pattern === '') return 'is an empty regular expression';
  if (/\(\?<?[=!]|\\[1-9]/.test(pattern)) return `${JSON.stringify(pattern)} uses a lookaround or backreference, which RE2 does not support`;
  const compiled = compileRe2(pattern);
  return compiled instanceof Error ? `${JSON.stringify(pattern)} is not a valid regular expression: ${compiled.message}` : undefined;
}

/** An HTTP header field name (RFC 9110 token, lower or upper case), or a pseudo-header such as `:authority`. */
export const HTTP_HEADER_NAME = /^:?[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
