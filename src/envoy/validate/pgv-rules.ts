/**
 * The protoc-gen-validate (PGV) rules interpreter: checks a decoded Envoy resource against the
 * constraints written in the Envoy protos themselves: the `(validate.rules)` field options, `(validate.required)` on
 * oneofs and `(validate.disabled)` / `(validate.ignored)` on messages, as protobufjs parsed them
 * from the `.proto` files (`parsedOptions`). Nothing here restates a rule by hand: a rule the
 * protos do not carry is not checked (cross-resource rules live in `cross-resource.ts`).
 *
 * Input form: the DECODED form (what `decodeMessage`/`decodeAny` in `src/api/codec.ts` return
 * for the bytes that go on the wire): snake_case field names, enums as names (an unknown enum
 * number stays a number), 64-bit integers as strings, bytes as base64 strings, nested `Any`
 * decoded with an `@type` key, fields at their default value absent. Validating what was
 * encoded (rather than the object handed to the encoder) is the faithful choice: a value
 * protobufjs dropped or coerced is checked as the proxy will see it. {@link validateEncoded}
 * does the decoding.
 *
 * Semantics follow PGV (protoc-gen-validate `validate/validate.proto`):
 * - a scalar field outside a oneof is checked even when absent (as its zero value), unless the
 *   rule set says `ignore_empty`; a scalar field inside a oneof (or proto3 `optional`) only
 *   when set;
 * - a message field is checked only when set, except `message.required`,
 *   `duration.required`, `timestamp.required` and `any.required`;
 * - rules on a wrapper field (`google.protobuf.UInt32Value` …) apply to its `.value`;
 * - `repeated.items` applies to each element, `map.keys`/`map.values` to each pair;
 * - nested messages and every `Any` (by its `@type`) are checked recursively unless
 *   `message.skip` is set.
 *
 * Approximations: `pattern` (RE2 in PGV) is compiled as a JavaScript RegExp; timestamp rules
 * and a few rarely used string formats (`email`, `uri`, `uri_ref`) are not checked.
 *
 * Pure: no I/O (the protos are loaded once by `loadEnvoyRoot`). What is read of the protos'
 * options is kept in a {@link PgvRules} the caller owns, not in this module. The shortcut that
 * decides a message valid from a valid one alike it, without running the rules, is `alike.ts`.
 */
import { compileRe2 } from '../../util/re2.js';
import protobuf from 'protobufjs';
import { decodeMessage, messageType } from '../../api/codec.js';

/**
 * One broken constraint.
 * - `path`: field path from the resource root, with `[i]` for repeated elements, `[key]` for
 *   map entries and `<MessageName>` after an `Any` field, e.g.
 *   `filter_chains[0].filters[1].typed_config<TcpProxy>.stat_prefix`. The empty string is the
 *   resource itself.
 * - `rule`: `<kind>.<rule>` in PGV's own field names, e.g. `string.min_len`,
 *   `repeated.min_items`, `uint32.gte`, `enum.defined_only`, `duration.gt`, `any.in`,
 *   `message.required`, `oneof.required` (for `(validate.required)` on a oneof).
 * - `message`: what was expected and what was found.
 */
export interface RuleViolation {
  readonly path: string;
  readonly rule: string;
  readonly message: string;
}

/** A PGV `FieldRules` message as protobufjs parses it from the option text (snake_case keys). */
export type FieldRules = Record<string, unknown>;
type Rules = FieldRules;
type Obj = Record<string, unknown>;

/** What of a message type's own options the walk needs, read once per type. */
interface MessagePlan {
  /** `(validate.disabled)` or `(validate.ignored)`: nothing inside is checked. */
  readonly skip: boolean;
  /** Oneofs marked `(validate.required)`. */
  readonly requiredOneofs: readonly protobuf.OneOf[];
  /** Every field in declaration order with its merged `(validate.rules)` (null: none). */
  readonly fields: readonly { readonly field: protobuf.Field; readonly rules: Rules | null }[];
}

/**
 * The PGV constraints of the loaded protos as the rules interpreter uses them: each field's
 * merged `(validate.rules)` and each message type's options, read from protobufjs' reflection
 * objects on first use and kept by object (the loaded protos do not change; a type no longer
 * reachable is forgotten with it). The caller owns one for as long as it validates
 * (`ResourceCheckCache` holds one); a fresh one gives the same answers, reading the options again.
 */
export class PgvRules {
  private readonly byField = new WeakMap<protobuf.Field, Rules | null>();
  private readonly byType = new WeakMap<protobuf.Type, MessagePlan>();

  /** Every `(validate.rules)` entry of `field`'s parsed options merged into one rule set; null when it has none. */
  fieldRules(field: protobuf.Field): FieldRules | null {
    const cached = this.byField.get(field);
    if (cached !== undefined) return cached;
    let merged: Rules | null = null;
    for (const option of (field.parsedOptions as Obj[] | undefined) ?? []) {
      const r = option['(validate.rules)'];
      if (r && typeof r === 'object') merged = deepMerge(merged ?? {}, r as Rules);
    }
    this.byField.set(field, merged);
    return merged;
  }

  /** What the walk reads of `type`: whether it is skipped, its required oneofs, its fields with their rules. */
  messagePlan(type: protobuf.Type): MessagePlan {
    let plan = this.byType.get(type);
    if (!plan) {
      plan = {
        skip: hasOption(type, '(validate.disabled)') || hasOption(type, '(validate.ignored)'),
        requiredOneofs: type.oneofsArray.filter((o) => hasOption(o, '(validate.required)')),
        fields: type.fieldsArray.map((field) => ({ field, rules: this.fieldRules(field) })),
      };
      this.byType.set(type, plan);
    }
    return plan;
  }
}

function deepMerge(a: Rules, b: Rules): Rules {
  const out: Rules = { ...a };
  for (const [k, v] of Object.entries(b)) {
    const prev = out[k];
    out[k] =
      prev && v && typeof prev === 'object' && typeof v === 'object' && !Array.isArray(prev) && !Array.isArray(v)
        ? deepMerge(prev as Rules, v as Rules)
        : v;
  }
  return out;
}

/** True when a reflection object (oneof or message) carries the option `name` set to true. */
function hasOption(obj: protobuf.ReflectionObject, name: string): boolean {
  if (obj.options?.[name] === true) return true;
  return ((obj.parsedOptions as Obj[] | undefined) ?? []).some((o) => o[name] === true);
}

/** Neither undefined nor null: a field the decoded (or object) form sets. */
export function isSet(v: unknown): boolean {
  return v !== undefined && v !== null;
}

function join(path: string, field: string): string {
  return path === '' ? field : `${path}.${field}`;
}

function show(v: unknown): string {
  const s = typeof v === 'string' ? JSON.stringify(v) : JSON.stringify(v) ?? String(v);
  return s.length > 80 ? `${s.slice(0, 77)}...` : s;
}

/** The scalar kind of each wrapper message (`google.protobuf.UInt32Value` …), by full name: its rules apply to its `.value`. */
export const WRAPPER_KIND: Readonly<Record<string, string>> = {
  '.google.protobuf.DoubleValue': 'double',
  '.google.protobuf.FloatValue': 'float',
  '.google.protobuf.Int64Value': 'int64',
  '.google.protobuf.UInt64Value': 'uint64',
  '.google.protobuf.Int32Value': 'int32',
  '.google.protobuf.UInt32Value': 'uint32',
  '.google.protobuf.BoolValue': 'bool',
  '.google.protobuf.StringValue': 'string',
  '.google.protobuf.BytesValue': 'bytes',
};

/** Messages whose content no rule reaches (`google.protobuf.Struct`, `Value`, `ListValue`), by full name. */
export const UNSTRUCTURED: ReadonlySet<string> = new Set(['.google.protobuf.Struct', '.google.protobuf.Value', '.google.protobuf.ListValue']);

const BIG_KINDS: ReadonlySet<string> = new Set(['int64', 'uint64', 'sint64', 'fixed64', 'sfixed64']);
/** The numeric scalar kinds (PGV names its rule kinds after them). */
export const NUMERIC_KINDS: ReadonlySet<string> = new Set(['int32', 'uint32', 'sint32', 'fixed32', 'sfixed32', 'double', 'float', ...BIG_KINDS]);

/** Zero value of a scalar proto type as the decoded form would show it. */
function zeroOf(type: string): unknown {
  if (type === 'string' || type === 'bytes') return '';
  if (type === 'bool') return false;
  if (BIG_KINDS.has(type)) return '0';
  return 0;
}

/** PGV's well-known regexes (validate.proto `KnownRegex`), strict and loose. */
const HEADER_NAME_STRICT = /^:?[0-9a-zA-Z!#$%&'*+\-.^_|~`]+$/;
const HEADER_VALUE_STRICT = /^[^\u0000-\u0008\u000A-\u001F\u007F]*$/;
const HEADER_LOOSE = /^[^\u0000\u000A\u000D]*$/;


function toBig(v: unknown): bigint | undefined {
  try {
    if (typeof v === 'bigint') return v;
    if (typeof v === 'number' && Number.isInteger(v)) return BigInt(v);
    if (typeof v === 'string' && /^-?\d+$/.test(v)) return BigInt(v);
    if (v && typeof v === 'object' && 'low' in v && 'high' in v) return BigInt(String(v)); // a Long
  } catch {
    return undefined;
  }
  return undefined;
}

/** Numbers compared as bigint (64-bit kinds, durations in ns) or as JS numbers. */
type Num = number | bigint;

function cmp(a: Num, b: Num): number {
  if (typeof a === 'bigint' || typeof b === 'bigint') {
    const x = typeof a === 'bigint' ? a : BigInt(Math.trunc(a));
    const y = typeof b === 'bigint' ? b : BigInt(Math.trunc(b));
    return x < y ? -1 : x > y ? 1 : 0;
  }
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * PGV numeric range semantics: with a lower bound (`gt`/`gte`) and an upper bound (`lt`/`lte`)
 * where upper > lower the value must lie inside; where upper <= lower it must lie outside
 * (an "exclusive range"). Pushes at most one violation naming the broken bound.
 */
function checkRange(
  kind: string,
  r: Rules,
  value: Num,
  conv: (x: unknown) => Num | undefined,
  fmt: (x: Num) => string,
  path: string,
  out: RuleViolation[],
): void {
  const lowKey = 'gt' in r ? 'gt' : 'gte' in r ? 'gte' : undefined;
  const highKey = 'lt' in r ? 'lt' : 'lte' in r ? 'lte' : undefined;
  const low = lowKey ? conv(r[lowKey]) : undefined;
  const high = highKey ? conv(r[highKey]) : undefined;
  const aboveLow = low === undefined || (lowKey === 'gt' ? cmp(value, low) > 0 : cmp(value, low) >= 0);
  const belowHigh = high === undefined || (highKey === 'lt' ? cmp(value, high) < 0 : cmp(value, high) <= 0);
  const words: Record<string, string> = { gt: '>', gte: '>=', lt: '<', lte: '<=' };
  if (low !== undefined && high !== undefined && cmp(high, low) <= 0) {
    if (!aboveLow && !belowHigh) {
      out.push({
        path,
        rule: `${kind}.${lowKey}`,
        message: `must be ${words[lowKey!]} ${fmt(low)} or ${words[highKey!]} ${fmt(high)}, got ${fmt(value)}`,
      });
    }
    return;
  }
  if (!aboveLow) out.push({ path, rule: `${kind}.${lowKey}`, message: `must be ${words[lowKey!]} ${fmt(low!)}, got ${fmt(value)}` });
  else if (!belowHigh) out.push({ path, rule: `${kind}.${highKey}`, message: `must be ${words[highKey!]} ${fmt(high!)}, got ${fmt(value)}` });
}

function checkConstInNotIn(
  kind: string,
  r: Rules,
  value: Num,
  conv: (x: unknown) => Num | undefined,
  fmt: (x: Num) => string,
  path: string,
  out: RuleViolation[],
): void {
  if ('const' in r) {
    const c = conv(r['const']);
    if (c !== undefined && cmp(value, c) !== 0) out.push({ path, rule: `${kind}.const`, message: `must be ${fmt(c)}, got ${fmt(value)}` });
  }
  if (!('in' in r || 'not_in' in r)) return;
  const list = (k: string): Num[] => [r[k]].flat().filter((x) => x !== undefined).map(conv).filter((x): x is Num => x !== undefined);
  if ('in' in r) {
    const allowed = list('in');
    if (!allowed.some((a) => cmp(a, value) === 0)) out.push({ path, rule: `${kind}.in`, message: `must be one of [${allowed.map(fmt).join(', ')}], got ${fmt(value)}` });
  }
  if ('not_in' in r) {
    const denied = list('not_in');
    if (denied.some((a) => cmp(a, value) === 0)) out.push({ path, rule: `${kind}.not_in`, message: `must not be one of [${denied.map(fmt).join(', ')}], got ${fmt(value)}` });
  }
}

function toNumber(x: unknown): Num | undefined {
  if (typeof x === 'number') return x;
  if (typeof x === 'string' && x !== '' && !Number.isNaN(Number(x))) return Number(x);
  if (x === 'NaN') return NaN;
  return undefined;
}

function numberRules(kind: string, r: Rules, raw: unknown, path: string, out: RuleViolation[]): void {
  // Top-level converters, no closures: this runs for every numeric field with rules.
  const conv = BIG_KINDS.has(kind) ? toBig : toNumber;
  const value = conv(raw);
  if (value === undefined) {
    out.push({ path, rule: `${kind}.type`, message: `expected a ${kind}, got ${show(raw)}` });
    return;
  }
  checkConstInNotIn(kind, r, value, conv, String, path, out);
  checkRange(kind, r, value, conv, String, path, out);
}

/** A numeric option of a rule set (`min_len`, `len`, …) as a number, or undefined when absent. */
function ruleNumber(r: Rules, k: string): number | undefined {
  const x = r[k];
  return typeof x === 'number' ? x : x !== undefined ? Number(x) : undefined;
}

function violation(out: RuleViolation[], path: string, rule: string, message: string): void {
  out.push({ path, rule, message });
}

/** Length of `s` in Unicode code points (PGV's `len`/`min_len`/`max_len` count characters). */
function codePoints(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) i++;
    }
    n++;
  }
  return n;
}

function stringRules(r: Rules, raw: unknown, path: string, out: RuleViolation[]): void {
  const s = typeof raw === 'string' ? raw : String(raw);
  // Most string rules are a `min_len` or none: count code points and bytes only when asked.
  const chars = r['len'] !== undefined || r['min_len'] !== undefined || r['max_len'] !== undefined ? codePoints(s) : 0;
  const bytes = r['len_bytes'] !== undefined || r['min_bytes'] !== undefined || r['max_bytes'] !== undefined ? Buffer.byteLength(s, 'utf8') : 0;
  if (r['const'] !== undefined && s !== r['const']) violation(out, path, 'string.const', `must be ${show(r['const'])}, got ${show(s)}`);
  if (ruleNumber(r, 'len') !== undefined && chars !== ruleNumber(r, 'len')) violation(out, path, 'string.len', `must be ${ruleNumber(r, 'len')} characters long, got ${chars}`);
  if (ruleNumber(r, 'min_len') !== undefined && chars < ruleNumber(r, 'min_len')!) violation(out, path, 'string.min_len', `must be at least ${ruleNumber(r, 'min_len')} characters long, got ${chars}${chars === 0 ? ' (empty)' : ''}`);
  if (ruleNumber(r, 'max_len') !== undefined && chars > ruleNumber(r, 'max_len')!) violation(out, path, 'string.max_len', `must be at most ${ruleNumber(r, 'max_len')} characters long, got ${chars}`);
  if (ruleNumber(r, 'len_bytes') !== undefined && bytes !== ruleNumber(r, 'len_bytes')) violation(out, path, 'string.len_bytes', `must be ${ruleNumber(r, 'len_bytes')} bytes long, got ${bytes}`);
  if (ruleNumber(r, 'min_bytes') !== undefined && bytes < ruleNumber(r, 'min_bytes')!) violation(out, path, 'string.min_bytes', `must be at least ${ruleNumber(r, 'min_bytes')} bytes long, got ${bytes}`);
  if (ruleNumber(r, 'max_bytes') !== undefined && bytes > ruleNumber(r, 'max_bytes')!) violation(out, path, 'string.max_bytes', `must be at most ${ruleNumber(r, 'max_bytes')} bytes long, got ${bytes}`);
  if (typeof r['pattern'] === 'string') {
    const re = compileRe2(r['pattern']);
    if (!(re instanceof Error) && !re.test(s)) violation(out, path, 'string.pattern', `must match ${show(r['pattern'])}, got ${show(s)}`);
  }
  if (typeof r['prefix'] === 'string' && !s.startsWith(r['prefix'])) violation(out, path, 'string.prefix', `must start with ${show(r['prefix'])}, got ${show(s)}`);
  if (typeof r['suffix'] === 'string' && !s.endsWith(r['suffix'])) violation(out, path, 'string.suffix', `must end with ${show(r['suffix'])}, got ${show(s)}`);
  if (typeof r['contains'] === 'string' && !s.includes(r['contains'])) violation(out, path, 'string.contains', `must contain ${show(r['contains'])}, got ${show(s)}`);
  if (typeof r['not_contains'] === 'string' && s.includes(r['not_contains'])) violation(out, path, 'string.not_contains', `must not contain ${show(r['not_contains'])}`);
  if (r['in'] !== undefined) {
    const allowed = [r['in']].flat().map(String);
    if (!allowed.includes(s)) violation(out, path, 'string.in', `must be one of ${show(allowed)}, got ${show(s)}`);
  }
  if (r['not_in'] !== undefined) {
    const denied = [r['not_in']].flat().map(String);
    if (denied.includes(s)) violation(out, path, 'string.not_in', `must not be one of ${show(denied)}, got ${show(s)}`);
  }
  const strict = r['strict'] !== false; // validate.proto: `strict` defaults to true
  if (r['well_known_regex'] === 'HTTP_HEADER_NAME' || r['well_known_regex'] === 1) {
    if (!(strict ? HEADER_NAME_STRICT : HEADER_LOOSE).test(s)) {
      violation(out, path, 'string.well_known_regex', `must be a valid HTTP header name${strict ? '' : ' (no NUL, CR or LF)'}, got ${show(s)}`);
    }
  }
  if (r['well_known_regex'] === 'HTTP_HEADER_VALUE' || r['well_known_regex'] === 2) {
    if (!(strict ? HEADER_VALUE_STRICT : HEADER_LOOSE).test(s)) {
      violation(out, path, 'string.well_known_regex', `must be a valid HTTP header value${strict ? '' : ' (no NUL, CR or LF)'}, got ${show(s)}`);
    }
  }
  if (r['ip'] === true && ipVersion(s) === 0) violation(out, path, 'string.ip', `must be an IP address, got ${show(s)}`);
  if (r['ipv4'] === true && ipVersion(s) !== 4) violation(out, path, 'string.ipv4', `must be an IPv4 address, got ${show(s)}`);
  if (r['ipv6'] === true && ipVersion(s) !== 6) violation(out, path, 'string.ipv6', `must be an IPv6 address, got ${show(s)}`);
  if (r['hostname'] === true && !isHostname(s)) violation(out, path, 'string.hostname', `must be a hostname, got ${show(s)}`);
  if (r['address'] === true && ipVersion(s) === 0 && !isHostname(s)) violation(out, path, 'string.address', `must be an IP address or a hostname, got ${show(s)}`);
  if (r['uuid'] === true && !/^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/.test(s)) violation(out, path, 'string.uuid', `must be a UUID, got ${show(s)}`);
}

function bytesRules(r: Rules, raw: unknown, path: string, out: RuleViolation[]): void {
  const b = typeof raw === 'string' ? Buffer.from(raw, 'base64') : raw instanceof Uint8Array ? Buffer.from(raw) : Buffer.alloc(0);
  const v = (rule: string, message: string): void => void out.push({ path, rule: `bytes.${rule}`, message });
  const n = (k: string): number | undefined => (r[k] !== undefined ? Number(r[k]) : undefined);
  if (n('len') !== undefined && b.length !== n('len')) v('len', `must be ${n('len')} bytes long, got ${b.length}`);
  if (n('min_len') !== undefined && b.length < n('min_len')!) v('min_len', `must be at least ${n('min_len')} bytes long, got ${b.length}`);
  if (n('max_len') !== undefined && b.length > n('max_len')!) v('max_len', `must be at most ${n('max_len')} bytes long, got ${b.length}`);
  const asBytes = (x: unknown): Buffer => Buffer.from(String(x), 'latin1');
  if (r['const'] !== undefined && !b.equals(asBytes(r['const']))) v('const', 'must equal the constant');
  if (r['prefix'] !== undefined && !b.subarray(0, asBytes(r['prefix']).length).equals(asBytes(r['prefix']))) v('prefix', 'must start with the prefix');
  if (r['in'] !== undefined && ![r['in']].flat().some((x) => b.equals(asBytes(x)))) v('in', 'must be one of the listed values');
  if (r['not_in'] !== undefined && [r['not_in']].flat().some((x) => b.equals(asBytes(x)))) v('not_in', 'must not be one of the listed values');
}

function enumRules(r: Rules, raw: unknown, enumType: protobuf.Enum, path: string, out: RuleViolation[]): void {
  const num = typeof raw === 'number' ? raw : typeof raw === 'string' ? enumType.values[raw] : undefined;
  if (r['defined_only'] === true && (num === undefined || enumType.valuesById[num] === undefined)) {
    out.push({ path, rule: 'enum.defined_only', message: `must be a defined value of ${enumType.name}, got ${show(raw)}` });
    return;
  }
  if (num === undefined || !('const' in r || 'in' in r || 'not_in' in r)) return;
  const conv = (x: unknown): Num | undefined => (typeof x === 'number' ? x : typeof x === 'string' ? enumType.values[x] : undefined);
  const fmt = (x: Num): string => enumType.valuesById[Number(x)] ?? String(x);
  checkConstInNotIn('enum', r, num, conv, fmt, path, out);
}

/** Duration (decoded `{seconds, nanos}`, or the JSON form `"1.5s"`) in nanoseconds. */
function durationNanos(v: unknown): bigint | undefined {
  if (typeof v === 'string') {
    const m = /^(-)?(\d+)(?:\.(\d{1,9}))?s$/.exec(v);
    if (!m) return undefined;
    const ns = BigInt(m[2]!) * 1_000_000_000n + BigInt((m[3] ?? '').padEnd(9, '0') || '0');
    return m[1] ? -ns : ns;
  }
  if (v && typeof v === 'object') {
    const o = v as Obj;
    const s = toBig(o['seconds'] ?? 0);
    const n = toBig(o['nanos'] ?? 0);
    if (s === undefined || n === undefined) return undefined;
    return s * 1_000_000_000n + n;
  }
  return undefined;
}

function fmtDuration(ns: Num): string {
  const n = BigInt(ns);
  const neg = n < 0n;
  const abs = neg ? -n : n;
  const frac = (abs % 1_000_000_000n).toString().padStart(9, '0').replace(/0+$/, '');
  return `${neg ? '-' : ''}${abs / 1_000_000_000n}${frac ? `.${frac}` : ''}s`;
}

function durationRules(r: Rules, raw: unknown, path: string, out: RuleViolation[]): void {
  const ns = durationNanos(raw);
  if (ns === undefined) {
    out.push({ path, rule: 'duration.type', message: `expected a duration, got ${show(raw)}` });
    return;
  }
  checkConstInNotIn('duration', r, ns, durationNanos, fmtDuration, path, out);
  checkRange('duration', r, ns, durationNanos, fmtDuration, path, out);
}

/**
 * Which PGV rule kind (`string`, `uint32`, `enum`, …) applies to a scalar field of proto type
 * `type`; PGV's kinds are named after the proto types.
 */
function checkScalar(type: string, rules: Rules, value: unknown, enumType: protobuf.Enum | undefined, path: string, out: RuleViolation[]): void {
  for (const [kind, r] of Object.entries(rules)) {
    if (!r || typeof r !== 'object' || Array.isArray(r)) continue;
    const rr = r as Rules;
    if (rr['ignore_empty'] === true && isZero(type, value, enumType)) continue;
    if (kind === 'string') stringRules(rr, value, path, out);
    else if (kind === 'bytes') bytesRules(rr, value, path, out);
    else if (kind === 'enum' && enumType) enumRules(rr, value, enumType, path, out);
    else if (kind === 'bool') {
      if ('const' in rr && value !== rr['const']) out.push({ path, rule: 'bool.const', message: `must be ${String(rr['const'])}, got ${String(value)}` });
    } else if (NUMERIC_KINDS.has(kind)) numberRules(kind, rr, value, path, out);
  }
}

/**
 * True when `value`, of a scalar field of proto type `type`, meets the field's `rules` (enum
 * rules apart: they need the enum type).
 */
export function meetsScalarRules(type: string, rules: FieldRules, value: unknown): boolean {
  const out: RuleViolation[] = [];
  checkScalar(type, rules, value, undefined, '', out);
  return out.length === 0;
}

function isZero(type: string, value: unknown, enumType: protobuf.Enum | undefined): boolean {
  if (value === undefined || value === null || value === '' || value === false || value === 0 || value === '0') return true;
  if (enumType && typeof value === 'string') return enumType.values[value] === 0;
  return type === 'bytes' && typeof value === 'string' && Buffer.from(value, 'base64').length === 0;
}

/** Looks up an `Any`'s payload type by its type URL; undefined when it is not loaded. */
export function anyType(typeUrl: string): protobuf.Type | undefined {
  try {
    return messageType(typeUrl);
  } catch {
    return undefined;
  }
}

/**
 * Validates one decoded value of a single (non-repeated, non-map) field, or of one element
 * of a repeated field / one map value, given the rules that apply to it.
 */
function checkValue(pgv: PgvRules, field: protobuf.Field, rules: Rules | null, value: unknown, path: string, out: RuleViolation[]): void {
  const rt = field.resolvedType;
  if (rt instanceof protobuf.Type) {
    // A plain property once the protos are loaded (`loadEnvoyRoot` pins it).
    const full = rt.fullName;
    const wrapperKind = WRAPPER_KIND[full];
    if (wrapperKind) {
      if (rules) {
        const inner = (value as Obj)['value'];
        checkScalar(wrapperKind, rules, isSet(inner) ? inner : zeroOf(wrapperKind), undefined, join(path, 'value'), out);
      }
      return;
    }
    if (full === '.google.protobuf.Duration') {
      if (rules?.['duration']) durationRules(rules['duration'] as Rules, value, path, out);
      return;
    }
    if (full === '.google.protobuf.Any') {
      const at = (value as Obj)['@type'] ?? (value as Obj)['type_url'];
      const anyRules = rules?.['any'] as Rules | undefined;
      if (anyRules && typeof at === 'string') {
        if (anyRules['in'] !== undefined && ![anyRules['in']].flat().includes(at)) {
          out.push({ path, rule: 'any.in', message: `type must be one of ${show([anyRules['in']].flat())}, got ${show(at)}` });
        }
        if (anyRules['not_in'] !== undefined && [anyRules['not_in']].flat().includes(at)) {
          out.push({ path, rule: 'any.not_in', message: `type must not be ${show(at)}` });
        }
      }
      if ((rules?.['message'] as Rules | undefined)?.['skip'] === true) return;
      if (typeof (value as Obj)['@type'] === 'string') {
        const inner = anyType((value as Obj)['@type'] as string);
        if (inner) walkMessage(pgv, inner, value as Obj, `${path}<${inner.name}>`, out);
      }
      return;
    }
    if (UNSTRUCTURED.has(full)) return;
    if ((rules?.['message'] as Rules | undefined)?.['skip'] === true) return;
    if (value && typeof value === 'object') walkMessage(pgv, rt, value as Obj, path, out);
    return;
  }
  if (rules) checkScalar(field.type, rules, value, rt instanceof protobuf.Enum ? rt : undefined, path, out);
}

function isMessageField(field: protobuf.Field): boolean {
  return field.resolvedType instanceof protobuf.Type;
}

const REQUIRED_KINDS = ['message', 'duration', 'timestamp', 'any'] as const;

/** The PGV rule kind that makes an absent message field an error (`message.required`, …), if any. */
function requiredKind(rules: Rules): string | undefined {
  for (const k of REQUIRED_KINDS) if ((rules[k] as Rules | undefined)?.['required'] === true) return k;
  return undefined;
}

/**
 * @param presentOnly check only the fields `obj` sets, at this level (not oneof requirements or
 *   absent fields): for a part of a message whose other fields are checked with another part.
 */
function walkMessage(pgv: PgvRules, type: protobuf.Type, obj: Obj, path: string, out: RuleViolation[], presentOnly = false): void {
  const plan = pgv.messagePlan(type);
  if (plan.skip) return;
  for (const oneof of presentOnly ? [] : plan.requiredOneofs) {
    const set = oneof.oneof.filter((n) => isSet(obj[n]));
    if (set.length === 0) {
      out.push({ path: join(path, oneof.name), rule: 'oneof.required', message: `exactly one of [${oneof.oneof.join(', ')}] must be set, none is` });
    } else if (set.length > 1) {
      out.push({ path: join(path, oneof.name), rule: 'oneof.required', message: `exactly one of [${oneof.oneof.join(', ')}] must be set, got ${set.join(', ')}` });
    }
  }
  for (const { field, rules } of plan.fields) {
    const value = obj[field.name];
    const present = isSet(value);
    // An absent field without rules can break nothing (its zero value, no items, no entries).
    if (!present && (!rules || presentOnly)) continue;
    const here = join(path, field.name);
    if (field.map) {
      const entries = present ? Object.entries(value as Obj) : [];
      const m = rules?.['map'] as Rules | undefined;
      if (m) {
        if (m['min_pairs'] !== undefined && entries.length < Number(m['min_pairs'])) {
          out.push({ path: here, rule: 'map.min_pairs', message: `must have at least ${String(m['min_pairs'])} entries, got ${entries.length}` });
        }
        if (m['max_pairs'] !== undefined && entries.length > Number(m['max_pairs'])) {
          out.push({ path: here, rule: 'map.max_pairs', message: `must have at most ${String(m['max_pairs'])} entries, got ${entries.length}` });
        }
      }
      const keyRules = m?.['keys'] as Rules | undefined;
      const valueRules = (m?.['values'] as Rules | undefined) ?? null;
      for (const [k, v] of entries) {
        const at = `${here}[${k}]`;
        if (keyRules) checkScalar((field as unknown as protobuf.MapField).keyType, keyRules, k, undefined, at, out);
        if (!isSet(v)) continue;
        if (isMessageField(field) || valueRules) checkValue(pgv, field, valueRules, v, at, out);
      }
      continue;
    }
    if (field.repeated) {
      const list = present ? (value as unknown[]) : [];
      const r = rules?.['repeated'] as Rules | undefined;
      if (r) {
        if (r['min_items'] !== undefined && list.length < Number(r['min_items'])) {
          out.push({ path: here, rule: 'repeated.min_items', message: `must have at least ${String(r['min_items'])} items, got ${list.length}` });
        }
        if (r['max_items'] !== undefined && list.length > Number(r['max_items'])) {
          out.push({ path: here, rule: 'repeated.max_items', message: `must have at most ${String(r['max_items'])} items, got ${list.length}` });
        }
        if (r['unique'] === true) {
          const seen = new Map<string, number>();
          for (let i = 0; i < list.length; i++) {
            const key = canonicalJson(list[i]);
            const first = seen.get(key);
            if (first !== undefined) out.push({ path: `${here}[${i}]`, rule: 'repeated.unique', message: `duplicates item ${first}: ${show(list[i])}` });
            else seen.set(key, i);
          }
        }
      }
      const itemRules = (r?.['items'] as Rules | undefined) ?? null;
      // Plain loops, no closures: this runs for every repeated field of every resource.
      if (isMessageField(field) || itemRules) {
        for (let i = 0; i < list.length; i++) if (isSet(list[i])) checkValue(pgv, field, itemRules, list[i], `${here}[${i}]`, out);
      }
      continue;
    }
    if (isMessageField(field)) {
      if (!present) {
        if (field.partOf) continue; // another member of its oneof is set (or none): PGV checks only the set case
        const required = rules ? requiredKind(rules) : undefined;
        if (required) out.push({ path: here, rule: `${required}.required`, message: 'is required' });
        continue;
      }
      checkValue(pgv, field, rules, value, here, out);
      continue;
    }
    if (!rules) continue;
    if (!present && field.partOf) continue; // oneof member (or proto3 optional) not set: PGV skips it
    const rt = field.resolvedType;
    const enumZero = rt instanceof protobuf.Enum ? (rt.valuesById[0] ?? 0) : undefined;
    checkValue(pgv, field, rules, present ? value : (enumZero ?? zeroOf(field.type)), here, out);
  }
}

/**
 * JSON with object keys sorted, and absent, null, empty-array and empty-object values left
 * out, so two values that encode the same compare equal.
 */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(canonical(value)) ?? 'null';
}

function canonical(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(canonical);
  if (value && typeof value === 'object') {
    const out: Obj = {};
    for (const key of Object.keys(value).sort()) {
      const v = canonical((value as Obj)[key]);
      if (v === undefined || v === null) continue;
      if (Array.isArray(v) && v.length === 0) continue;
      if (typeof v === 'object' && !Array.isArray(v) && Object.keys(v as Obj).length === 0) continue;
      out[key] = v;
    }
    return out;
  }
  return value;
}

/**
 * Validates a decoded message of `typeNameOrUrl` against the PGV annotations of its proto and
 * of every nested message and `Any` payload.
 * @param typeNameOrUrl fully-qualified message name or type URL, e.g.
 *   `type.googleapis.com/envoy.config.listener.v3.Listener`.
 * @param decoded the message in the decoded form described in this module's header.
 * @param pgv the rules read so far (a fresh set by default; pass the one you keep to read each proto's options once).
 * @returns the violations found, in field order (empty when valid).
 * @throws Error when the type is not in the loaded protos.
 */
export function validateMessage(typeNameOrUrl: string, decoded: Record<string, unknown>, pgv: PgvRules = new PgvRules()): RuleViolation[] {
  const out: RuleViolation[] = [];
  walkMessage(pgv, messageType(typeNameOrUrl), decoded, '', out);
  return out;
}

/**
 * Like {@link validateMessage} for one part of a message (see `NamedResource.parts`): only the
 * fields `decoded` sets are checked at its top level (absent fields and `(validate.required)`
 * oneofs are the business of the part that carries them); nested messages are checked whole.
 * @returns the violations found, in field order (empty when valid).
 * @throws Error when the type is not in the loaded protos.
 */
export function validateMessagePart(typeNameOrUrl: string, decoded: Record<string, unknown>, pgv: PgvRules = new PgvRules()): RuleViolation[] {
  const out: RuleViolation[] = [];
  walkMessage(pgv, messageType(typeNameOrUrl), decoded, '', out, true);
  return out;
}

/**
 * Validates a decoded message against the PGV annotations of a given protobufjs type (for
 * types outside the Envoy root, e.g. in tests); nested `Any` payloads are looked up in the
 * Envoy root.
 * @returns the violations found (empty when valid).
 */
export function validateWithType(type: protobuf.Type, decoded: Record<string, unknown>, pgv: PgvRules = new PgvRules()): RuleViolation[] {
  const out: RuleViolation[] = [];
  walkMessage(pgv, type, decoded, '', out);
  return out;
}

/**
 * Decodes `bytes` as `typeUrl` (with `decodeMessage`) and validates the result.
 * @returns the violations found (empty when valid).
 * @throws Error when the type is not loaded or the bytes are not a valid message.
 */
export function validateEncoded(typeUrl: string, bytes: Uint8Array, pgv: PgvRules = new PgvRules()): RuleViolation[] {
  return validateMessage(typeUrl, decodeMessage(typeUrl, bytes), pgv);
}

/** 4 or 6 when `s` is an IPv4 / IPv6 literal (no zone, no brackets), else 0. Pure (no `node:net`). */
export function ipVersion(s: string): 0 | 4 | 6 {
  if (isIPv4(s)) return 4;
  if (isIPv6(s)) return 6;
  return 0;
}

function isIPv4(s: string): boolean {
  const parts = s.split('.');
  return parts.length === 4 && parts.every((p) => /^(0|[1-9]\d{0,2})$/.test(p) && Number(p) <= 255);
}

function isIPv6(s: string): boolean {
  if (!/^[0-9a-fA-F:.]+$/.test(s)) return false;
  let groups = s;
  let tailGroups = 0;
  const lastColon = s.lastIndexOf(':');
  if (s.includes('.')) {
    if (!isIPv4(s.slice(lastColon + 1))) return false;
    groups = s.slice(0, lastColon + 1) + '0'; // placeholder group; the IPv4 tail counts as two
    tailGroups = 1;
  }
  const halves = groups.split('::');
  if (halves.length > 2) return false;
  const parse = (h: string): string[] | undefined => {
    if (h === '') return [];
    const g = h.split(':');
    return g.every((x) => /^[0-9a-fA-F]{1,4}$/.test(x)) ? g : undefined;
  };
  const a = parse(halves[0]!);
  const b = halves.length === 2 ? parse(halves[1]!) : [];
  if (!a || !b) return false;
  const count = a.length + b.length + tailGroups;
  return halves.length === 2 ? count <= 7 : count === 8;
}

function isHostname(s: string): boolean {
  const h = s.endsWith('.') ? s.slice(0, -1) : s;
  if (h.length === 0 || h.length > 253) return false;
  return h.split('.').every((l) => /^[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$/.test(l));
}
