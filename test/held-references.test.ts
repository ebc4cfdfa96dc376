/**
 * What a Listener or Cluster makes its client fetch (`heldReferences`, which policy status reads
 * on every ACK): the controller's snapshots carry it from generation (`CachedResource.references`,
 * from the cross-resource facts) instead of decoding each resource; on the example it must be
 * what decoding the bytes finds, resource by resource.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { TypeUrl } from '../src/api/type-urls.js';
import { CertificateAuthority } from '../src/certificate/authority.js';
import { CertificateManager } from '../src/certificate/manager.js';
import { MeshController } from '../src/controller/mesh-controller.js';
import { parseCommonName, proxyCommonName } from '../src/proxy/types.js';
import { ManifestsSource } from '../src/sources/manifests/manifests-source.js';
import { ObjectStore } from '../src/store/object-store.js';
import { SnapshotCache } from '../src/xds/cache/snapshot-cache.js';
import type { CachedResource, ProxySnapshot } from '../src/xds/cache/types.js';
import { HeldReferences, heldReferences } from '../src/xds/server/held-references.js';
import { EXAMPLE_DIR } from './helpers/example-controller.js';

describe('the references a controller snapshot carries (examples/bookstore)', () => {
  let state: string;
  let controller: MeshController;
  let certificates: CertificateManager;
  let source: ManifestsSource;
  const cache = new SnapshotCache();

  before(async () => {
    state = await mkdtemp(path.join(os.tmpdir(), 'trellis-held-references-'));
    const logger = pino({ level: 'silent' });
    const store = new ObjectStore({ logger });
    source = new ManifestsSource({ dir: EXAMPLE_DIR, store, logger, watch: false });
    await source.start();
    certificates = new CertificateManager({ ca: await CertificateAuthority.loadOrCreate(state) });
    controller = new MeshController({ store, certificates, cache, logger, metrics: new Registry(), meshName: 'osm', resyncIntervalMs: 0 });
    controller.start();
  });
  after(async () => {
    controller.stop();
    certificates.stop();
    await source.stop();
    await rm(state, { recursive: true, force: true });
  });

  const identities = [['bookbuyer', 'bookbuyer'], ['bookstore', 'bookstore'], ['bookthief', 'bookthief']] as const;
  for (const [i, [namespace, serviceAccount]] of identities.entries()) {
    it(`gives ${namespace}/${serviceAccount}'s Listeners and Clusters what decoding them finds`, async () => {
      const uuid = `00000000-0000-4000-8000-00000000000${i + 1}`;
      await controller.onStreamOpen({ ...parseCommonName(proxyCommonName(uuid, 'sidecar', namespace, serviceAccount)), verified: true }, i + 1);
      const snapshot: ProxySnapshot | undefined = cache.getSnapshot(uuid);
      assert.ok(snapshot, 'a snapshot');
      const all: string[] = [];
      const held = new HeldReferences();
      for (const type of [TypeUrl.Listener, TypeUrl.Cluster]) {
        const resources: CachedResource[] = [...(snapshot.resources.get(type)?.values() ?? [])];
        if (type === TypeUrl.Cluster) assert.ok(resources.length > 0, 'clusters');
        for (const r of resources) {
          assert.ok(r.references, `${r.name}: references given`);
          const said: string[] = heldReferences(type, r).map((ref) => `${ref.typeUrl} ${ref.name}`).sort();
          const bare: CachedResource = { name: r.name, version: r.version, resource: r.resource };
          const decoded: string[] = heldReferences(type, bare).map((ref) => `${ref.typeUrl} ${ref.name}`).sort();
          assert.deepEqual(said, decoded, r.name);
          // A server's streams share one HeldReferences: what it decodes, once per resource object.
          assert.equal(held.of(type, r), r.references, `${r.name}: references given are taken as they are`);
          const first = held.of(type, bare);
          assert.deepEqual(first.map((ref) => `${ref.typeUrl} ${ref.name}`).sort(), decoded, r.name);
          assert.equal(held.of(type, bare), first, `${r.name}: decoded once`);
          all.push(...said);
        }
      }
      if (namespace !== 'bookthief') assert.ok(all.includes(`${TypeUrl.Secret} service-cert`), all.join(', '));
      if (namespace === 'bookbuyer') {
        assert.ok(all.includes(`${TypeUrl.RouteConfiguration} rds-outbound.14001`), all.join(', '));
        assert.ok(all.includes(`${TypeUrl.ClusterLoadAssignment} bookstore/bookstore-v1|14001`), all.join(', '));
      }
    });
  }
});
