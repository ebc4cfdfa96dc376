/**
 * Incremental pushes against a full generation, for the cases the random oracle
 * (`incremental-oracle.test.ts`) cannot reach: policies kept at their last valid version beside
 * a newer one (two TrafficSplits of one apex, two UpstreamTrafficSettings of one host), and a
 * proxy that refused a configuration with violations.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { KubeObject } from '../src/store/objects.js';
import { bookstoreMesh, k8s } from './fixtures/mesh.js';
import { harness } from './helpers/incremental-harness.js';

const BUYER = '11111111-1111-4111-8111-111111111111.sidecar.bookbuyer.bookbuyer.cluster.local';

describe('two TrafficSplits of one apex (the first applies; the other keeps its last valid version)', () => {
  const base = bookstoreMesh(); // bookstore/bookstore-split: bookstore-v1 50, bookstore-v2 50
  const withFirst = (w1: number, w2: number) => [
    ...base,
    k8s.trafficSplit('bookstore', 'a-split', 'bookstore.bookstore', [
      { service: 'bookstore-v1', weight: w1 },
      { service: 'bookstore-v2', weight: w2 },
    ]),
  ];

  it('a split that takes over the apex reaches connected proxies', async () => {
    const h = await harness(base);
    await h.open(BUYER);
    await h.set(withFirst(90, 10));
    const diffs = await h.check();
    h.stop();
    assert.deepEqual(diffs, []);
  });

  it('a change of the split that applies reaches connected proxies', async () => {
    const h = await harness(base);
    await h.set(withFirst(90, 10));
    await h.open(BUYER);
    await h.set(withFirst(10, 90));
    const diffs = await h.check();
    h.stop();
    assert.deepEqual(diffs, []);
  });

  it('a proxy connecting after the takeover does not get the configuration generated ahead', async () => {
    const h = await harness(base);
    await h.controller.warmUp({ concurrency: 1 });
    await h.set(withFirst(90, 10));
    await h.open(BUYER);
    const diffs = await h.check();
    h.stop();
    assert.deepEqual(diffs, []);
  });
});

describe('two UpstreamTrafficSettings of one host', () => {
  const ust = (name: string, maxConnections: number): KubeObject =>
    ({
      apiVersion: 'policy.openservicemesh.io/v1alpha1',
      kind: 'UpstreamTrafficSetting',
      metadata: { name, namespace: 'bookstore' },
      spec: { host: 'bookstore-v1.bookstore.svc.cluster.local', connectionSettings: { tcp: { maxConnections } } },
    }) as KubeObject;
  const base = [...bookstoreMesh(), ust('b-ust', 10)];

  it('a setting that takes over the host reaches connected proxies', async () => {
    const h = await harness(base);
    await h.open(BUYER);
    await h.set([...base, ust('a-ust', 500)]);
    const diffs = await h.check();
    h.stop();
    assert.deepEqual(diffs, []);
  });

  it('a change of the setting that applies reaches connected proxies', async () => {
    const h = await harness(base);
    await h.set([...base, ust('a-ust', 500)]);
    await h.open(BUYER);
    await h.set([...base, ust('a-ust', 42)]);
    const diffs = await h.check();
    h.stop();
    assert.deepEqual(diffs, []);
  });
});

describe('a proxy that refused a configuration with violations', () => {
  const PROXY = '77777777-7777-4777-8777-777777777777.sidecar.newsa.bookstore.cluster.local';
  const limits = (value: string): KubeObject =>
    ({
      apiVersion: 'policy.openservicemesh.io/v1alpha1',
      kind: 'UpstreamTrafficSetting',
      metadata: { name: 'limits', namespace: 'bookstore' },
      spec: {
        host: 'bookstore-v1.bookstore.svc.cluster.local',
        // CR LF: Envoy's HTTP_HEADER_VALUE rule rejects the inbound route configuration.
        rateLimit: { local: { http: { requests: 10, unit: 'second', responseHeadersToAdd: [{ name: 'x-limited', value }] } } },
      },
    }) as KubeObject;
  const newsa = k8s.serviceAccount('bookstore', 'newsa');
  const pod = k8s.pod('bookstore', 'newsa-1', 'newsa', { app: 'bookstore', version: 'v1' }, '10.244.2.77', [14001]);

  it('gets the fix, wherever it is, and no longer reports the violation', async () => {
    const h = await harness([...bookstoreMesh(), newsa, limits('yes\r\nInjected: 1')]);
    const proxy = await h.open(PROXY); // newsa serves nothing yet: nothing invalid
    const reported = () => h.controller.validationFailures().some((f) => f.proxy.uuid === proxy.uuid);
    assert.equal(reported(), false);
    // A pod of newsa backs bookstore-v1: the new configuration is invalid, the proxy keeps its last good one.
    await h.set([...bookstoreMesh(), newsa, limits('yes\r\nInjected: 1'), pod]);
    assert.equal(reported(), true);
    // The setting is fixed: the proxy gets the current configuration.
    await h.set([...bookstoreMesh(), newsa, limits('yes'), pod]);
    const diffs = await h.check();
    h.stop();
    assert.deepEqual(diffs, []);
    assert.equal(reported(), false);
  });
});
