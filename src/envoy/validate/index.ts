/**
 * The "correct by construction" check run on every proxy's generated resources before they
 * are encoded and published: the Envoy protos' own `validate.rules` annotations (the PGV
 * rules interpreter, `pgv-rules.ts`, with the "alike" shortcut of `alike.ts`) plus the
 * cross-resource rules no annotation states (`cross-resource.ts`).
 *
 * Each resource is encoded with the real Envoy protos, and the message protobufjs encoded, in
 * decoded form (`encodeChecked`), is validated: it is what goes on the wire, so a value
 * protobufjs coerced is seen as the proxy will see it (an unknown field is an error). A resource that cannot be encoded is a violation (`encode`).
 * The encodings and results are kept in the caller's {@link ResourceCheckCache}
 * (`resource-check-cache.ts`).
 *
 * Pure: no I/O; no module state (what is remembered is in the cache the caller passes).
 */
import type { TypeUrl } from '../../api/type-urls.js';
import type { ResourceLayer } from '../context.js';
import type { ProxyResources } from '../generate.js';
import type { NamedResource } from '../resource.js';
import { validateCrossResource, type DecodedResource, type ResourceReference } from './cross-resource.js';
import { ResourceCheckCache, resourceKey as key } from './resource-check-cache.js';

export { validateMessage, validateEncoded, PgvRules, type RuleViolation } from './pgv-rules.js';
export { validLike } from './alike.js';

/**
 * The names of a resource map (or any map by name), to look up and to list, as many times as
 * they are read; with `common` (see {@link NameSet}) the names of its shared part.
 */
export function namesOf(map: ReadonlyMap<string, unknown>, common?: NameLookup): NameSet {
  return { has: (name) => map.has(name), [Symbol.iterator]: () => map.keys(), ...(common ? { common } : {}) };
}
export { ResourceCheckCache, type CheckedResource, type LayerCheck } from './resource-check-cache.js';
export { validateCrossResource, ResourceFactsCache, resourceReferences, type CrossViolation, type DecodedResources, type ResourceReference } from './cross-resource.js';

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
  violations.push(...validateCrossResource(decoded, others, cache.facts));
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
        const ref = d && cache.facts.of(typeUrl, d).references.find((x) => droppedKeys.has(key(x.typeUrl, x.name)));
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

/** The names of some resources of one type, as far as a reference needs them (a `ResourceMap`, a `Set`). */
export interface NameLookup {
  has(name: string): boolean;
}

/**
 * The names of some resources of one type, to look up and to list (a `Set`, or a `ResourceMap`'s
 * names, see `namesOf`); `common`: those of them many proxies have alike, as one object kept
 * while they are (a shared layer's), which a reference is resolved against once for all.
 */
export type NameSet = NameLookup & Iterable<string> & { readonly common?: NameLookup };

/**
 * Whether {@link validateProxyResources} would find no violation in a proxy's resources given
 * in layers: per type, a shared {@link ResourceLayer} (checked once per layer object, with what
 * its references need: once per pair of layers, `ResourceCheckCache.checkLayer`) and the
 * proxy's own resources (every type generated has an entry in `own`). The same rules, without
 * walking a layer for every proxy: every resource checked on its own (encoding, `validate.rules`,
 * its name field, single-resource rules), no name twice in a type (layer and own together), and
 * every reference resolved by the resources of its type (of `others` for a type not generated).
 * When false, validate the resources flat for the violations and the valid subset.
 * @param others for a partial update: the names of the proxy's resources of the types not generated.
 * @param existing names counted as existing whatever was generated (a Secret referred to but withheld).
 */
export function layeredResourcesValid(
  shared: ReadonlyMap<TypeUrl, ResourceLayer>,
  own: ProxyResources,
  cache: ResourceCheckCache,
  others?: ReadonlyMap<TypeUrl, NameLookup & { readonly common?: NameLookup }>,
  existing?: ReadonlyMap<TypeUrl, NameLookup>,
): boolean {
  const ownNames = new Map<TypeUrl, Set<string>>();
  // What refers to something, with its references: own resources (by resource object) and layers.
  const makers: [object, readonly ResourceReference[]][] = [];
  for (const [typeUrl, list] of own) {
    const layer = shared.get(typeUrl);
    const names = new Set<string>();
    for (const r of list) {
      if (names.has(r.name) || layer?.names.has(r.name)) return false;
      names.add(r.name);
      const facts = cache.checkAlone(typeUrl, r);
      if (!facts) return false;
      if (facts.references.length > 0) makers.push([r.resource, facts.references]);
    }
    ownNames.set(typeUrl, names);
  }
  for (const [typeUrl, layer] of shared) {
    const check = own.has(typeUrl) ? cache.checkLayer(typeUrl, layer) : undefined;
    if (!check?.valid) return false;
    if (check.all.length > 0) makers.push([layer, check.all]);
  }
  // A type generated resolves by its own resources and its layer; another by `others`.
  const resolves = (typeUrl: TypeUrl, name: string): boolean => {
    if (existing?.get(typeUrl)?.has(name)) return true;
    const names = ownNames.get(typeUrl);
    if (!names) return others?.get(typeUrl)?.has(name) ?? false;
    return names.has(name) || (shared.get(typeUrl)?.names.has(name) ?? false);
  };
  for (const [maker, references] of makers) {
    for (const [typeUrl, refs] of cache.referencesByType(maker, references)) {
      // To a type with a layer: only the references the layer lacks (found once per maker and layer).
      const common = ownNames.has(typeUrl) ? shared.get(typeUrl)?.names : others?.get(typeUrl)?.common;
      for (const ref of common ? cache.unresolvedReferences(maker, refs, typeUrl, common) : refs) if (!resolves(typeUrl, ref.name)) return false;
    }
  }
  return true;
}

/** One line for a violation: `<Message> "<name>": <path>: <rule>: <message>`, e.g. `Cluster "a|80": connect_timeout: duration.gt: must be > 0s, got 0s`. */
export function formatViolation(v: Violation): string {
  const type = v.typeUrl.slice(v.typeUrl.lastIndexOf('.') + 1);
  return `${type} "${v.name}"${v.path ? `: ${v.path}` : ''}: ${v.rule}: ${v.message}`;
}
