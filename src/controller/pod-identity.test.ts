import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import pino from 'pino';
import { Registry } from 'prom-client';
import { bookstoreMesh, k8s } from '../../test/fixtures/mesh.js';
import { CertificateAuthority } from '../certificate/authority.js';
import { CertificateManager } from '../certificate/manager.js';
import { PROXY_UUID_LABEL } from '../proxy/pod-check.js';
import { parseCommonName } from '../proxy/types.js';
import type { KubeObject } from '../store/objects.js';
import { ObjectStore } from '../store/object-store.js';
import { SnapshotCache } from '../xds/cache/snapshot-cache.js';
import { MeshController } from './mesh-controller.js';

const UUID = '11111111-1111-4111-8111-111111111111';
const BUYER = parseCommonName(`${UUID}.sidecar.bookbuyer.bookbuyer.cluster.local`);

function buyerPod(sa = 'bookbuyer'): KubeObject {
  return k8s.pod('bookbuyer', 'bookbuyer-xyz', sa, { app: 'bookbuyer', [PROXY_UUID_LABEL]: UUID }, '10.1.0.9');
}

async function refusals(metrics: Registry): Promise<Record<string, number>> {
  const metric = metrics.getSingleMetric('trellis_proxy_refusals_total');
  assert.ok(metric, 'the refusal counter is registered');
  const out: Record<string, number> = {};
  for (const v of (await metric.get()).values) out[String(v.labels.reason)] = v.value;
  return out;
}

describe('MeshController with verifyPodIdentity', () => {
  let dir: string;
  let ca: CertificateAuthority;
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'trellis-podid-'));
    ca = await CertificateAuthority.loadOrCreate(dir);
  });
  after(() => rm(dir, { recursive: true, force: true }));

  function setup(objects: KubeObject[], graceMs: number) {
    const certificates = new CertificateManager({ ca, validitySeconds: 3600 });
    const store = new ObjectStore();
    store.replaceAll('test', objects);
    const metrics = new Registry();
    const controller = new MeshController({
      store,
      certificates,
      cache: new SnapshotCache(),
      logger: pino({ level: 'silent' }),
      metrics,
      meshName: 'osm',
      resyncIntervalMs: 0,
      verifyPodIdentity: true,
      podIdentityGraceMs: graceMs,
    });
    controller.start();
    const stop = () => {
      controller.stop();
      certificates.stop();
    };
    return { store, controller, metrics, stop };
  }

  it('accepts a proxy whose Running pod has its UUID and service account', async () => {
    const { controller, metrics, stop } = setup([...bookstoreMesh(), buyerPod()], 0);
    await controller.onStreamOpen(BUYER, 1);
    assert.equal(controller.registry.get(UUID)?.proxy.identity, 'bookbuyer/bookbuyer');
    assert.deepEqual(await refusals(metrics), {});
    stop();
  });

  it('refuses, and counts, a proxy whose pod runs as another service account', async () => {
    const { controller, metrics, stop } = setup([...bookstoreMesh(), buyerPod('bookthief')], 60_000);
    // A definite failure does not wait for the grace period (60 s here).
    await assert.rejects(controller.onStreamOpen(BUYER, 1), /runs as service account bookthief/);
    assert.equal(controller.registry.get(UUID), undefined);
    assert.deepEqual(await refusals(metrics), { service_account_mismatch: 1 });
    stop();
  });

  it('refuses, and counts, a proxy that has no pod once the grace period is over', async () => {
    const { controller, metrics, stop } = setup(bookstoreMesh(), 20);
    await assert.rejects(controller.onStreamOpen(BUYER, 1), /no pod in namespace bookbuyer/);
    assert.deepEqual(await refusals(metrics), { no_pod: 1 });
    stop();
  });

  it('accepts a proxy whose pod reaches the store during the grace period', async () => {
    const { store, controller, metrics, stop } = setup(bookstoreMesh(), 60_000);
    const opening = controller.onStreamOpen(BUYER, 1);
    // The informer delivers the pod after the proxy connected.
    setImmediate(() => store.replaceAll('test', [...bookstoreMesh(), buyerPod()]));
    await opening;
    assert.equal(controller.registry.get(UUID)?.proxy.identity, 'bookbuyer/bookbuyer');
    assert.deepEqual(await refusals(metrics), {});
    stop();
  });

  it('does not check pods when the option is off (manifests mode)', async () => {
    const certificates = new CertificateManager({ ca, validitySeconds: 3600 });
    const store = new ObjectStore();
    store.replaceAll('test', bookstoreMesh());
    const controller = new MeshController({
      store,
      certificates,
      cache: new SnapshotCache(),
      logger: pino({ level: 'silent' }),
      metrics: new Registry(),
      meshName: 'osm',
      resyncIntervalMs: 0,
    });
    await controller.onStreamOpen(BUYER, 1);
    assert.ok(controller.registry.get(UUID));
    controller.stop();
    certificates.stop();
  });
});
