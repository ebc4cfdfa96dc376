/**
 * One configuration of a kind of proxy (identity and client type), generated, validated and
 * encoded: what `MeshController` remembers per MeshSnapshot. A pure function of the generation
 * context (its MeshSnapshot), the proxy and its certificates (no I/O).
 */
import { TYPE_SHORT_NAME, TypeUrl } from '../api/type-urls.js';
import { serviceCertSecretName } from '../catalog/names.js';
import { proxyProfile, type GenerationContext } from '../envoy/context.js';
import { proxyDependencies } from '../envoy/dependencies.js';
import { generateProxyResources, type ProxyResources } from '../envoy/generate.js';
import type { ProxyCertificates } from '../envoy/sds/sds.js';
import { ResourceCheckCache, validateProxyResources, type ValidationResult, type Violation } from '../envoy/validate/index.js';
import type { Proxy } from '../proxy/types.js';
import type { NamedResource as EncodedNamedResource } from '../xds/cache/snapshot-cache.js';

/** The result of {@link generateConfiguration}; structured-clonable. */
export interface EncodedConfiguration {
  readonly violations: readonly Violation[];
  /** `CDS name`, `LDS name`, … of the resources left out of `encoded` because of `violations`. */
  readonly dropped: readonly string[];
  /** Every resource, encoded, by type URL; when there are violations, the valid subset only. */
  readonly encoded: ReadonlyMap<TypeUrl, readonly EncodedNamedResource[]>;
  /** The services the configuration was generated from (`proxyDependencies`). */
  readonly dependencies: readonly string[];
}

/**
 * The certificate material a configuration is generated with: the identity's service
 * certificate and key for a verified sidecar; the mesh root alone otherwise (a proxy whose
 * identity is only claimed, or a proxyless client, which has no SDS).
 */
export type ConfigurationCertificates = ProxyCertificates | { readonly caPem: string };

/**
 * Generates `proxy`'s resources from `context`'s MeshSnapshot, validates them and encodes them (the valid,
 * referentially closed subset when some break a rule; see `validateProxyResources`). Without
 * a service certificate in `certs`, the identity's `service-cert:<ns>/<sa>` Secret is left out
 * (never generated with a key): the listeners and clusters still name it (they are the same as a
 * verified sidecar's, and are valid with it counted as existing elsewhere), but it is never sent,
 * so the proxy's mTLS does not work (see README, plaintext listener).
 * @param context the generation context of the MeshSnapshot to generate from.
 * @param cache encodings and rule checks to reuse across proxies and calls.
 * @param types when given, only the resources of these types are generated, validated and
 *   encoded (`encoded` holds those types only); all five otherwise.
 * @param others with `types`: the names of the proxy's resources of the other types (those it
 *   keeps), which the generated ones may refer to; without them such a reference is a violation.
 * @throws Error when a resource cannot be generated or encoded.
 */
export function generateConfiguration(
  context: GenerationContext,
  proxy: Proxy,
  certs: ConfigurationCertificates,
  cache: ResourceCheckCache,
  types?: ReadonlySet<TypeUrl>,
  others?: ReadonlyMap<TypeUrl, Iterable<string>>,
): EncodedConfiguration {
  const withKey = 'privateKeyPem' in certs;
  const profile = proxyProfile(proxy);
  const resources = generateProxyResources(context, profile, withKey ? certs : { ...certs, certChainPem: '', privateKeyPem: '' }, types);
  const withheld = !withKey && resources.has(TypeUrl.Secret);
  const { violations, valid, dropped } = withheld ? validateWithheld(resources, serviceCertSecretName(proxy.identity), cache, others) : validateProxyResources(resources, cache, others);
  return {
    violations,
    dropped: dropped.map((d) => `${TYPE_SHORT_NAME[d.typeUrl]} ${d.name}`),
    encoded: encodeResources(violations.length === 0 && !withheld ? resources : valid, cache),
    dependencies: [...proxyDependencies(context, profile)],
  };
}

/**
 * Validates `resources` without the Secret `withheld`: the Secrets apart, and the rest with
 * `withheld` counted as an existing Secret (it is referred to, but never sent). `kept`: the
 * names of the proxy's resources of types not generated (see `generateConfiguration`).
 */
function validateWithheld(resources: ProxyResources, withheld: string, cache: ResourceCheckCache, kept?: ReadonlyMap<TypeUrl, Iterable<string>>): ValidationResult {
  const secrets = (resources.get(TypeUrl.Secret) ?? []).filter((r) => r.name !== withheld);
  const others = new Map([...resources].filter(([type]) => type !== TypeUrl.Secret));
  const keptNames = [...(kept ?? [])].filter(([type]) => !resources.has(type)).map(([type, names]): [TypeUrl, string[]] => [type, [...names]]);
  const rest = validateProxyResources(others, cache, new Map([...keptNames, [TypeUrl.Secret, [...secrets.map((r) => r.name), withheld]]]));
  const sds = validateProxyResources(new Map([[TypeUrl.Secret, secrets]]), cache, new Map([...keptNames, ...[...others].map(([type, list]): [TypeUrl, string[]] => [type, list.map((r) => r.name)])]));
  return {
    violations: [...rest.violations, ...sds.violations],
    valid: new Map([...rest.valid, ...sds.valid]),
    dropped: [...rest.dropped, ...sds.dropped],
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
      list.map((r) => {
        const { encoded, error } = cache.check(type, r.resource, r.parts, r.name);
        if (!encoded) throw new Error(`${TYPE_SHORT_NAME[type]} resource "${r.name}": ${error}`);
        return { name: r.name, resource: { type_url: type, value: encoded } };
      }),
    );
  }
  return out;
}
