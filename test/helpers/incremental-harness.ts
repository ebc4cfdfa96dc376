/**
 * A MeshController on an in-memory store, the proxies a test connects, and what each should
 * have: a full generation on the controller's current MeshSnapshot (for incremental-push tests).
 */
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { Registry } from 'prom-client';
import { CertificateAuthority } from '../../src/certificate/authority.js';
import { CertificateManager } from '../../src/certificate/manager.js';
import { ObjectStore } from '../../src/store/object-store.js';
import { SnapshotCache, ResourceInterner, buildProxySnapshot } from '../../src/xds/cache/snapshot-cache.js';
import { MeshController, encodeResources } from '../../src/controller/mesh-controller.js';
import { GenerationContext, proxyProfile } from '../../src/envoy/context.js';
import { generateProxyResources } from '../../src/envoy/generate.js';
import { validateProxyResources } from '../../src/envoy/validate/index.js';
import { parseCommonName, type Proxy } from '../../src/proxy/types.js';
import { decodeMessage } from '../../src/api/codec.js';
import type { TypeUrl } from '../../src/api/type-urls.js';
import type { KubeObject } from '../../src/store/objects.js';
import type { ProxySnapshot } from '../../src/xds/cache/types.js';

let certsP: Promise<CertificateManager> | undefined;
/** One deterministic certificate manager for every harness of the process (issuance is the slow part). */
export function sharedCerts(): Promise<CertificateManager> {
  certsP ??= (async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'trellis-incremental-ca-'));
    const ca = await CertificateAuthority.loadOrCreate(dir);
    return new CertificateManager({ ca, deterministic: true });
  })();
  return certsP;
}

/** See {@link harness}. */
export interface Harness {
  store: ObjectStore;
  cache: SnapshotCache;
  controller: MeshController;
  certificates: CertificateManager;
  open(cn: string, grpc?: boolean): Promise<Proxy>;
  set(objects: KubeObject[]): Promise<void>;
  /** Differences between each connected proxy's snapshot and a full regeneration on controller.snapshot. */
  check(): Promise<string[]>;
  stop(): void;
}

/** Starts a controller on `objects` (debounce 1 ms, no resync). */
export async function harness(objects: KubeObject[], opts: { certificates?: CertificateManager } = {}): Promise<Harness> {
  const certificates = opts.certificates ?? (await sharedCerts());
  const store = new ObjectStore();
  store.replaceAll('test', objects);
  const cache = new SnapshotCache();
  const controller = new MeshController({
    store, certificates, cache, logger: pino({ level: 'silent' }), metrics: new Registry(), meshName: 'osm',
    debounceQuietMs: 1, debounceMaxDelayMs: 5, resyncIntervalMs: 0,
  });
  controller.start();
  let sid = 0;
  const proxies = new Map<string, Proxy>();
  return {
    store, cache, controller, certificates,
    async open(cn, grpc) {
      const p: Proxy = { ...parseCommonName(cn), verified: true }; // an mTLS sidecar
      const proxy = grpc ? { ...p, clientType: 'grpc' as const } : p;
      await controller.onStreamOpen(p, ++sid, grpc ? { user_agent_name: 'gRPC Node Pure JS' } : undefined);
      proxies.set(p.uuid, proxy);
      return proxy;
    },
    async set(next) {
      store.replaceAll('test', next);
      await controller.flush();
      await controller.flush();
    },
    async check() {
      const out: string[] = [];
      for (const proxy of proxies.values()) {
        const got = cache.getSnapshot(proxy.uuid);
        const want = await ideal(controller, certificates, proxy);
        if (!got) { out.push(`${proxy.identity}: no snapshot`); continue; }
        if (!want) continue; // violations: incremental legitimately keeps last good
        out.push(...diff(got, want, `${proxy.identity}${proxy.clientType === 'grpc' ? '(grpc)' : ''}`));
      }
      return out;
    },
    stop() { controller.stop(); },
  };
}

/** What `proxy` should have: a full generation with a fresh context (nothing carried over), validated; undefined when it has violations. */
export async function ideal(controller: MeshController, certificates: CertificateManager, proxy: Proxy): Promise<ProxySnapshot | undefined> {
  const cert = await certificates.getServiceCertificate(proxy.identity);
  const resources = generateProxyResources(new GenerationContext(controller.snapshot), proxyProfile(proxy), { certChainPem: cert.certPem, privateKeyPem: cert.keyPem, caPem: certificates.caPem });
  const { violations } = validateProxyResources(resources);
  if (violations.length > 0) return undefined;
  return buildProxySnapshot(encodeResources(resources), new ResourceInterner());
}

/** Differences between two proxy snapshots, resource by resource (decoded where they differ). */
export function diff(a: ProxySnapshot, b: ProxySnapshot, who: string): string[] {
  const out: string[] = [];
  const types = new Set([...a.resources.keys(), ...b.resources.keys()]);
  for (const t of types) {
    const short = String(t).split('.').pop();
    const ra = a.resources.get(t) ?? new Map();
    const rb = b.resources.get(t) ?? new Map();
    for (const n of new Set([...ra.keys(), ...rb.keys()])) {
      const x = ra.get(n); const y = rb.get(n);
      if (!x) out.push(`${who} ${short} ${n}: missing in incremental`);
      else if (!y) out.push(`${who} ${short} ${n}: extra in incremental`);
      else if (x.version !== y.version) {
        const dec = (c: typeof x) => JSON.stringify(decodeMessage(t as TypeUrl, Buffer.from(c.resource.value)));
        const [da, db] = [dec(x), dec(y)];
        let i = 0;
        while (i < da.length && da[i] === db[i]) i++;
        const from = Math.max(0, i - 200);
        out.push(`${who} ${short} ${n}: differs at ${i}\n   incr:  …${da.slice(from, i + 200)}\n   ideal: …${db.slice(from, i + 200)}`);
      }
    }
  }
  return out;
}
