/**
 * deploy/ against a real kube-apiserver (test/helpers/kube-real-apiserver.ts): its CRDs and
 * RBAC applied, the controller (`bin/trellis.js controller --kubernetes`) run with a token of its
 * ServiceAccount (TokenRequest) and nothing else, so the RBAC is proven sufficient: it creates
 * the CA Secret and the Lease, gets ready, and pushes configuration for objects created through
 * the API server to a gRPC ADS client; and a request outside the RBAC is refused with 403.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, it } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { TypeUrl } from '../src/api/type-urls.js';
import { PROXY_UUID_LABEL } from '../src/proxy/pod-check.js';
import { bookstoreMesh, k8s as objects } from './fixtures/mesh.js';
import { AdsTestClient } from './helpers/ads-client.js';
import { watchController, type WatchedController } from './helpers/controller-process.js';
import { describeOn, RealKubeApiServer, statusOf } from './helpers/kube-real-apiserver.js';
import { SimulatedSidecar } from './helpers/sidecar.js';
import { eventually } from './helpers/wait.js';

const ROOT = path.resolve(import.meta.dirname, '..');
const BUYER_UUID = '44444444-4444-4444-8444-444444444444';
const BUYER_CN = `${BUYER_UUID}.sidecar.bookbuyer.bookbuyer.cluster.local`;
const until = (cond: () => boolean | Promise<boolean>, what: string, timeoutMs = 30_000) => eventually(cond, what, timeoutMs, 50);

describeOn('real', 'deploy/ RBAC against a real kube-apiserver: the controller with its ServiceAccount token', () => {
  let server: RealKubeApiServer;
  let dir: string;
  let child: ChildProcess;
  let controller: WatchedController;
  let httpPort: number;
  let token: string;
  let asController: k8s.KubeConfig;
  const clients: AdsTestClient[] = [];
  const sidecars: SimulatedSidecar[] = [];

  before(async () => {
    server = await RealKubeApiServer.start({ name: 'rbac' });
    dir = await mkdtemp(path.join(os.tmpdir(), 'trellis-kube-real-rbac-'));
    await server.applyFile(path.join(ROOT, 'deploy/00-namespace.yaml'));
    await server.applyFile(path.join(ROOT, 'deploy/10-rbac.yaml'));
    token = await server.serviceAccountToken('osm-system', 'osm-controller');
    const kubeconfig = await server.writeKubeconfig(path.join(dir, 'controller'), 'osm-system', token);
    asController = new k8s.KubeConfig();
    asController.loadFromFile(kubeconfig);
    await server.applyAll(bookstoreMesh());
    // The proxy's pod, as the injector labels it, Running (no kubelet: its status is written by hand).
    await server.apply(objects.pod('bookbuyer', 'bookbuyer-proxied', 'bookbuyer', { app: 'bookbuyer', [PROXY_UUID_LABEL]: BUYER_UUID }, '10.244.1.77'));
    child = spawn(
      process.execPath,
      [
        'bin/trellis.js', 'controller', '--kubernetes', '--kubeconfig', kubeconfig, '--state-dir', path.join(dir, 'state'),
        '--xds-address', '127.0.0.1:0', '--xds-plaintext-address', '127.0.0.1:0', '--http-address', '127.0.0.1:0', '--resync-interval', '0',
      ],
      { cwd: ROOT, env: { ...process.env, POD_NAME: 'osm-controller-real-1', POD_NAMESPACE: 'osm-system' }, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    controller = watchController(child, 90_000);
    httpPort = await controller.httpPort;
  });

  after(async () => {
    for (const s of sidecars) s.stop();
    for (const c of clients) c.close();
    if (child && child.exitCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      await exited;
    }
    await server?.shutdown();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const readyz = async () => (await fetch(`http://127.0.0.1:${httpPort}/readyz`).catch(() => undefined))?.status ?? 0;

  function connect(nodeId: string): SimulatedSidecar {
    const port = Number(/"xdsPlaintextPort":(\d+)/.exec(controller.output())?.[1]);
    const client = new AdsTestClient(`127.0.0.1:${port}`);
    clients.push(client);
    const sidecar = new SimulatedSidecar(client.openStream(nodeId)).start();
    sidecars.push(sidecar);
    return sidecar;
  }

  it('gets ready with only the RBAC of deploy/10-rbac.yaml: every kind listed and watched, the CA Secret and the Lease created', async () => {
    await until(async () => (await readyz()) === 200, `/readyz 200 (controller output:\n${controller.output()})`);
    const secret = await server.get('Secret', 'osm-system', 'trellis-ca');
    assert.ok(secret, 'the CA Secret was created with the token');
    assert.ok((secret.data as Record<string, string>)['ca.pem']);
    await until(async () => ((await server.get('Lease', 'osm-system', 'trellis-controller-leader'))?.spec as { holderIdentity?: string } | undefined)?.holderIdentity === 'osm-controller-real-1', 'the Lease held');
    assert.doesNotMatch(controller.output(), /forbidden|"statusCode":403/i, 'no request of the controller was refused');
  });

  it('pushes configuration for objects created through the API server to an ADS client', async () => {
    const buyer = connect(BUYER_CN);
    await buyer.until((s) => s.get(TypeUrl.Cluster, 'bookstore/bookstore-v1|14001') !== undefined, 'the bookstore-v1 cluster');
    // A new Service in front of bookstore-v1's pods (whose service account bookbuyer may reach).
    await server.apply(objects.service('bookstore', 'bookstore-v3', { app: 'bookstore', version: 'v1' }, [{ port: 14001, name: 'bookstore-port' }], '10.96.0.13'));
    await buyer.until((s) => s.get(TypeUrl.Cluster, 'bookstore/bookstore-v3|14001') !== undefined, 'the cluster of a Service created after the start');
    await server.remove('Service', 'bookstore', 'bookstore-v3');
    await buyer.until((s) => s.get(TypeUrl.Cluster, 'bookstore/bookstore-v3|14001') === undefined, 'the cluster removed with its Service');
  });

  it('refuses, with 403, what the RBAC does not grant the token', async () => {
    const core = asController.makeApiClient(k8s.CoreV1Api);
    const refused = async (what: string, request: () => Promise<unknown>) => {
      await assert.rejects(request(), (err: unknown) => statusOf(err) === 403, `${what}: 403`);
    };
    await refused('list Secrets in osm-system', () => core.listNamespacedSecret({ namespace: 'osm-system' }));
    await refused('read another Secret', () => core.readNamespacedSecret({ namespace: 'osm-system', name: 'other' }));
    await refused('list Secrets cluster-wide', () => core.listSecretForAllNamespaces());
    await refused('create a Service', () => core.createNamespacedService({ namespace: 'bookstore', body: { metadata: { name: 'x' }, spec: { ports: [{ port: 80 }] } } }));
    await refused('update a Namespace', () => core.patchNamespace({ name: 'bookstore', body: { metadata: { labels: { a: 'b' } } } }, k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch)));
    await refused('delete the CA Secret', () => core.deleteNamespacedSecret({ namespace: 'osm-system', name: 'trellis-ca' }));
    // What it is granted answers (the same client, so the 403s above are the RBAC's, not the token's).
    assert.equal((await core.readNamespacedSecret({ namespace: 'osm-system', name: 'trellis-ca' })).metadata?.name, 'trellis-ca');
    assert.ok((await core.listNamespace()).items.length > 0);
  });
});
