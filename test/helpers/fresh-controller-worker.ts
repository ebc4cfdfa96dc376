/**
 * The oracle of `test/incremental-oracle.test.ts`, run as a worker thread: for each message, a
 * brand-new ObjectStore and MeshController on the given objects, in its own module graph (so no
 * module-level cache of the test's thread is shared), and each listed proxy's snapshot summary.
 */
import { parentPort } from 'node:worker_threads';
import pino from 'pino';
import { Registry } from 'prom-client';
import { CertificateAuthority } from '../../src/certificate/authority.js';
import { CertificateManager } from '../../src/certificate/manager.js';
import { ObjectStore } from '../../src/store/object-store.js';
import { SnapshotCache } from '../../src/xds/cache/snapshot-cache.js';
import { MeshController } from '../../src/controller/mesh-controller.js';
import { buildMeshSnapshot } from '../../src/catalog/build-snapshot.js';
import { parseCommonName } from '../../src/proxy/types.js';
import { formatProblem } from '../../src/catalog/problems.js';
import { summarize, meshJson } from './snapshot-summary.js';

let certs: CertificateManager | undefined;

parentPort!.on('message', async (msg: { caDir: string; objects: any[]; proxies: { cn: string; grpc?: boolean }[] }) => { // eslint-disable-line @typescript-eslint/no-explicit-any
  try {
    if (!certs) {
      const ca = await CertificateAuthority.loadOrCreate(msg.caDir);
      certs = new CertificateManager({ ca, deterministic: true });
    }
    const store = new ObjectStore();
    store.replaceAll('test', msg.objects);
    const cache = new SnapshotCache();
    const controller = new MeshController({
      store, certificates: certs, cache, logger: pino({ level: 'silent' }), metrics: new Registry(), meshName: 'osm', resyncIntervalMs: 0,
    });
    const proxies: Record<string, unknown> = {};
    let i = 0;
    for (const p of msg.proxies) {
      const proxy = { ...parseCommonName(p.cn), verified: true }; // an mTLS sidecar
      try {
        await controller.onStreamOpen(proxy, ++i, p.grpc ? { user_agent_name: 'gRPC Node Pure JS' } : undefined);
        const s = cache.getSnapshot(proxy.uuid);
        const viol = controller.validationFailures().some((v) => v.proxy.uuid === proxy.uuid);
        proxies[proxy.uuid] = s ? { ...summarize(s), violations: viol } : { error: 'no snapshot' };
      } catch (err) {
        proxies[proxy.uuid] = { error: String(err) };
      }
    }
    const fresh = buildMeshSnapshot(store, { meshName: 'osm', generation: 1 });
    controller.stop();
    parentPort!.postMessage({
      proxies,
      mesh: meshJson(controller.snapshot),
      freshMesh: meshJson(fresh.snapshot),
      problems: controller.policyProblems().map(formatProblem).sort(),
    });
  } catch (err) {
    parentPort!.postMessage({ fatal: String((err as Error)?.stack ?? err) });
  }
});
