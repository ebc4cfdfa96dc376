/**
 * One configuration of a kind of proxy (identity and client type), generated, validated and
 * encoded: what `MeshController` remembers per MeshSnapshot. A pure function of the generation
 * context (its MeshSnapshot), the proxy and its certificates (no I/O).
 */
import { TYPE_SHORT_NAME, TypeUrl } from '../api/type-urls.js';
import { SERVICE_CERT_SECRET_NAME } from '../catalog/names.js';
import { proxyProfile, type GenerationContext } from '../envoy/context.js';
import { proxyDependencies } from '../envoy/dependencies.js';
import { generateLayeredResources, generateProxyResources, type LayeredResources, type ProxyResources } from '../envoy/generate.js';
import type { ProxyCertificates } from '../envoy/sds/sds.js';
import { layeredResourcesValid, ResourceCheckCache, validateProxyResources, type NameSet, type ValidationResult, type Violation } from '../envoy/validate/index.js';
import type { Proxy } from '../proxy/types.js';
import type { NamedResource as EncodedNamedResource } from '../xds/cache/snapshot-cache.js';

/** The result of {@link generateConfiguration}. */
export interface EncodedConfiguration {
  readonly violations: readonly Violation[];
  /** `CDS name`, `LDS name`, … of the resources left out of `encoded` because of `violations`. */
  readonly dropped: readonly string[];
  /**
   * Every resource, encoded, by type URL, but those of {@link shared}; when there are
   * violations, the valid subset only (and nothing is shared).
   */
  readonly encoded: ReadonlyMap<TypeUrl, readonly EncodedNamedResource[]>;
  /**
   * Per type, the encoded layer the proxy has in common with others (its outbound view's
   * upstream Clusters and ClusterLoadAssignments: `ResourceCheckCache.encodeLayer`, one array
   * per layer, which `buildProxySnapshot` makes one shared map of).
   */
  readonly shared: ReadonlyMap<TypeUrl, readonly EncodedNamedResource[]>;
  /** The services the configuration was generated from (`proxyDependencies`); empty for a partial one (`types` given). */
  readonly dependencies: ReadonlySet<string>;
}

/** No shared layer. */
const NOT_SHARED: ReadonlyMap<TypeUrl, readonly EncodedNamedResource[]> = new Map();

/**
 * The certificate material a configuration is generated with: the identity's service
 * certificate and key for a verified sidecar; the mesh root alone otherwise (a proxy whose
 * identity is only claimed, or a proxyless client, which has no SDS).
 */
export type ConfigurationCertificates = ProxyCertificates | { readonly caPem: string };

/**
 * Generates `proxy`'s resources from `context`'s MeshSnapshot, validates them and encodes them (the valid,
 * referentially closed subset when some break a rule; see `validateProxyResources`). Without
 * a service certificate in `certs`, the proxy's `service-cert` Secret (its identity's key) is left out
 * (never generated with a key): the listeners and clusters still name it (they are the same as a
 * verified sidecar's, and are valid with it counted as existing elsewhere), but it is never sent,
 * so the proxy's mTLS does not work (see README, plaintext listener).
 * @param context the generation context of the MeshSnapshot to generate from.
 * @param cache encodings and rule checks to reuse across proxies and calls.
 * @param types the types to regenerate (every type when absent): the result holds those only.
 * @param others with `types`: the names of the proxy's resources of the other types, which the
 *   regenerated ones are validated against (cross-resource references).
 * @throws Error when a resource cannot be generated or encoded.
 */
export function generateConfiguration(
  context: GenerationContext,
  proxy: Proxy,
  certs: ConfigurationCertificates,
  cache: ResourceCheckCache,
  types?: ReadonlySet<TypeUrl>,
  others?: ReadonlyMap<TypeUrl, NameSet>,
): EncodedConfiguration {
  const withKey = 'privateKeyPem' in certs;
  const profile = proxyProfile(proxy);
  const sdsCerts = withKey ? certs : { ...certs, certChainPem: '', privateKeyPem: '' };
  // In layers first (a layer is checked and encoded once for every proxy given it); flat, for
  // the violations and the valid subset, when something breaks a rule.
  const checked =
    checkLayers(generateLayeredResources(context, profile, sdsCerts, types), withKey, cache, others) ??
    checkConfiguration(generateProxyResources(context, profile, sdsCerts, types), certs, cache, others);
  return { ...checked, dependencies: types === undefined ? proxyDependencies(context, profile) : new Set() };
}

/**
 * `layered` validated (`layeredResourcesValid`) and encoded, its layers once for every proxy
 * given them; undefined when something breaks a rule. Without the key (`withKey` false), the
 * proxy's `service-cert` Secret is left out and counted as existing, as {@link checkConfiguration} does.
 */
function checkLayers(
  { shared, own }: LayeredResources,
  withKey: boolean,
  cache: ResourceCheckCache,
  others: ReadonlyMap<TypeUrl, NameSet> | undefined,
): Omit<EncodedConfiguration, 'dependencies'> | undefined {
  const secrets = own.get(TypeUrl.Secret);
  const sent = withKey || !secrets ? own : new Map([...own].map(([type, list]) => [type, type === TypeUrl.Secret ? list.filter((r) => r.name !== SERVICE_CERT_SECRET_NAME) : list] as const));
  const existing = withKey ? undefined : new Map([[TypeUrl.Secret, new Set([SERVICE_CERT_SECRET_NAME])]]);
  if (!layeredResourcesValid(shared, sent, cache, others, existing)) return undefined;
  return { violations: [], dropped: [], encoded: encodeResources(sent, cache), shared: new Map([...shared].map(([type, layer]) => [type, cache.encodeLayer(type, layer) as readonly EncodedNamedResource[]])) };
}

/**
 * Validates and encodes resources generated for a proxy (the valid, referentially closed subset
 * when some break a rule), as {@link generateConfiguration} does: without a service certificate
 * in `certs`, with the proxy's `service-cert` Secret counted as existing but left out.
 * @param others the names of the proxy's resources of the types not in `resources`, which those may refer to.
 * @throws Error when a resource cannot be encoded.
 */
export function checkConfiguration(
  resources: ProxyResources,
  certs: ConfigurationCertificates,
  cache: ResourceCheckCache,
  others?: ReadonlyMap<TypeUrl, Iterable<string>>,
): Omit<EncodedConfiguration, 'dependencies'> {
  const withKey = 'privateKeyPem' in certs;
  const { violations, valid, dropped } = withKey
    ? validateProxyResources(resources, cache, others)
    : validateWithheld(resources, SERVICE_CERT_SECRET_NAME, cache, others);
  return {
    violations,
    dropped: dropped.map((d) => `${TYPE_SHORT_NAME[d.typeUrl]} ${d.name}`),
    encoded: encodeResources(violations.length === 0 && withKey ? resources : valid, cache),
    shared: NOT_SHARED,
  };
}

/**
 * Validates `resources` without the Secret `withheld`: the Secrets apart, and the rest with
 * `withheld` counted as an existing Secret (it is referred to, but never sent). `others` (a
 * partial update): the names of the proxy's resources of the types not in `resources`.
 */
function validateWithheld(resources: ProxyResources, withheld: string, cache: ResourceCheckCache, others?: ReadonlyMap<TypeUrl, Iterable<string>>): ValidationResult {
  const given = resources.get(TypeUrl.Secret);
  const secrets = given?.filter((r) => r.name !== withheld);
  const rest = new Map([...resources].filter(([type]) => type !== TypeUrl.Secret));
  const secretNames = secrets ? secrets.map((r) => r.name) : [...(others?.get(TypeUrl.Secret) ?? [])];
  const checked = validateProxyResources(rest, cache, new Map([...(others ?? []), [TypeUrl.Secret, [...secretNames, withheld]]]));
  if (!secrets) return checked;
  const restNames = [...rest].map(([type, list]) => [type, list.map((r) => r.name)] as const);
  const sds = validateProxyResources(new Map([[TypeUrl.Secret, secrets]]), cache, new Map([...(others ?? []), ...restNames]));
  return {
    violations: [...checked.violations, ...sds.violations],
    valid: new Map([...checked.valid, ...sds.valid]),
    dropped: [...checked.dropped, ...sds.dropped],
  };
}

/**
 * Encodes every generated resource with the real Envoy protos (through `cache`, so content
 * encoded before is not encoded again).
 * @throws Error naming the type and resource when one cannot be encoded (unknown field, bad value).
 */
export function encodeResources(resources: ProxyResources, cache: ResourceCheckCache = new ResourceCheckCache()): Map<TypeUrl, EncodedNamedResource[]> {
  const out = new Map<TypeUrl, EncodedNamedResource[]>();
  for (const [type, list] of resources) {
    out.set(
      type,
      list.map((r) => cache.encode(type, r)),
    );
  }
  return out;
}
