import { createRequire } from 'node:module';
import type { WrappedRE2Constructor, WrappedRE2Interface } from 're2-wasm/build/wasm/re2.js';

// Google's RE2 compiled to WebAssembly (the `re2-wasm` package): the same engine Envoy's
// `safe_regex` (`google_re2`) compiles patterns with. Its WebAssembly is instantiated
// synchronously when the module loads, so every call below is synchronous. The raw
// `WrappedRE2` is used rather than the package's `RE2` class, which rewrites JavaScript syntax
// (`\u0041`, `(?<name>`) into RE2's before compiling: Envoy does not.
const requireHere = createRequire(import.meta.url);
const RE2_WASM = requireHere.resolve('re2-wasm/build/wasm/re2.js');
let WrappedRE2 = loadRe2Wasm();

/**
 * A fresh instance of re2-wasm: its heap is a fixed 16 MiB, and once a compile exhausts it the
 * instance has aborted for good (every later call throws), so {@link compile} loads another.
 */
function loadRe2Wasm(): WrappedRE2Constructor {
  delete requireHere.cache[RE2_WASM];
  return (requireHere(RE2_WASM) as { WrappedRE2: WrappedRE2Constructor }).WrappedRE2;
}

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

/**
 * Compiles with RE2's default options, as Envoy does (RE2::Quiet: UTF-8, case sensitive, `.`
 * without `\n`).
 * @throws the WebAssembly.RuntimeError of an instance that ran out of memory (a fresh instance
 *   is loaded for the next call).
 */
function compile(pattern: string): Program {
  try {
    return new WrappedRE2(pattern, false, false, false) as Program;
  } catch (err) {
    WrappedRE2 = loadRe2Wasm();
    throw err;
  }
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
 * Envoy's limit on a `safe_regex` program (runtime `re2.max_program_size.error_level`) as the
 * bootstraps Trellis writes set it (Envoy's own default is 100, which `[a-z0-9]{1,120}` already
 * exceeds). {@link re2Problem} refuses a pattern whose estimated program is larger.
 */
export const MAX_RE2_PROGRAM_SIZE = 4_096;

/**
 * An upper estimate of the size of `pattern`'s RE2 program (instructions, as Envoy's
 * `re2.max_program_size` counts them), from its syntax alone: every atom is weighed at least
 * as much as RE2 compiles it to (a literal 1, an escape 4 to 16, a bracket class 2 per
 * ASCII item and 16 per wider one), and an atom that spans most of Unicode (`.`, `\\D`, `[^…]`)
 * at 16, which also bounds what re2-wasm spends compiling it (about 60 µs a copy), a group is the sum of its branches, and a repeat `{n,m}` is expanded as RE2 does (n
 * copies, then m - n optional ones). It never compiles, so it is safe on any input; it exists
 * because `re2-wasm` neither reports the program size nor survives a pattern that outgrows its
 * fixed 16 MiB heap. Invalid syntax is estimated as far as it goes (RE2 reports it).
 */
export function estimateRe2ProgramSize(pattern: string): number {
  // One frame per open group: the weight of its finished items and of the last atom (which a
  // quantifier applies to).
  const frames: Array<{ sum: number; last: number }> = [{ sum: 0, last: 0 }];
  const atom = (weight: number): void => {
    const f = frames[frames.length - 1]!;
    f.sum += f.last;
    f.last = weight;
  };
  let i = 0;
  while (i < pattern.length) {
    const c = pattern[i]!;
    const f = frames[frames.length - 1]!;
    if (c === '\\') {
      const [weight, length] = escapeWeight(pattern, i);
      atom(weight);
      i += length;
    } else if (c === '[') {
      const [weight, length] = classWeight(pattern, i);
      atom(weight);
      i += length;
    } else if (c === '(') {
      const flagsOnly = /^\(\?[a-zA-Z-]*\)/.exec(pattern.slice(i, i + 16));
      if (flagsOnly) i += flagsOnly[0].length;
      else {
        const opener = /^\((\?(P?<[^>]*>|[a-zA-Z-]*:))?/.exec(pattern.slice(i, i + 256))![0];
        frames.push({ sum: 0, last: 0 });
        i += opener.length;
      }
    } else if (c === ')' && frames.length > 1) {
      frames.pop();
      atom(f.sum + f.last + 2);
      i++;
    } else if (c === '|') {
      f.sum += f.last + 2;
      f.last = 0;
      i++;
    } else if (c === '*' || c === '+' || c === '?') {
      f.last += 3;
      i += pattern[i + 1] === '?' ? 2 : 1;
    } else if (c === '{' && /^\{\d+(,\d*)?\}/.test(pattern.slice(i, i + 24))) {
      const [, min, comma, max] = /^\{(\d+)(,(\d*))?\}/.exec(pattern.slice(i, i + 24))!;
      const n = Number(min);
      const m = comma === undefined ? n : max === '' ? n + 1 : Math.max(n, Number(max));
      f.last = n * f.last + (m - n) * (f.last + 3);
      i += min!.length + (comma?.length ?? 0) + 2;
      if (pattern[i] === '?') i++;
    } else {
      atom(c === '.' ? 16 : 1);
      i += c.codePointAt(0)! > 0xffff ? 2 : 1;
    }
  }
  let total = 8;
  for (const f of frames) total += f.sum + f.last + 2;
  return total;
}

/** The estimated program size and length of the escape at `pattern[at]` (a backslash). */
function escapeWeight(pattern: string, at: number): [weight: number, length: number] {
  const next = pattern[at + 1] ?? '';
  if (next === 'p' || next === 'P') {
    const named = pattern[at + 2] === '{' ? pattern.indexOf('}', at + 2) : -1;
    return [16, named > 0 ? named - at + 1 : 3];
  }
  if (next === 'x') {
    const braced = pattern[at + 2] === '{' ? pattern.indexOf('}', at + 2) : -1;
    return [4, braced > 0 ? braced - at + 1 : 4];
  }
  if (next === 'Q') {
    const end = pattern.indexOf('\\E', at + 2);
    const text = end < 0 ? pattern.length - at - 2 : end - at - 2;
    return [Math.max(1, text * 4), text + (end < 0 ? 2 : 4)];
  }
  if ('dws'.includes(next)) return [8, 2];
  if ('DWS'.includes(next)) return [16, 2];
  if (/[0-7]/.test(next)) return [4, /^[0-7]{1,3}/.exec(pattern.slice(at + 1))![0].length + 1];
  return [4, 2];
}

/** The estimated program size and length of the bracket class at `pattern[at]` (`[`). */
function classWeight(pattern: string, at: number): [weight: number, length: number] {
  let i = at + 1;
  let weight = 2;
  if (pattern[i] === '^') {
    weight = 16;
    i++;
  }
  let first = true;
  while (i < pattern.length && (pattern[i] !== ']' || first)) {
    first = false;
    const posix = /^\[:\^?[a-z]+:\]/.exec(pattern.slice(i, i + 16));
    if (posix) {
      weight += 8;
      i += posix[0].length;
    } else if (pattern[i] === '\\') {
      const [w, length] = escapeWeight(pattern, i);
      weight += w;
      i += length;
    } else {
      // A range or a character; one beyond ASCII is several UTF-8 instructions.
      const wide = pattern.codePointAt(i)! > 0x7f || (pattern[i + 1] === '-' && (pattern.codePointAt(i + 2) ?? 0) > 0x7f);
      weight += wide ? 16 : 2;
      i += pattern[i + 1] === '-' && pattern[i + 2] !== ']' && i + 2 < pattern.length ? 3 : 1;
    }
  }
  return [weight, i - at + 1];
}

/**
 * Why Envoy would reject `pattern` as a `safe_regex` (RE2), or undefined when it is
 * acceptable: empty; estimated larger than {@link MAX_RE2_PROGRAM_SIZE}
 * ({@link estimateRe2ProgramSize}, checked first, so that RE2 never compiles such a pattern);
 * or rejected by RE2 (syntax, an unsupported escape such as `\Z` or `\k`, a lookaround or
 * backreference, a repeat count above RE2's limit of 1000), with RE2's own message. Verdicts
 * are cached (at most {@link MAX_VERDICTS}); a first check costs about 0.1 ms (RE2 compiles in
 * WebAssembly).
 */
export function re2Problem(pattern: string): string | undefined {
  if (pattern === '') return 'is an empty regular expression';
  const known = verdicts.get(pattern);
  if (known !== undefined) return known || undefined;
  const quoted = JSON.stringify(pattern.length > 200 ? `${pattern.slice(0, 200)}…` : pattern);
  let verdict = '';
  const estimate = estimateRe2ProgramSize(pattern);
  if (estimate > MAX_RE2_PROGRAM_SIZE) {
    verdict = `${quoted} is too large: its RE2 program is estimated at ${estimate} instructions, over the ${MAX_RE2_PROGRAM_SIZE} Envoy is allowed (re2.max_program_size.error_level)`;
  } else {
    // Only the verdict is kept (a short string), not the program: a mesh checks many patterns
    // and matches with few.
    try {
      const classProblem = unicodeClassProblem(pattern);
      // Unicode classes are checked alone, then stand in as `\d` (valid wherever they are):
      // re2-wasm takes about 12 ms per copy of `\p{L}` and runs out of heap on `\p{L}{100}`.
      const program = compile(classProblem === undefined ? withUnicodeClassesAsDigits(pattern) : pattern);
      if (classProblem !== undefined) verdict = `${quoted} is not a valid RE2 regular expression: ${classProblem}`;
      else if (!program.ok()) {
        const hint = RE2_UNSUPPORTED.test(pattern) ? ' (RE2 has no lookaround or backreference)' : '';
        verdict = `${quoted} is not a valid RE2 regular expression: ${program.error()}${hint}`;
      }
      program.delete();
    } catch (err) {
      // re2-wasm aborts when its heap is exhausted; fail closed.
      verdict = `${quoted} could not be checked by RE2: ${String(err instanceof Error ? err.message : err).slice(0, 200)}`;
    }
  }
  if (verdicts.size >= MAX_VERDICTS) verdicts.delete(verdicts.keys().next().value as string);
  verdicts.set(pattern, verdict);
  return verdict || undefined;
}

/** Unicode class escapes (`\pL`, `\p{Greek}`, `\P{^Han}`) of `pattern`, outside `\Q…\E`. */
function unicodeClassEscapes(pattern: string): Array<{ at: number; text: string }> {
  const out: Array<{ at: number; text: string }> = [];
  for (let i = 0; i < pattern.length; i++) {
    if (pattern[i] !== '\\') continue;
    const next = pattern[i + 1];
    if (next === 'Q') {
      const end = pattern.indexOf('\\E', i + 2);
      if (end < 0) break;
      i = end + 1;
    } else if (next === 'p' || next === 'P') {
      const close = pattern[i + 2] === '{' ? pattern.indexOf('}', i + 2) : i + 2;
      if (close < 0) break;
      out.push({ at: i, text: pattern.slice(i, close + 1) });
      i = close;
    } else i++;
  }
  return out;
}

/** RE2's complaint about the first invalid Unicode class escape of `pattern`, each compiled alone (and remembered). */
function unicodeClassProblem(pattern: string): string | undefined {
  for (const { text } of unicodeClassEscapes(pattern)) {
    let known = classVerdicts.get(text);
    if (known === undefined) {
      const program = compile(text);
      known = program.ok() ? '' : program.error();
      program.delete();
      if (classVerdicts.size >= MAX_VERDICTS) classVerdicts.delete(classVerdicts.keys().next().value as string);
      classVerdicts.set(text, known);
    }
    if (known) return known;
  }
  return undefined;
}
const classVerdicts = new Map<string, string>();

/** `pattern` with every Unicode class escape replaced by `\d`, which RE2 accepts wherever a class escape may stand. */
function withUnicodeClassesAsDigits(pattern: string): string {
  let out = '';
  let from = 0;
  for (const { at, text } of unicodeClassEscapes(pattern)) {
    out += `${pattern.slice(from, at)}\\d`;
    from = at + text.length;
  }
  return out + pattern.slice(from);
}

/** Most {@link re2Problem} verdicts kept (`''` = valid); the oldest is dropped past it. */
const MAX_VERDICTS = 65_536;
const verdicts = new Map<string, string>();

/** A lookaround or backreference (`(?=`, `(?!`, `(?<=`, `(?<!`, `\1`, `\k<name>`): syntax of other engines that RE2 does not have. */
export const RE2_UNSUPPORTED = /\(\?<?[=!]|\\[1-9]|\\k</;

/** An HTTP header field name (RFC 9110 token, lower or upper case), or a pseudo-header such as `:authority`. */
export const HTTP_HEADER_NAME = /^:?[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
