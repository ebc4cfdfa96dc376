/**
 * The log set-up of the long-running commands (`trellis controller`, `trellis injector`,
 * `trellis lab supervise`): pino, one record a line on stdout, as JSON (for a log collector) or
 * as text for a person (pino-pretty, one line a record too), chosen by `--log-format` and by
 * default text when stdout is a terminal, JSON otherwise.
 */
import { createRequire } from 'node:module';
import { Option, type Command } from 'commander';
import pino, { type Logger } from 'pino';

/** pino-pretty (about 0.1 s to load) is loaded for the text format only. */
const requireModule = createRequire(import.meta.url);

/** The values of `--log-format`. */
export const LOG_FORMATS = ['text', 'json'] as const;
/** `--log-format`: `text` (pino-pretty, for a terminal) or `json` (pino's own lines). */
export type LogFormat = (typeof LOG_FORMATS)[number];
/** The values of `--log-level` (pino's levels). */
export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal'] as const;

/** The options {@link addLogOptions} adds, as commander parses them (`format` undefined: not given). */
export interface LogOptions {
  logLevel: string;
  logFormat?: LogFormat;
}

/**
 * Adds `--log-level` and `--log-format` to `command` (its `opts()` then carry {@link LogOptions}).
 * @returns `command`.
 */
export function addLogOptions(command: Command): Command {
  return command
    .addOption(new Option('--log-level <level>', 'log level').choices(LOG_LEVELS).default('info'))
    .addOption(new Option('--log-format <format>', 'log lines as text for a person or as JSON (default: text when stdout is a terminal, else json)').choices(LOG_FORMATS));
}

/** The format used when `--log-format` is not given: text on a terminal (`stream.isTTY`), else JSON. */
export function defaultLogFormat(stream: { isTTY?: boolean } = process.stdout): LogFormat {
  return stream.isTTY === true ? 'text' : 'json';
}

/**
 * C0 and C1 control characters, bidirectional overrides, isolates and marks, and the line and
 * paragraph separators: what a text log line shows escaped (`\n`, `\u001b`, `\u202e`), so a message
 * stays on its line and cannot move the terminal's cursor or reorder what follows.
 */
const TERMINAL_UNSAFE = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]/g;

/** The {@link TERMINAL_UNSAFE} characters that `JSON.stringify` leaves as they are. */
const NON_JSON_ESCAPED = /[\u007f-\u009f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]/g;

/** One character as its JSON escape: `\n`, `\t`, else `\uXXXX`. */
function escapeOne(ch: string): string {
  const escaped = JSON.stringify(ch).slice(1, -1);
  return escaped.length > 1 ? escaped : `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`;
}

/** `text` with every {@link TERMINAL_UNSAFE} character written as its JSON escape (`\n`, `\u001b`, `\u202e`). */
export function escapeForTerminal(text: string): string {
  return text.replace(TERMINAL_UNSAFE, escapeOne);
}

/**
 * The logger of a long-running command: pino at `options.logLevel`, writing to `destination`
 * (stdout) synchronously, so a `fatal` line before `process.exit` is written.
 * - `json`: pino's lines, unchanged (what the tests and log collectors parse).
 * - `text`: `[2026-12-02 02:24:31.600 +0000] WARN: message {"field":…}`: the time, the level,
 *   the message (control characters escaped: {@link escapeForTerminal}) and the other fields as
 *   one-line JSON (an `err` object too, with its stack, escaped: never on lines of its own),
 *   without `pid` and `hostname`; in colour when `destination` is a terminal that supports it.
 *   As long as the JSON line, give or take the time and level, so the same bounds hold (every
 *   field that carries text from outside is cut where it is logged).
 * @param options.logFormat undefined: {@link defaultLogFormat} of `destination`.
 */
export function createLogger(options: LogOptions, destination: { write(line: string): unknown; isTTY?: boolean } = process.stdout): Logger {
  const format = options.logFormat ?? defaultLogFormat(destination);
  // stdout through pino's own synchronous writer (SonicBoom on fd 1), as pino writes by default.
  const out = destination === process.stdout ? pino.destination({ dest: 1, sync: true }) : destination;
  if (format === 'json') return pino({ level: options.logLevel }, out);
  const { prettyFactory } = requireModule('pino-pretty') as typeof import('pino-pretty');
  const prettify = prettyFactory({
    singleLine: true,
    colorize: destination.isTTY === true && process.env.NO_COLOR === undefined,
    translateTime: 'SYS:standard',
    ignore: 'pid,hostname',
    // No key is printed as an error block of its own lines: `err` stays in the one-line JSON.
    errorLikeObjectKeys: [],
    messageFormat: (log, messageKey) => escapeForTerminal(String(log[messageKey] ?? '')),
  });
  // The fields' JSON escapes C0 controls but not C1, bidirectional or separator characters.
  return pino({ level: options.logLevel }, { write: (line: string) => out.write(prettify(line).replace(NON_JSON_ESCAPED, escapeOne)) });
}
