/**
 * The oracle of `test/incremental-oracle.test.ts`: a brand-new ObjectStore and MeshController
 * (hence a fresh generation context: nothing carried over from an earlier MeshSnapshot) on the
 * given objects, in the test's own thread, and each listed proxy's snapshot summary. The
 * objects are copied first, so the fresh controller shares no object with the one under test.
 */
import pino from 'pino';
import { Registry } from 'prom-client';
import type { CertificateManager } from '../../src/certificate/manager.js';
import { ObjectStore } from '../../src/store/object-store.js';
import { SnapshotCache } from '../../src/xds/cache/snapshot-cache.js';
import { MeshController } from '../../src/controller/mesh-controller.js';
import { parseCommonName } from '../../src/proxy/types.js';
import { formatProblem } from '../../src/catalog/problems.js';
import type { KubeObject } from '../../src/store/objects.js';
import { summarize, meshJson, type Summary } from './snapshot-summary.js';

/** What a fresh controller gives one proxy: its snapshot summary (and whether it had violations), or why it has none. */
export type FreshProxy = (Summary & { violations: boolean }) | { error: string };

/** What {@link freshController} returns. */
export interface FreshResult {
  /** By proxy UUID. */
  readonly proxies: Record<string, FreshProxy>;
  /** The fresh controller's MeshSnapshot (`meshJson`). */
  readonly mesh: string;
  /** Its policy problems, formatted, sorted. */
  readonly problems: string[];
}

/**
 * Connects each of `proxies` (mTLS sidecars; `grpc`: proxyless clients) to a new controller on
 * (copies of) `objects` and summarizes what each gets.
 * @param certificates the fresh controller's own certificate manager (deterministic, on the
 *   same CA as the controller under test, so that both issue the same certificates).
 */
export async function freshController(objects: readonly KubeObject[], proxies: readonly { cn: string; grpc?: boolean }[], certificates: CertificateManager): Promise<FreshResult> {
  const store = new ObjectStore();
  store.replaceAll('test', structuredClone([...objects]));
  const cache = new SnapshotCache();
  const controller = new MeshController({
    store, certificates, cache, logger: pino({ level: 'silent' }), metrics: new Registry(), meshName: 'osm', resyncIntervalMs: 0,
  });
  try {
    const out: Record<string, FreshProxy> = {};
    let streamId = 0;
    for (const p of proxies) {
      const proxy = { ...parseCommonName(p.cn), verified: true }; // an mTLS sidecar
      try {
        await controller.onStreamOpen(proxy, ++streamId, p.grpc ? { user_agent_name: 'gRPC Node Pure JS' } : undefined);
        const s = cache.getSnapshot(proxy.uuid);
        const violations = controller.validationFailures().some((v) => v.proxy.uuid === proxy.uuid);
        out[proxy.uuid] = s ? { ...summarize(s), violations } : { error: 'no snapshot' };
      } catch (err) {
        out[proxy.uuid] = { error: String(err) };
      }
    }
    return { proxies: out, mesh: meshJson(controller.snapshot), problems: controller.policyProblems().map(formatProblem).sort() };
  } finally {
    controller.stop();
  }
}
