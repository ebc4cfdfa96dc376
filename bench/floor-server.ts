/**
 * The floor: the same ADS server (`AdsServer` over a `SnapshotCache`) writing the same encoded
 * responses to the same N streams with nothing else to do. A separate process (forked by
 * `bench/run.ts`, commands over IPC) builds every proxy's snapshot before anything is timed,
 * with the controller's own code (manifests source, `buildMeshSnapshot`,
 * `generateProxyResources`, `encodeResources`, `buildProxySnapshot`) from the same manifests and
 * the same CA, so the bytes match what the controller sends. No hooks, no generation, no
 * debounce: a `set` puts every proxy's snapshot in the cache at once, and the load generator
 * times the ACKs.
 *
 * Commands and replies:
 * - `build {manifests, manifestsAfter, stateDir, proxies, transport}`: builds snapshot sets
 *   `before` (from `manifests`) and `after` (from `manifestsAfter`), starts the server on
 *   127.0.0.1; replies `{port, buildMs}`.
 * - `streams`: number of authenticated streams. `set {which}`: sets every snapshot of that
 *   set; replies `{setAt, setMs}`. `stop`: exits.
 */
import 'reflect-metadata';
import * as grpc from '@grpc/grpc-js';
import { pino } from 'pino';
import { buildMeshSnapshot } from '../src/catalog/build-snapshot.js';
import { CertificateAuthority } from '../src/certificate/authority.js';
import { CertificateManager } from '../src/certificate/manager.js';
import { encodeResources } from '../src/controller/mesh-controller.js';
import { GenerationContext, proxyProfile } from '../src/envoy/context.js';
import { generateProxyResources } from '../src/envoy/generate.js';
import { ResourceCheckCache } from '../src/envoy/validate/index.js';
import { parseCommonName, proxyCommonName, type Proxy } from '../src/proxy/types.js';
import { ManifestsSource } from '../src/sources/manifests/manifests-source.js';
import { ObjectStore } from '../src/store/object-store.js';
import { ResourceInterner, buildProxySnapshot, SnapshotCache } from '../src/xds/cache/snapshot-cache.js';
import type { ProxySnapshot } from '../src/xds/cache/types.js';
import { AdsServer, authenticateFromNodeId, authenticateFromPeerCertificate } from '../src/xds/server/ads-server.js';
import { nowMs } from './lean-sidecar.js';
import type { Transport } from './load-generator.js';
import { MESH_NAME, type BenchProxy } from './mesh-generator.js';

type FloorCommand =
  | { cmd: 'build'; manifests: string; manifestsAfter: string; stateDir: string; proxies: BenchProxy[]; transport: Transport }
  | { cmd: 'streams' }
  | { cmd: 'set'; which: 'before' | 'after' }
  | { cmd: 'stop' };

/** Every proxy's snapshot from the manifests in `dir`, built as the controller builds them. */
async function buildSnapshots(dir: string, proxies: readonly Proxy[], certificates: CertificateManager): Promise<Map<string, ProxySnapshot>> {
  const logger = pino({ level: 'silent' });
  const store = new ObjectStore({ logger });
  const source = new ManifestsSource({ dir, store, logger, watch: false });
  await source.start();
  await source.stop();
  const { snapshot: mesh } = buildMeshSnapshot(store, { meshName: MESH_NAME, generation: 1 });
  const out = new Map<string, ProxySnapshot>();
  // One cache for every proxy, as the controller keeps one: content many proxies get is encoded
  // once and its bytes shared (a fresh cache per proxy made permissive floors hold gigabytes).
  const checked = new ResourceCheckCache();
  const interner = new ResourceInterner();
  const context = new GenerationContext(mesh);
  for (const proxy of proxies) {
    const cert = await certificates.getServiceCertificate(proxy.identity);
    const resources = generateProxyResources(context, proxyProfile(proxy), { certChainPem: cert.certPem, privateKeyPem: cert.keyPem, caPem: certificates.caPem });
    out.set(proxy.uuid, buildProxySnapshot(encodeResources(resources, checked), interner));
  }
  return out;
}

function main(): void {
  if (!process.send) {
    process.stderr.write('floor-server: run me through bench/run.ts (needs an IPC channel)\n');
    process.exit(2);
  }
  const reply = (m: object): void => void process.send?.(m);
  const cache = new SnapshotCache();
  let ads: AdsServer | undefined;
  let certificates: CertificateManager | undefined;
  const sets = new Map<string, Map<string, ProxySnapshot>>();
  let chain: Promise<void> = Promise.resolve();
  process.on('message', (msg: FloorCommand) => {
    chain = chain.then(async () => {
      try {
        switch (msg.cmd) {
          case 'build': {
            const start = nowMs();
            const ca = await CertificateAuthority.loadOrCreate(msg.stateDir);
            certificates = new CertificateManager({ ca });
            const proxies = msg.proxies.map((p) => parseCommonName(proxyCommonName(p.uuid, 'sidecar', p.namespace, p.serviceAccount)));
            sets.set('before', await buildSnapshots(msg.manifests, proxies, certificates));
            sets.set('after', await buildSnapshots(msg.manifestsAfter, proxies, certificates));
            ads = new AdsServer({ watcher: cache });
            // The controller's own listeners: mTLS done by the server (Node's TLS, its handshake
            // admission), or plaintext.
            const server = msg.transport === 'mtls' ? await certificates.issueServerCertificate({}) : undefined;
            const port = await ads.start(
              server
                ? { address: '127.0.0.1:0', mutualTls: { caPem: certificates.caPem, certPem: server.certPem, keyPem: server.keyPem }, authenticate: authenticateFromPeerCertificate }
                : { address: '127.0.0.1:0', credentials: grpc.ServerCredentials.createInsecure(), authenticate: authenticateFromNodeId },
            );
            reply({ reply: 'build', port, buildMs: nowMs() - start });
            break;
          }
          case 'streams':
            reply({ reply: 'streams', streams: ads?.streams().length ?? 0 });
            break;
          case 'set': {
            const set = sets.get(msg.which);
            if (!set) throw new Error(`no snapshot set ${msg.which}`);
            const setAt = nowMs();
            for (const [uuid, snapshot] of set) cache.setSnapshot(uuid, snapshot);
            reply({ reply: 'set', setAt, setMs: nowMs() - setAt });
            break;
          }
          case 'stop':
            certificates?.stop();
            await ads?.stop(500);
            reply({ reply: 'stop' });
            setTimeout(() => process.exit(0), 50).unref();
            break;
        }
      } catch (err) {
        reply({ reply: msg.cmd, error: err instanceof Error ? err.stack ?? err.message : String(err) });
      }
    });
  });
  process.on('disconnect', () => process.exit(0));
}

main();
