/**
 * The "correct by construction" check run on every proxy's generated resources before they
 * are encoded and published: the Envoy protos' own `validate.rules` annotations
 * (`proto-rules.ts`) plus the cross-resource rules no annotation states
 * (`cross-resource.ts`).
 *
 * Each resource is encoded with the real Envoy protos, and the message protobufjs encoded, in
 * decoded form (`encodeChecked`), is validated: it is what goes on the wire, so a value
 * protobufjs coerced is seen as the proxy will see it (an unknown field is an error). A resource that cannot be encoded is a violation (`encode`).
 *
 * Pure: no I/O.
 */
import { encodeChecked, encodeMessage } from '../../api/codec.js';
import type { TypeUrl } from '../../api/type-urls.js';
import type { ProxyResources } from '../generate.js';
import type { NamedResource } from '../resource.js';
import { resourceReferences, validateCrossResource, type DecodedResource } from './cross-resource.js';
import { getOrCreate } from '../../util/maps.js';
import { validLike, validateMessage, validateMessagePart, type RuleViolation } from './proto-rules.js';

export { validateMessage, validateEncoded, validLike, type RuleViolation } from './proto-rules.js';
export { validateCrossResource, resourceReferences, type CrossViolation, type DecodedResources, type ResourceReference } from './cross-resource.js';

/**
 * One broken rule in one resource of a proxy.
 * - `typeUrl`, `name`: the resource (its xDS type and name).
 * - `path`: the field, e.g. `filter_chains[0].filters[1].typed_config<TcpProxy>.stat_prefix`
 *   (`''` for the resource as a whole).
 * - `rule`: a PGV rule (`string.min_len`, `repeated.min_items`, `oneof.required`, …), a
 *   cross-resource rule (`reference.cluster`, `weighted_clusters.total_weight`, …), or
 *   `encode` when the resource could not be encoded at all.
 */
export interface Violation {
  readonly typeUrl: TypeUrl;
  readonly name: string;
  readonly path: string;
  readonly rule: string;
  readonly message: string;
}

/** A resource left out of {@link ValidationResult.valid}, and why. */
export interface DroppedResource {
  readonly typeUrl: TypeUrl;
  readonly name: string;
  /** `violation`: it broke a rule itself; `reference`: it refers to a dropped resource. */
  readonly reason: 'violation' | 'reference';
  /** For `reference`: the dropped resource it refers to. */
  readonly because?: { readonly typeUrl: TypeUrl; readonly name: string };
}

/** The result of {@link validateProxyResources}. */
export interface ValidationResult {
  /** Every violation found, by type (in the input's order), then resource, then field. */
  readonly violations: readonly Violation[];
  /**
   * The input without the dropped resources: every resource that broke a rule, and then,
   * repeatedly until nothing changes, every resource that refers to a dropped one (a listener
   * whose HCM names a dropped route configuration, a route configuration or TCP proxy naming a
   * dropped cluster, anything naming a dropped secret, an EDS cluster whose
   * ClusterLoadAssignment was dropped). So `valid` is free of violations AND referentially
   * closed: it never names a resource it lacks. Same objects as the input, same order.
   */
  readonly valid: ProxyResources;
  /** What was left out of `valid`, in the order it was decided. */
  readonly dropped: readonly DroppedResource[];
}

function key(typeUrl: TypeUrl, name: string): string {
  return `${typeUrl}\n${name}`;
}

/** What {@link ResourceCheckCache} remembers of one resource: its wire bytes, or why it has none, and its rule violations. */
export interface CheckedResource {
  /** The encoded message; undefined when it could not be encoded. */
  readonly encoded: Buffer | undefined;
  /** The encoding error, when there is one. */
  readonly error: string | undefined;
  /** Violations of the protos' `validate.rules` (checked on the decoded wire form). */
  readonly violations: readonly RuleViolation[];
}

/** How many unlike resources of one type are kept to compare new ones with. */
const SIBLINGS_PER_TYPE = 4;

/** A resource or part checked before, with its result: what the next alike one is compared with. */
interface Sibling {
  readonly object: object;
  readonly result: CheckedResource;
}

/**
 * Per-resource results (encoding and `validate.rules` checks), shared across proxies and
 * pushes. A resource is looked up, cheapest first:
 * 1. by object: the same object checked before (generated objects are not mutated afterwards);
 * 2. by sibling: when the last valid resource of the same type and name (another proxy's
 *    listener of that name, or the same resource of the last push), or one of the last few
 *    valid ones of the same type that were not alike one another (another proxy's certificate
 *    secret), is alike this one (`validLike`), this one is valid too and is only encoded;
 * 3. otherwise it is encoded and checked in full.
 * There is no lookup by content: a JSON key cannot tell `undefined`, NaN and ±Infinity from
 * absent or null, and costs about as much as encoding what it would find.
 */
export class ResourceCheckCache {
  private readonly byObject = new WeakMap<object, CheckedResource>();
  /** The same for objects checked as a part after the first (fewer rules apply to those). */
  private readonly byPartObject = new WeakMap<object, CheckedResource>();
  /** By base part: the valid part last checked at each later position. */
  private readonly siblingsByBase = new WeakMap<object, Sibling[]>();
  /** By type URL: the valid part last checked at each later position, after any base. */
  private readonly siblingsByPosition = new Map<TypeUrl, Sibling[]>();
  /** By type URL and name: the valid resource last checked. */
  private readonly siblingsByName = new Map<string, Sibling>();
  /** By type URL: the last few valid resources checked that were not alike one another, latest first. */
  private readonly siblingsByType = new Map<TypeUrl, Sibling[]>();
  private checkedInFull = 0;

  /** @param maxNames how many names to keep a sibling for, the least recently checked going first (default 20 000). */
  constructor(private readonly maxNames = 20_000) {}

  /**
   * Encodes and checks `resource` of `typeUrl` (named `name`), or returns the result for the
   * same object, or for an alike sibling. With `parts` (see `NamedResource.parts`), each part is
   * encoded and checked on its own (the first, the base, as a whole resource of that name; the
   * others for the fields they set) and the encodings are concatenated: a part shared by many
   * resources costs once, and a part alike the one last seen at its position (after the same
   * base, else after any) is only encoded.
   */
  check(typeUrl: TypeUrl, resource: object, parts?: readonly object[], name?: string): CheckedResource {
    const seen = this.byObject.get(resource);
    if (seen) return seen;
    const result = parts && parts.length > 0 ? this.checkParts(typeUrl, parts, name) : this.checkWhole(typeUrl, resource, name);
    this.byObject.set(resource, result);
    return result;
  }

  /** How many resources and parts were encoded and checked in full (not by object or sibling). */
  get fullChecks(): number {
    return this.checkedInFull;
  }

  private checkParts(typeUrl: TypeUrl, parts: readonly object[], name: string | undefined): CheckedResource {
    const siblings = getOrCreate(this.siblingsByBase, parts[0], () => []);
    const anyBase = getOrCreate(this.siblingsByPosition, typeUrl, () => []);
    const results = parts.map((part, i) => (i === 0 ? this.check(typeUrl, part, undefined, name) : this.checkPart(typeUrl, part, i, siblings, anyBase)));
    const failed = results.find((r) => r.encoded === undefined);
    if (failed) return failed;
    return {
      encoded: Buffer.concat(results.map((r) => r.encoded!)),
      error: undefined,
      violations: results.flatMap((r) => r.violations),
    };
  }

  /**
   * A part after the base, compared with the part last checked at its position after the same
   * base (another proxy's TLS context towards the same service), else after any base (towards
   * another service: a new push's bases are new objects).
   */
  private checkPart(typeUrl: TypeUrl, part: object, position: number, siblings: Sibling[], anyBase: Sibling[]): CheckedResource {
    const seen = this.byPartObject.get(part);
    if (seen) return seen;
    const result = likeSibling(typeUrl, part, siblings[position]) ?? likeSibling(typeUrl, part, anyBase[position]) ?? this.checkInFull(typeUrl, part, true);
    this.byPartObject.set(part, result);
    if (isValid(result)) siblings[position] = anyBase[position] = { object: part, result };
    return result;
  }

  /** A whole resource (or a base part). */
  private checkWhole(typeUrl: TypeUrl, resource: object, name: string | undefined): CheckedResource {
    const nameKey = name === undefined ? undefined : key(typeUrl, name);
    const ofType = getOrCreate(this.siblingsByType, typeUrl, () => []);
    const named = nameKey === undefined ? undefined : this.siblingsByName.get(nameKey);
    let result = likeSibling(typeUrl, resource, named);
    // The sibling this one replaces in `ofType`: the one it was alike, or none (a new kind).
    let alike = result ? ofType.findIndex((s) => s.object === named!.object) : -1;
    for (let i = 0; result === undefined && i < ofType.length; i++) {
      result = likeSibling(typeUrl, resource, ofType[i]);
      if (result) alike = i;
    }
    result ??= this.checkInFull(typeUrl, resource, false);
    if (!isValid(result)) return result; // only a valid resource can stand for others
    const sibling = { object: resource, result };
    if (nameKey !== undefined) {
      this.siblingsByName.delete(nameKey);
      this.siblingsByName.set(nameKey, sibling);
      if (this.siblingsByName.size > this.maxNames) this.siblingsByName.delete(this.siblingsByName.keys().next().value!);
    }
    if (alike >= 0) ofType.splice(alike, 1);
    ofType.unshift(sibling);
    if (ofType.length > SIBLINGS_PER_TYPE) ofType.pop();
    return result;
  }

  private checkInFull(typeUrl: TypeUrl, resource: object, part: boolean): CheckedResource {
    this.checkedInFull++;
    return attempt(() => {
      const { encoded, decoded } = encodeChecked(typeUrl, resource);
      return { encoded, error: undefined, violations: part ? validateMessagePart(typeUrl, decoded) : validateMessage(typeUrl, decoded) };
    });
  }
}

/**
 * `object`'s result when `sibling` was encoded, broke no rule and is alike (`validLike`): the
 * encoding of `object` (or its encoding error), with no violations. Undefined otherwise.
 */
function likeSibling(typeUrl: TypeUrl, object: object, sibling: Sibling | undefined): CheckedResource | undefined {
  if (!sibling || !isValid(sibling.result) || !validLike(typeUrl, sibling.object, object)) return undefined;
  return attempt(() => ({ encoded: encodeMessage(typeUrl, object, true), error: undefined, violations: [] }));
}

/** Encoded, and no rule broken. */
function isValid(result: CheckedResource): boolean {
  return result.encoded !== undefined && result.violations.length === 0;
}

/** `check()`'s result, or the encoding error it threw as a result without bytes. */
function attempt(check: () => CheckedResource): CheckedResource {
  try {
    return check();
  } catch (err) {
    return { encoded: undefined, error: err instanceof Error ? err.message : String(err), violations: [] };
  }
}

/**
 * Validates one proxy's generated resources (see the module header).
 *
 * What the caller should publish (the rule `MeshController` follows): when `violations` is
 * empty, the resources as they are. Otherwise a proxy that already has a published snapshot
 * keeps it (the same policy as a generation error: never replace known-good configuration with
 * a partial one, because a missing listener or cluster in state-of-the-world LDS/CDS is a
 * deletion); a proxy that has none gets `valid`, which is partial but consistent and breaks no
 * rule, rather than nothing.
 * Each resource is encoded with the real protos and its decoded wire form checked against the
 * `validate.rules` annotations (once per distinct content, through `cache`); the
 * cross-resource rules run on the generated objects, which carry the same names, references,
 * domains, weights and addresses as their decoded form.
 * @param resources generated resources by type URL, in the object form the codec encodes.
 * @param cache per-resource results to reuse (a fresh one by default).
 * @param others for a partial update (some types only): the names of the proxy's resources of
 *   the other types, which references may name.
 * @returns violations, the resources safe to send, and what was dropped.
 */
export function validateProxyResources(
  resources: ProxyResources,
  cache: ResourceCheckCache = new ResourceCheckCache(),
  others?: ReadonlyMap<TypeUrl, Iterable<string>>,
): ValidationResult {
  const violations: Violation[] = [];
  const decoded = new Map<TypeUrl, DecodedResource[]>();
  for (const [typeUrl, list] of resources) {
    const out: DecodedResource[] = [];
    for (const r of list) {
      const checked = cache.check(typeUrl, r.resource, r.parts, r.name);
      if (checked.error !== undefined) {
        violations.push({ typeUrl, name: r.name, path: '', rule: 'encode', message: checked.error });
        continue;
      }
      // Cross-resource rules read names, references, domains, weights and addresses, which the
      // generated object carries exactly as its decoded form does (Envoy field names, `@type`).
      const d = r.resource as Record<string, unknown>;
      out.push({ name: r.name, decoded: d, ...(r.parts ? { parts: r.parts as Record<string, unknown>[] } : {}) });
      for (const v of checked.violations) violations.push({ typeUrl, name: r.name, ...v });
    }
    decoded.set(typeUrl, out);
  }
  violations.push(...validateCrossResource(decoded, others));
  const order = [...resources.keys()];
  violations.sort((a, b) => order.indexOf(a.typeUrl) - order.indexOf(b.typeUrl));

  const dropped: DroppedResource[] = [];
  const droppedKeys = new Set<string>();
  for (const v of violations) {
    const k = key(v.typeUrl, v.name);
    if (droppedKeys.has(k)) continue;
    droppedKeys.add(k);
    dropped.push({ typeUrl: v.typeUrl, name: v.name, reason: 'violation' });
  }
  // Only needed when something is dropped (rare): by type and name.
  const decodedByKey = new Map<string, Record<string, unknown>>();
  if (droppedKeys.size > 0) for (const [typeUrl, list] of decoded) for (const r of list) decodedByKey.set(key(typeUrl, r.name), r.decoded);
  for (let changed = droppedKeys.size > 0; changed; ) {
    changed = false;
    for (const [typeUrl, list] of resources) {
      for (const r of list) {
        const k = key(typeUrl, r.name);
        if (droppedKeys.has(k)) continue;
        const d = decodedByKey.get(k);
        const ref = d && resourceReferences(typeUrl, d).find((x) => droppedKeys.has(key(x.typeUrl, x.name)));
        if (!ref) continue;
        droppedKeys.add(k);
        dropped.push({ typeUrl, name: r.name, reason: 'reference', because: { typeUrl: ref.typeUrl, name: ref.name } });
        changed = true;
      }
    }
  }

  const valid = new Map<TypeUrl, readonly NamedResource[]>();
  for (const [typeUrl, list] of resources) valid.set(typeUrl, droppedKeys.size === 0 ? list : list.filter((r) => !droppedKeys.has(key(typeUrl, r.name))));
  return { violations, valid, dropped };
}

/** One line for a violation: `<Message> "<name>": <path>: <rule>: <message>`, e.g. `Cluster "a|80": connect_timeout: duration.gt: must be > 0s, got 0s`. */
export function formatViolation(v: Violation): string {
  const type = v.typeUrl.slice(v.typeUrl.lastIndexOf('.') + 1);
  return `${type} "${v.name}"${v.path ? `: ${v.path}` : ''}: ${v.rule}: ${v.message}`;
}
