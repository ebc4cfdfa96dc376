/**
 * The "alike" shortcut: decides that a message breaks no PGV rule because a message of the same
 * type that was checked and broke none is alike it where a rule could tell them apart, without
 * running the rules (`pgv-rules.ts`) on it. `ResourceCheckCache` uses it so that another proxy's
 * copy of a resource (its own certificate's name in a TLS context, its own principals in RBAC) is
 * only encoded, not checked again.
 *
 * Input form: the object form the codec encodes (snake_case field names, `Any` as
 * `{'@type': url, ...fields}`), not the decoded form the rules interpreter reads: what differs
 * between two such objects is what differs on the wire, or the shortcut answers false.
 *
 * Pure: no I/O; what is read of the protos' options is kept in the caller's `PgvRules`.
 */
import protobuf from 'protobufjs';
import { fitsField, messageType } from '../../api/codec.js';
import { anyType, isSet, meetsScalarRules, NUMERIC_KINDS, PgvRules, UNSTRUCTURED, WRAPPER_KIND, type FieldRules } from './pgv-rules.js';

type Obj = Record<string, unknown>;

/**
 * Message objects (in the object form the codec encodes) found alike a valid message of a type
 * by {@link validLike}, so breaking no rule as one of that type, by object: a later comparison
 * that meets one of them again (a typed config carried over from a push before, shared by many
 * resources) takes it as valid without walking it. Whether a message breaks a rule depends only
 * on the message (rules are per field of its type, a oneof's or the message's own), not on
 * where it sits. Only for objects never mutated after they were compared (generated
 * resources); held weakly. The caller owns it (`ResourceCheckCache` keeps one).
 */
export type KnownValidMessages = WeakMap<object, protobuf.Type>;

/** What a comparison reads and adds to: the rules read so far, and the messages known valid. */
interface Comparing {
  readonly pgv: PgvRules;
  readonly known: KnownValidMessages | undefined;
}

/**
 * True when `candidate`, a message of `typeNameOrUrl` in the object form the codec encodes,
 * breaks no rule, given that `valid` (of the same type) breaks none: the two are alike where a
 * rule could tell them apart. Decided conservatively, without running the rules: they set the
 * same fields (the same `@type` in every `Any`, the same number of items and map entries), and
 * every value that differs is
 * - a non-empty string in a `string` field with no rule, or whose rules both values meet;
 * - a non-zero number in a numeric field with no rule, that fits the field (`fitsField`);
 * - a map entry of a map with no rule (keys may differ; values are compared alike);
 * - inside a message compared alike, outside any repeated field with rules on its items and
 *   any message field with rules (those must be equal).
 * For example two proxies' TLS contexts towards one service, which differ only in the name of
 * their own certificate's secret (`SdsSecretConfig.name`, `min_len: 1`), or two inbound
 * listeners whose RBAC policies name different principals. False whenever unsure. When true,
 * `candidate` also has only known fields, as `valid` has (`encodeMessage`'s `knownFields`).
 * @param pgv the rules read so far (a fresh set by default; pass the one you keep).
 * @param known messages known valid (see {@link KnownValidMessages}): `candidate`'s nested
 *   messages found there are taken as valid, and those found alike here are added (the
 *   top-level message is neither).
 * @throws Error when the type is not in the loaded protos.
 */
export function validLike(typeNameOrUrl: string, valid: object, candidate: object, pgv: PgvRules = new PgvRules(), known?: KnownValidMessages): boolean {
  // The top level is not looked up nor added in `known`: it may be a part (`NamedResource.parts`),
  // valid by fewer rules than a whole message (nested messages are checked whole either way).
  if (valid === candidate) return true;
  return plainObjects(valid, candidate) && compareMessages({ pgv, known }, messageType(typeNameOrUrl), valid as Obj, candidate as Obj);
}

/** Two nested messages of `type`: alike, or `b` known valid (and then added to the known ones). */
function sameOutcome(cx: Comparing, type: protobuf.Type, a: Obj, b: Obj): boolean {
  if (a === b) return true;
  if (!plainObjects(a, b)) return false;
  if (cx.known?.get(b) === type) return true;
  const alike = compareMessages(cx, type, a, b);
  if (alike) cx.known?.set(b, type);
  return alike;
}

/** {@link sameOutcome} of two different plain objects. */
function compareMessages(cx: Comparing, type: protobuf.Type, a: Obj, b: Obj): boolean {
  const full = type.fullName; // a plain property once the protos are loaded (`loadEnvoyRoot` pins it)
  if (full === '.google.protobuf.Any') {
    const at = a['@type'];
    const inner = typeof at === 'string' && at === b['@type'] ? anyType(at) : undefined;
    return inner !== undefined && sameFields(cx, inner, a, b, true);
  }
  if (UNSTRUCTURED.has(full) || WRAPPER_KIND[full]) return exactlyEqual(a, b);
  return sameFields(cx, type, a, b, false);
}

function sameFields(cx: Comparing, type: protobuf.Type, a: Obj, b: Obj, any: boolean): boolean {
  let keys = 0;
  for (const key in a) {
    if (any && key === '@type') continue;
    keys++;
    if (!Object.hasOwn(type.fields, key)) return false;
    const field = type.fields[key]!;
    const va = a[key];
    const vb = b[key];
    if (va === vb) continue;
    if (!isSet(va) || !isSet(vb)) return false;
    const rules = cx.pgv.fieldRules(field);
    const rt = field.resolvedType;
    const message = rt instanceof protobuf.Type ? rt : undefined;
    if (field.map) {
      if (rules ? !exactlyEqual(va, vb) : !sameEntries(cx, field, message, va, vb)) return false;
    } else if (field.repeated) {
      const items = rules ? itemRules(rules) : null;
      if (items === undefined) {
        if (!exactlyEqual(va, vb)) return false;
        continue;
      }
      if (!Array.isArray(va) || !Array.isArray(vb) || va.length !== vb.length) return false;
      for (let i = 0; i < va.length; i++) {
        if (va[i] === vb[i]) continue;
        if (!alikeValues(cx, field, message, items, va[i], vb[i])) return false;
      }
    } else if (!alikeValues(cx, field, message, rules, va, vb)) {
      return false;
    }
  }
  // The same keys: every key of b is one of a's (even one whose value is undefined, which the
  // loop above saw as equal on both sides), and as many.
  for (const key in b) {
    if (any && key === '@type') continue;
    if (!Object.hasOwn(a, key)) return false;
    keys--;
  }
  return keys === 0;
}

/** Both are objects, neither null nor an array (a message or a map in object form). */
function plainObjects(a: unknown, b: unknown): boolean {
  return typeof a === 'object' && typeof b === 'object' && a !== null && b !== null && !Array.isArray(a) && !Array.isArray(b);
}

/** Two entry lists of a map field with no rules, paired in order: values alike, keys free. */
function sameEntries(cx: Comparing, field: protobuf.Field, message: protobuf.Type | undefined, a: unknown, b: unknown): boolean {
  if (!plainObjects(a, b)) return false;
  const ea = Object.values(a as Obj);
  const eb = Object.values(b as Obj);
  if (ea.length !== eb.length) return false;
  for (let i = 0; i < ea.length; i++) {
    if (ea[i] === eb[i]) continue;
    if (!isSet(ea[i]) || !isSet(eb[i]) || !alikeValues(cx, field, message, null, ea[i], eb[i])) return false;
  }
  return true;
}

/**
 * Two set values of one field (or of one item or map value, with the rules that apply to it):
 * messages compared alike when their only rule is `message.required` (both are present),
 * exactly equal when they carry other rules; scalars as {@link alikeScalars}.
 */
function alikeValues(cx: Comparing, field: protobuf.Field, message: protobuf.Type | undefined, rules: FieldRules | null, a: unknown, b: unknown): boolean {
  if (!message) return alikeScalars(field, rules, a, b);
  if (rules && !onlyRequired(rules)) return exactlyEqual(a, b);
  return sameOutcome(cx, message, a as Obj, b as Obj);
}

/**
 * Exactly equal: the same own keys (also those whose value is undefined), scalars by
 * `Object.is` (NaN equals NaN, 0 is not -0), arrays item by item. Not canonically: an empty
 * message is a present field, which a oneof or `message.required` counts.
 */
function exactlyEqual(a: unknown, b: unknown): boolean {
  if (Object.is(a, b)) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null || Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) {
    const bs = b as unknown[];
    if (a.length !== bs.length) return false;
    for (let i = 0; i < a.length; i++) if (!exactlyEqual(a[i], bs[i])) return false;
    return true;
  }
  const ka = Object.keys(a);
  if (ka.length !== Object.keys(b).length) return false;
  for (const k of ka) if (!Object.hasOwn(b, k) || !exactlyEqual((a as Obj)[k], (b as Obj)[k])) return false;
  return true;
}

/** `{message: {required: true}}` and nothing else. */
function onlyRequired(rules: FieldRules): boolean {
  const keys = Object.keys(rules);
  if (keys.length !== 1 || keys[0] !== 'message') return false;
  const m = rules['message'] as FieldRules;
  return Object.keys(m).every((k) => k === 'required');
}

/**
 * The rules each item of a repeated field must meet, when its other rules only count items
 * (`min_items`, `max_items`: equal lengths meet them alike); null for none. Undefined when it
 * has other rules (`unique`, …): then two lists must be exactly equal.
 */
function itemRules(rules: FieldRules): FieldRules | null | undefined {
  const keys = Object.keys(rules);
  if (keys.length !== 1 || keys[0] !== 'repeated') return undefined;
  const r = rules['repeated'] as FieldRules;
  for (const k of Object.keys(r)) if (k !== 'min_items' && k !== 'max_items' && k !== 'items') return undefined;
  return (r['items'] as FieldRules | undefined) ?? null;
}

/**
 * Two different values of a scalar field that cannot break a rule differently, and are both
 * present on the wire: non-empty strings of a `string` field that has no rules or whose rules
 * both meet; non-zero finite numbers that fit a numeric field with no rules. Enums and booleans must
 * be equal.
 */
function alikeScalars(field: protobuf.Field, rules: FieldRules | null, a: unknown, b: unknown): boolean {
  if (field.type === 'string') {
    if (typeof a !== 'string' || typeof b !== 'string' || a === '' || b === '') return false;
    if (rules === null) return true;
    return meetsScalarRules('string', rules, a) && meetsScalarRules('string', rules, b);
  }
  return (
    rules === null &&
    NUMERIC_KINDS.has(field.type) &&
    typeof a === 'number' &&
    typeof b === 'number' &&
    a !== 0 &&
    b !== 0 &&
    Number.isFinite(a) &&
    Number.isFinite(b) &&
    fitsField(field.type, a) &&
    fitsField(field.type, b)
  );
}

