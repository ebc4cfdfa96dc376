/**
 * What a push regenerates of one kind of proxy, and the two computations of its configuration:
 * in full, or an update of some types of a snapshot it has (the rest kept as they are, the new
 * resources validated against it). Pure: no I/O, no state (the memo is `ConfigurationMemo`).
 */
import { TypeUrl } from '../api/type-urls.js';
import type { GenerationContext } from '../envoy/context.js';
import { resourcesChangedBy, typesToRegenerate, type ProxyResources } from '../envoy/generate.js';
import type { PushChange } from '../envoy/push-change.js';
import { namesOf, validateProxyResources, type NameSet, type ResourceCheckCache } from '../envoy/validate/index.js';
import type { Proxy } from '../proxy/types.js';
import { buildProxySnapshot, replaceResources, sharedLayerOf, type ResourceInterner } from '../xds/cache/snapshot-cache.js';
import type { ProxySnapshot, ResourceMap } from '../xds/cache/types.js';
import type { NamedResource as EncodedNamedResource } from '../xds/cache/snapshot-cache.js';
import { checkConfiguration, encodeResources, generateConfiguration, type ConfigurationCertificates, type EncodedConfiguration } from './configuration.js';
import type { GeneratedConfig } from './configuration-memo.js';

/** What a push regenerates of a proxy: `typesToRegenerate`, and of some of those types only the resources `resourcesChangedBy` gives. */
export interface Regeneration {
  readonly types: ReadonlySet<TypeUrl>;
  readonly changed: ProxyResources;
  /**
   * `changed`, validated on their own and encoded, once per push, when they break no rule by
   * themselves: they refer to nothing outside them, and replace resources of the same names, so
   * they are valid in every proxy that has those (else each kind of proxy validates them against
   * the rest of its resources, and the violations are its own).
   */
  readonly checkedChanges: Omit<EncodedConfiguration, 'dependencies'> | undefined;
}

/** Every type a proxy's configuration has. */
export const PROXY_TYPES: readonly TypeUrl[] = [TypeUrl.Cluster, TypeUrl.ClusterLoadAssignment, TypeUrl.Listener, TypeUrl.RouteConfiguration, TypeUrl.Secret];

/** What the controller remembers of a full configuration: its snapshot (or the valid subset's) built from the encodings. */
function generatedConfig(configuration: EncodedConfiguration, proxy: Proxy, interner: ResourceInterner): GeneratedConfig {
  const snapshot = buildProxySnapshot(configuration.encoded, interner, configuration.shared);
  const valid = configuration.violations.length === 0;
  return {
    violations: configuration.violations,
    dropped: configuration.dropped,
    snapshot: valid ? snapshot : undefined,
    validSnapshot: valid ? undefined : snapshot,
    dependencies: configuration.dependencies,
    proxy,
    ahead: false,
  };
}

/**
 * `previous` with the types of `update` replaced, or, for a type in `overlaid`, with those of its
 * resources that `previous` has replaced (`replaceResources`: its others stay); a type whose
 * version is the same keeps its resource map. `previous` itself when nothing differs.
 */
function withTypes(previous: ProxySnapshot, update: ProxySnapshot, overlaid: ReadonlySet<TypeUrl>, interner: ResourceInterner): ProxySnapshot {
  let next = previous;
  for (const type of overlaid) next = replaceResources(next, type, [...(update.resources.get(type)?.values() ?? [])], interner);
  let resources: Map<TypeUrl, ResourceMap> | undefined;
  let versions: Map<TypeUrl, string> | undefined;
  for (const [type, map] of update.resources) {
    if (overlaid.has(type)) continue;
    const version = update.versions.get(type)!;
    if (next.versions.get(type) === version) continue;
    (resources ??= new Map(next.resources)).set(type, map);
    (versions ??= new Map(next.versions)).set(type, version);
  }
  return resources && versions ? Object.freeze({ resources, versions }) : next;
}

/** Whether two resource maps hold the same names. */
function sameNames(a: ResourceMap, b: ResourceMap | undefined): boolean {
  if (!b || a.size !== b.size) return false;
  for (const name of a.keys()) if (!b.has(name)) return false;
  return true;
}

/**
 * What to regenerate of a proxy for `push` (`typesToRegenerate`, `resourcesChangedBy`), with the
 * changed resources validated on their own and encoded when they break no rule by themselves.
 * @param context the generation context of `push.after`.
 */
export function planRegeneration(push: PushChange, context: GenerationContext, cache: ResourceCheckCache): Regeneration {
  const types = typesToRegenerate(push);
  const changed = resourcesChangedBy(push, types, context);
  const valid = changed.size > 0 && validateProxyResources(changed, cache).violations.length === 0;
  return { types, changed, checkedChanges: valid ? { violations: [], dropped: [], encoded: encodeResources(changed, cache), shared: new Map() } : undefined };
}

/** What a configuration is generated from: the generation context (its MeshSnapshot), the proxy, its certificates, and the encodings and checks to reuse. */
export interface ConfigurationInputs {
  readonly context: GenerationContext;
  readonly proxy: Proxy;
  readonly certs: ConfigurationCertificates;
  readonly cache: ResourceCheckCache;
  /** Where the snapshots' encoded resources are interned (the controller's). */
  readonly interner: ResourceInterner;
}

/** The full configuration of `proxy` (`generateConfiguration`), with its snapshot (or the valid subset's). */
export function fullConfiguration({ context, proxy, certs, cache, interner }: ConfigurationInputs): GeneratedConfig {
  return generatedConfig(generateConfiguration(context, proxy, certs, cache), proxy, interner);
}

/**
 * `previous` (a valid snapshot of `proxy` from a full generation) with its `types` generated
 * again from `context`'s MeshSnapshot, validated against the rest of it (cross-resource references). Of a type in
 * `changed`, only those resources are validated, encoded and replaced (the change alters no other,
 * see `resourcesChangedBy`). A result with violations has no snapshot (the proxy keeps `previous`).
 * @param dependencies the services `previous` was generated from (a change of endpoints, TrafficSplit weights or certificate alters none).
 * @returns undefined when the types cannot be replaced alone: their new resources have other
 *   names than `previous`'s (the rest may refer to them), so a full generation is needed.
 * @throws Error when a resource cannot be generated or encoded.
 */
export function updatedConfiguration(
  { context, proxy, certs, cache, interner }: ConfigurationInputs,
  { types, changed, checkedChanges }: Regeneration,
  previous: ProxySnapshot,
  dependencies: ReadonlySet<string>,
): GeneratedConfig | undefined {
  // The names of the proxy's resources of the types not in `excluded` (those of a type in `changed` stay).
  const others = (excluded: ReadonlySet<TypeUrl>): Map<TypeUrl, NameSet> =>
    new Map([...previous.resources].filter(([type]) => !excluded.has(type)).map(([type, map]) => [type, namesOf(map, sharedLayerOf(map))] as const));
  const generated = new Set([...types].filter((type) => !changed.has(type)));
  const parts: Omit<EncodedConfiguration, 'dependencies'>[] = [];
  if (generated.size > 0) parts.push(generateConfiguration(context, proxy, certs, cache, generated, others(generated)));
  if (changed.size > 0) parts.push(checkedChanges ?? checkConfiguration(changed, certs, cache, others(new Set(changed.keys()))));
  const violations = parts.flatMap((p) => p.violations);
  const base = { violations, dropped: parts.flatMap((p) => p.dropped), validSnapshot: undefined, dependencies, proxy, ahead: false };
  if (violations.length > 0) return { ...base, snapshot: undefined };
  const shared = new Map<TypeUrl, readonly EncodedNamedResource[]>(parts.flatMap((p) => [...p.shared]));
  const update = buildProxySnapshot(new Map(parts.flatMap((p) => [...p.encoded])), interner, shared);
  for (const [type, map] of update.resources) if (generated.has(type) && !sameNames(map, previous.resources.get(type))) return undefined;
  return { ...base, snapshot: withTypes(previous, update, new Set(changed.keys()), interner) };
}
