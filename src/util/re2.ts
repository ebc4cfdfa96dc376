import { createRequire } from 'node:module';
import type { WrappedRE2Constructor, WrappedRE2Interface } from 're2-wasm/build/wasm/re2.js';

// Google's RE2 compiled to WebAssembly (the `re2-wasm` package): the same engine Envoy's
// `safe_regex` (`google_re2`) compiles patterns with. Its WebAssembly is instantiated
// synchronously when the module loads, so every call below is synchronous. The raw
// `WrappedRE2` is used rather than the package's `RE2` class, which rewrites JavaScript syntax
// (`\u0041`, `(?<name>`) into RE2's before compiling: Envoy does not.
const { WrappedRE2 } = createRequire(import.meta.url)('re2-wasm/build/wasm/re2.js') as { WrappedRE2: WrappedRE2Constructor };

/** A compiled RE2 program (WebAssembly memory, freed with `delete`). */
type Program = WrappedRE2Interface & { delete(): void };

/** A compiled RE2 pattern, matching with RE2's semantics. */
export interface Re2 {
  /** The pattern as given. */
  readonly source: string;
  /** True when the pattern matches somewhere in `input` (as `RegExp.prototype.test`). */
  test(input: string): boolean;
  /** True when the pattern matches the whole of `input` (Envoy's `safe_regex` route and header matching). */
  fullMatch(input: string): boolean;
}

/** Most compiled patterns kept ({@link compileRe2}); the oldest is freed past it. */
const MAX_CACHED = 1024;
const programs = new Map<string, Re2 | Error>();

function compile(pattern: string): Program {
  // Envoy compiles with RE2::Quiet: RE2's default options (UTF-8, case sensitive, `.` without `\n`).
  return new WrappedRE2(pattern, false, false, false) as Program;
}

/**
 * Compiles `pattern` with RE2 itself (the engine Envoy uses), with RE2's default options.
 * Results are cached (at most {@link MAX_CACHED} patterns, the least recently compiled
 * dropped first).
 * @returns the compiled pattern, or an Error carrying RE2's message (e.g.
 *   `invalid repetition size: {1001}`, `invalid escape sequence: \Z`).
 */
export function compileRe2(pattern: string): Re2 | Error {
  const cached = programs.get(pattern);
  if (cached) return cached;
  const program = compile(pattern);
  let out: Re2 | Error;
  if (program.ok()) {
    // The anchored program is compiled on first use: most patterns are only checked.
    let full: Program | undefined;
    out = {
      source: pattern,
      test: (input) => program.match(input, 0, false).index >= 0,
      fullMatch: (input) => (full ??= compile(`^(?:${pattern})$`)).match(input, 0, false).index >= 0,
    };
    forget.set(out, () => {
      program.delete();
      full?.delete();
    });
  } else {
    out = new Error(program.error());
    program.delete();
  }
  if (programs.size >= MAX_CACHED) {
    const [oldest, value] = programs.entries().next().value as [string, Re2 | Error];
    programs.delete(oldest);
    if (!(value instanceof Error)) forget.get(value)?.();
  }
  programs.set(pattern, out);
  return out;
}

/** How to free the WebAssembly programs behind a cached {@link Re2}. */
const forget = new WeakMap<Re2, () => void>();

/**
 * Why Envoy would reject `pattern` as a `safe_regex` (RE2), or undefined when it is
 * acceptable: empty, or rejected by RE2 (syntax, an unsupported escape such as `\Z` or `\k`,
 * a lookaround or backreference, a repeat count above RE2's limit of 1000), with RE2's own
 * message. Not checked: Envoy's program-size limit (runtime `re2.max_program_size.error_level`,
 * 100 by default), as `re2-wasm` does not expose the program size; a proxy that rejects such a
 * pattern NACKs and keeps its last configuration. Verdicts are cached (at most
 * {@link MAX_VERDICTS}); a first check costs about 0.1 ms (RE2 compiles in WebAssembly).
 */
export function re2Problem(pattern: string): string | undefined {
  if (pattern === '') return 'is an empty regular expression';
  const known = verdicts.get(pattern);
  if (known !== undefined) return known || undefined;
  // Only the verdict is kept (a short string), not the program: a mesh checks many patterns
  // and matches with few.
  const program = compile(pattern);
  let verdict = '';
  if (!program.ok()) {
    const hint = RE2_UNSUPPORTED.test(pattern) ? ' (RE2 has no lookaround or backreference)' : '';
    verdict = `${JSON.stringify(pattern)} is not a valid RE2 regular expression: ${program.error()}${hint}`;
  }
  program.delete();
  if (verdicts.size >= MAX_VERDICTS) verdicts.delete(verdicts.keys().next().value as string);
  verdicts.set(pattern, verdict);
  return verdict || undefined;
}

/** Most {@link re2Problem} verdicts kept (`''` = valid); the oldest is dropped past it. */
const MAX_VERDICTS = 65_536;
const verdicts = new Map<string, string>();

/** A lookaround or backreference (`(?=`, `(?!`, `(?<=`, `(?<!`, `\1`, `\k<name>`): syntax of other engines that RE2 does not have. */
export const RE2_UNSUPPORTED = /\(\?<?[=!]|\\[1-9]|\\k</;

/** An HTTP header field name (RFC 9110 token, lower or upper case), or a pseudo-header such as `:authority`. */
export const HTTP_HEADER_NAME = /^:?[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
