/**
 * The policy status written to the API server (issue 16 item 1), against a real kube-apiserver
 * with deploy/'s CRDs and RBAC: the controller, with only its ServiceAccount's token, writes
 * `status.conditions` Accepted and Programmed with `observedGeneration` (and OSM's
 * `currentStatus`/`reason`) on an IngressBackend and an UpstreamTrafficSetting, follows a new
 * generation once the proxy it affects ACKed it, and says Accepted False with the problem.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, it } from 'node:test';
import pino from 'pino';
import { TypeUrl } from '../src/api/type-urls.js';
import { runController, type RunningController } from '../src/main.js';
import { PROXY_UUID_LABEL } from '../src/proxy/pod-check.js';
import { bookstoreMesh, k8s as objects } from './fixtures/mesh.js';
import { AdsTestClient } from './helpers/ads-client.js';
import { describeOn, RealKubeApiServer } from './helpers/kube-real-apiserver.js';
import { SimulatedSidecar } from './helpers/sidecar.js';
import { eventually } from './helpers/wait.js';

const ROOT = path.resolve(import.meta.dirname, '..');
const STORE_UUID = '55555555-5555-4555-8555-555555555555';
const STORE_CN = `${STORE_UUID}.sidecar.bookstore.bookstore.cluster.local`;

interface Condition {
  type: string;
  status: string;
  observedGeneration: number;
  reason: string;
  message: string;
  lastTransitionTime: string;
}
interface Status {
  currentStatus?: string;
  reason?: string;
  conditions?: Condition[];
}

function ingressBackend(port: number): Record<string, unknown> {
  return {
    apiVersion: 'policy.openservicemesh.io/v1alpha1',
    kind: 'IngressBackend',
    metadata: { name: 'bookstore-ingress', namespace: 'bookstore' },
    spec: {
      backends: [{ name: 'bookstore-v1', port: { number: port, protocol: 'http' } }],
      sources: [{ kind: 'IPRange', name: '10.0.0.0/8' }],
    },
  };
}

function upstreamTrafficSetting(name: string, host: string): Record<string, unknown> {
  return {
    apiVersion: 'policy.openservicemesh.io/v1alpha1',
    kind: 'UpstreamTrafficSetting',
    metadata: { name, namespace: 'bookstore' },
    spec: { host, connectionSettings: { tcp: { maxConnections: 100 } } },
  };
}

describeOn('real', 'policy status written to a real kube-apiserver (status subresource, deploy/ RBAC)', () => {
  let server: RealKubeApiServer;
  let dir: string;
  let running: RunningController;
  let client: AdsTestClient | undefined;
  let sidecar: SimulatedSidecar | undefined;

  before(async () => {
    server = await RealKubeApiServer.start({ name: 's9s-status' });
    dir = await mkdtemp(path.join(os.tmpdir(), 'trellis-s9s-kube-status-'));
    await server.applyFile(path.join(ROOT, 'deploy/00-namespace.yaml'));
    await server.applyFile(path.join(ROOT, 'deploy/10-rbac.yaml'));
    const token = await server.serviceAccountToken('osm-system', 'osm-controller');
    const kubeconfig = await server.writeKubeconfig(path.join(dir, 'controller'), 'osm-system', token);
    await server.applyAll(bookstoreMesh());
    await server.apply(objects.pod('bookstore', 'bookstore-v1-proxied', 'bookstore', { app: 'bookstore', version: 'v1', [PROXY_UUID_LABEL]: STORE_UUID }, '10.244.2.77', [14001]));
    await server.apply(ingressBackend(14001));
    await server.apply(upstreamTrafficSetting('bookstore-limits', 'bookstore.bookstore.svc.cluster.local'));
    running = await runController({
      kubernetes: { kubeconfig },
      meshName: 'osm',
      stateDir: path.join(dir, 'state'),
      xdsAddress: '127.0.0.1:0',
      xdsPlaintextAddress: '127.0.0.1:0',
      httpAddress: '127.0.0.1:0',
      resyncIntervalMs: 0,
      debounceQuietMs: 20,
      controllerNamespace: 'osm-system',
      replicaIdentity: 'osm-controller-s9s-1',
      warmUpConfigurationBytes: 0,
      logger: pino({ level: 'silent' }),
    });
  });

  after(async () => {
    sidecar?.stop();
    client?.close();
    await running?.stop();
    await server?.shutdown();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  async function statusOf(kind: string, name: string): Promise<{ generation: number; status: Status }> {
    const object = await server.get(kind, 'bookstore', name);
    return { generation: (object?.metadata as unknown as { generation: number }).generation, status: (object?.status ?? {}) as Status };
  }

  /** Waits until `kind/name`'s status has `type` in `state` at the object's generation, and returns it. */
  async function condition(kind: string, name: string, type: string, state: string, message?: RegExp): Promise<{ generation: number; status: Status; condition: Condition }> {
    let last: { generation: number; status: Status } | undefined;
    try {
      await eventually(async () => {
        last = await statusOf(kind, name);
        const c = last.status.conditions?.find((x) => x.type === type);
        return c?.status === state && c.observedGeneration === last.generation && (!message || message.test(c.message));
      }, `${kind} ${name} ${type}=${state}`, 30_000, 100);
    } catch (err) {
      throw new Error(`${(err as Error).message}; last status: ${JSON.stringify(last)}`);
    }
    return { ...last!, condition: last!.status.conditions!.find((x) => x.type === type)! };
  }

  it('writes Accepted and Programmed with observedGeneration on an IngressBackend and an UpstreamTrafficSetting', async () => {
    const ib = await condition('IngressBackend', 'bookstore-ingress', 'Programmed', 'True');
    assert.equal(ib.generation, 1);
    assert.deepEqual(
      ib.status.conditions!.map((c) => [c.type, c.status, c.observedGeneration, c.reason]),
      [['Accepted', 'True', 1, 'Accepted'], ['Programmed', 'True', 1, 'Programmed']],
    );
    assert.equal(ib.status.currentStatus, 'committed');
    assert.match(ib.condition.message, /^reached 0 of 0 affected proxies$/); // no proxy connected yet
    const uts = await condition('UpstreamTrafficSetting', 'bookstore-limits', 'Programmed', 'True');
    assert.equal(uts.status.conditions!.find((c) => c.type === 'Accepted')!.status, 'True');
  });

  it('follows a new generation once the proxy it affects ACKed it', async () => {
    const port = running.xdsPlaintextPort!;
    client = new AdsTestClient(`127.0.0.1:${port}`);
    sidecar = new SimulatedSidecar(client.openStream(STORE_CN)).start();
    await sidecar.until((s) => s.names(TypeUrl.Listener).length > 0, 'the bookstore proxy has its listeners', 30_000);
    await condition('IngressBackend', 'bookstore-ingress', 'Programmed', 'True', /^reached 1 of 1 affected proxies$/);
    const before = await statusOf('IngressBackend', 'bookstore-ingress');
    const accepted = before.status.conditions!.find((c) => c.type === 'Accepted')!;
    await server.apply({ ...ingressBackend(14001), spec: { ...(ingressBackend(14001).spec as object), sources: [{ kind: 'IPRange', name: '10.1.0.0/16' }] } });
    const after = await condition('IngressBackend', 'bookstore-ingress', 'Programmed', 'True', /^reached 1 of 1 affected proxies$/);
    assert.equal(after.generation, 2);
    assert.deepEqual(after.status.conditions!.map((c) => c.observedGeneration), [2, 2]);
    // Accepted did not change: its transition time stays.
    assert.equal(after.status.conditions!.find((c) => c.type === 'Accepted')!.lastTransitionTime, accepted.lastTransitionTime);
  });

  it('says Accepted False, with the problem, for an object the controller cannot use', async () => {
    // A second setting for the same host: OSM's rule keeps the first (by name) and reports this one.
    await server.apply(upstreamTrafficSetting('bookstore-limits-again', 'bookstore.bookstore.svc.cluster.local'));
    const bad = await condition('UpstreamTrafficSetting', 'bookstore-limits-again', 'Accepted', 'False');
    assert.equal(bad.condition.reason, 'Invalid');
    assert.match(bad.condition.message, /spec\.host: host "bookstore\.bookstore\.svc\.cluster\.local" already has UpstreamTrafficSetting bookstore\/bookstore-limits/);
    assert.equal(bad.status.currentStatus, 'error');
    assert.deepEqual(bad.status.conditions!.find((c) => c.type === 'Programmed')!.reason, 'Invalid');
  });
});
