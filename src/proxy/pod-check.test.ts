import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { k8s } from '../../test/fixtures/mesh.js';
import type { KubeObject } from '../store/objects.js';
import { ObjectStore } from '../store/object-store.js';
import { checkProxyPod, isRetryablePodCheckFailure, PROXY_UUID_LABEL } from './pod-check.js';
import { parseCommonName } from './types.js';

const UUID = '11111111-1111-4111-8111-111111111111';
const BUYER = parseCommonName(`${UUID}.sidecar.bookbuyer.bookbuyer.cluster.local`);

function storeWith(...objects: KubeObject[]): ObjectStore {
  const store = new ObjectStore();
  store.replaceAll('test', objects);
  return store;
}

function pod(ns: string, name: string, sa: string, uuid: string, phase = 'Running'): KubeObject {
  const p = k8s.pod(ns, name, sa, { app: name, [PROXY_UUID_LABEL]: uuid }, '10.0.0.1');
  return { ...p, status: { podIP: '10.0.0.1', phase } };
}

describe('checkProxyPod', () => {
  it('accepts the one Running pod with the UUID label and the certificate service account', () => {
    const result = checkProxyPod(storeWith(pod('bookbuyer', 'bookbuyer-1', 'bookbuyer', UUID)), BUYER);
    assert.equal(result.ok, true);
    assert.equal(result.ok && result.pod.metadata.name, 'bookbuyer-1');
  });

  const cases: { name: string; objects: KubeObject[]; reason: string }[] = [
    { name: 'no pod at all', objects: [], reason: 'no_pod' },
    { name: 'a pod with another UUID', objects: [pod('bookbuyer', 'b', 'bookbuyer', '22222222-2222-4222-8222-222222222222')], reason: 'no_pod' },
    { name: 'the pod in another namespace than the certificate', objects: [pod('bookthief', 'b', 'bookbuyer', UUID)], reason: 'no_pod' },
    { name: 'a pod running as another service account', objects: [pod('bookbuyer', 'b', 'bookthief', UUID)], reason: 'service_account_mismatch' },
    { name: 'two pods with the UUID', objects: [pod('bookbuyer', 'a', 'bookbuyer', UUID), pod('bookbuyer', 'b', 'bookbuyer', UUID)], reason: 'multiple_pods' },
    { name: 'a pod that has finished', objects: [pod('bookbuyer', 'b', 'bookbuyer', UUID, 'Succeeded')], reason: 'pod_not_running' },
    { name: 'a Pending pod', objects: [pod('bookbuyer', 'b', 'bookbuyer', UUID, 'Pending')], reason: 'pod_not_running' },
  ];
  for (const c of cases) {
    it(`refuses ${c.name} (${c.reason})`, () => {
      const result = checkProxyPod(storeWith(...c.objects), BUYER);
      assert.equal(result.ok, false);
      assert.equal(!result.ok && result.reason, c.reason);
      assert.ok(!result.ok && result.message.length > 0);
    });
  }

  it('treats an unset serviceAccountName as "default"', () => {
    const p = pod('bookbuyer', 'b', 'x', UUID);
    (p.spec as { serviceAccountName?: string }).serviceAccountName = undefined;
    const asDefault = parseCommonName(`${UUID}.sidecar.default.bookbuyer.cluster.local`);
    assert.equal(checkProxyPod(storeWith(p), asDefault).ok, true);
  });

  it('retries only what the informer catching up can cure', () => {
    assert.equal(isRetryablePodCheckFailure('no_pod'), true);
    assert.equal(isRetryablePodCheckFailure('pod_not_running'), true);
    assert.equal(isRetryablePodCheckFailure('service_account_mismatch'), false);
    assert.equal(isRetryablePodCheckFailure('multiple_pods'), false);
  });
});
