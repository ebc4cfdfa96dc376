import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { LeanDeltaSidecar, ReferenceCache } from '../bench/lean-delta-sidecar.js';
import type { Sidecar, SidecarObserver } from '../bench/lean-sidecar.js';
import { TypeUrl } from '../src/api/type-urls.js';
import { proxyCommonName } from '../src/proxy/types.js';
import { SnapshotCache } from '../src/xds/cache/snapshot-cache.js';
import { AdsServer, authenticateFromNodeId } from '../src/xds/server/ads-server.js';
import { snapshot, type Spec } from './helpers/ads-harness.js';
import { eventually } from './helpers/wait.js';

const SPEC: Spec = {
  clusters: { 'bookstore/bookstore|14001': 1, 'bookwarehouse/bookwarehouse|14001': 1 },
  listeners: { 'outbound-listener': 1, 'inbound-listener': 1 },
};
const UUIDS = ['00000000-0000-4000-8000-0000000000d1', '00000000-0000-4000-8000-0000000000d2', '00000000-0000-4000-8000-0000000000d3'];

/** Counts what the sidecars report. */
class Observer implements SidecarObserver {
  synced = 0;
  readonly responses = new Map<Sidecar, number>();
  readonly problems: string[] = [];
  onResponse(sidecar: Sidecar, type: string): void {
    if (type === TypeUrl.Cluster) this.responses.set(sidecar, (this.responses.get(sidecar) ?? 0) + 1);
  }
  onSynced(): void {
    this.synced++;
  }
  onEnded(_s: Sidecar, status: { code: number; details: string }): void {
    if (status.code !== grpc.status.CANCELLED) this.problems.push(status.details);
  }
  onVerifyMismatch(_s: Sidecar, message: string): void {
    this.problems.push(message);
  }
}

describe('bench: delta sidecars of one load generator', () => {
  const cache = new SnapshotCache();
  const server = new AdsServer({ watcher: cache });
  const observer = new Observer();
  const references = new ReferenceCache();
  let sidecars: LeanDeltaSidecar[] = [];

  before(async () => {
    const port = await server.start({ address: '127.0.0.1:0', credentials: grpc.ServerCredentials.createInsecure(), authenticate: authenticateFromNodeId });
    const first = snapshot(SPEC);
    for (const uuid of UUIDS) cache.setSnapshot(uuid, first);
    sidecars = UUIDS.map((uuid) => new LeanDeltaSidecar(proxyCommonName(uuid, 'sidecar', 'bookbuyer', 'bookbuyer'), observer, references));
    for (const s of sidecars) s.connect(`127.0.0.1:${port}`, grpc.credentials.createInsecure(), 4 * 1024 * 1024);
  });

  after(async () => {
    for (const s of sidecars) s.close();
    await server.stop(100);
  });

  it('decode each Cluster and Listener version once between them, and again only what changed', async () => {
    await eventually(() => observer.synced === UUIDS.length, 'every sidecar synced', 10_000);
    assert.deepEqual(observer.problems, []);
    assert.equal(references.decoded, 4, 'two clusters and two listeners, read once for three sidecars');
    const changed = snapshot({ ...SPEC, clusters: { ...SPEC.clusters, 'bookstore/bookstore|14001': 2 } });
    for (const uuid of UUIDS) cache.setSnapshot(uuid, changed);
    await eventually(() => sidecars.every((s) => observer.responses.get(s) === 2), 'every sidecar got the changed cluster', 10_000);
    assert.equal(references.decoded, 5, 'the changed cluster read once more');
  });
});
