import assert from 'node:assert/strict';
import { decodeAny, encodeAny } from '../../src/api/codec.js';
import type { TypeUrl } from '../../src/api/type-urls.js';
import { buildMeshSnapshot } from '../../src/catalog/build-snapshot.js';
import { GenerationContext, proxyProfile } from '../../src/envoy/context.js';
import { generateProxyResources } from '../../src/envoy/generate.js';
import { parseCommonName, type Proxy } from '../../src/proxy/types.js';
import type { KubeObject } from '../../src/store/objects.js';
import { memoryStore } from './memory-store.js';

/** A decoded resource (Envoy JSON-dump shape, snake_case fields, `@type` on Anys). */
export type Decoded = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

/** A proxy's decoded resources: type URL → name → resource. */
export type DecodedConfig = Map<TypeUrl, Map<string, Decoded>>;

/** The certificates test proxies are given (their PEMs end up inline in SDS secrets). */
export const TEST_CERTS = { certChainPem: 'CERT', privateKeyPem: 'KEY', caPem: 'ROOT' };

/** A sidecar proxy of service account `<ns>/<sa>`; with `clientType`, that kind of client instead. */
export function proxyOf(sa: string, ns: string, clientType?: Proxy['clientType']): Proxy {
  const proxy = parseCommonName(`6ba7b810-9dad-11d1-80b4-00c04fd430c8.sidecar.${sa}.${ns}.cluster.local`);
  return clientType === undefined ? proxy : { ...proxy, clientType };
}

/** Options of {@link generateConfig}. */
export interface GenerateConfigOptions {
  /** The kind of client the proxy is (default: what {@link parseCommonName} says, a sidecar). */
  readonly clientType?: Proxy['clientType'];
  /** Do not require the mesh snapshot to be built without problems (policies skipped). */
  readonly allowProblems?: boolean;
}

/**
 * Builds the mesh snapshot of `objects` (mesh `osm`; no problems unless allowed), generates the
 * resources of the proxy of `<ns>/<sa>`, checks their names are unique per type, and encodes
 * each with the real Envoy protos and decodes it back.
 */
export function generateConfig(objects: readonly KubeObject[], sa: string, ns: string, options: GenerateConfigOptions = {}): DecodedConfig {
  const { snapshot, problems } = buildMeshSnapshot(memoryStore(objects), { meshName: 'osm', generation: 1 });
  if (!options.allowProblems) assert.deepEqual(problems, []);
  const out: DecodedConfig = new Map();
  for (const [type, list] of generateProxyResources(new GenerationContext(snapshot), proxyProfile(proxyOf(sa, ns, options.clientType)), TEST_CERTS)) {
    const names = list.map((r) => r.name);
    assert.equal(new Set(names).size, names.length, `duplicate ${type} names: ${names.join(', ')}`);
    out.set(type, new Map(list.map((r) => [r.name, decodeAny(encodeAny(type, r.resource))])));
  }
  return out;
}

/** The names of `config`'s resources of `type`, sorted. */
export function names(config: DecodedConfig, type: TypeUrl): string[] {
  return [...(config.get(type)?.keys() ?? [])].sort();
}
