import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, it } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import pino from 'pino';
import { TypeUrl } from '../src/api/type-urls.js';
import { namespaceAdd, namespaceList, namespaceRemove, proxyConfig } from '../src/cli/kube-commands.js';
import { runController, type RunningController } from '../src/main.js';
import { PROXY_UUID_LABEL } from '../src/proxy/pod-check.js';
import { XDS_SERVER_SPIFFE_ID } from '../src/proxy/types.js';
import { bookstoreMesh, k8s } from './fixtures/mesh.js';
import { AdsTestClient, type AdsTestStream } from './helpers/ads-client.js';
import { connectLikeEnvoy } from './helpers/envoy-like-tls.js';
import { FakeKubeApiServer } from './helpers/fake-kube-apiserver.js';
import { describeOn, RealKubeApiServer } from './helpers/kube-real-apiserver.js';
import { eventually } from './helpers/wait.js';

const BUYER_UUID = '11111111-1111-4111-8111-111111111111';
const BUYER_CN = `${BUYER_UUID}.sidecar.bookbuyer.bookbuyer.cluster.local`;

const until = (cond: () => boolean | Promise<boolean>, what: string, timeoutMs = 20_000) => eventually(cond, what, timeoutMs, 50);

async function getJson(port: number, pathAndQuery: string): Promise<{ status: number; body: unknown }> {
  const res = await fetch(`http://127.0.0.1:${port}${pathAndQuery}`);
  const text = await res.text();
  return { status: res.status, body: res.headers.get('content-type')?.includes('json') ? JSON.parse(text) : text };
}

function collect(): { write(text: string): void; text: string } {
  const out = { text: '', write: (t: string) => void (out.text += t) };
  return out;
}

// Against the fake, and a real kube-apiserver (skipped without its binaries, which .ci/run
// installs); what only the fake records (requests) is checked against the fake only.
for (const target of ['fake', 'real'] as const) describeOn(target, `two controller replicas against one ${target} API server`, () => {
  const fake = target === 'fake' ? new FakeKubeApiServer({ bookmarkIntervalMs: 200 }) : undefined;
  let server: FakeKubeApiServer | RealKubeApiServer;
  let dir: string;
  let kubeconfig: string;
  let kubeConfig: KubeConfig;
  const replicas: RunningController[] = [];
  const clients: AdsTestClient[] = [];

  before(async () => {
    server = fake ? await fake.start() : await RealKubeApiServer.start({ name: 'multi-replica' });
    dir = await mkdtemp(path.join(tmpdir(), 'trellis-replicas-'));
    kubeconfig = await server.writeKubeconfig(dir);
    kubeConfig = new KubeConfig();
    kubeConfig.loadFromFile(kubeconfig);
    await server.apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'osm-system' } });
    if (fake) for (const object of bookstoreMesh()) fake.apply(object);
    else {
      await (server as RealKubeApiServer).applyAll(bookstoreMesh());
      await server.apply(k8s.serviceAccount('bookbuyer', 'bookthief')); // a real server admits no pod without its service account
    }
    await server.apply(k8s.pod('bookbuyer', 'bookbuyer-proxied', 'bookbuyer', { app: 'bookbuyer', [PROXY_UUID_LABEL]: BUYER_UUID }, '10.244.1.77'));
    // A pod that claims a UUID but runs as another service account than its proxy's certificate.
    await server.apply(k8s.pod('bookbuyer', 'bookbuyer-wrong-sa', 'bookthief', { app: 'other', [PROXY_UUID_LABEL]: '33333333-3333-4333-8333-333333333333' }, '10.244.1.78'));

    // Both replicas start at once: the CA Secret is created by one of them only.
    const start = (identity: string) =>
      runController({
        kubernetes: { kubeconfig, backoff: { initialMs: 50, maxMs: 500 } },
        meshName: 'osm',
        stateDir: path.join(dir, `unused-${identity}`),
        xdsAddress: '127.0.0.1:0',
        xdsPlaintextAddress: '127.0.0.1:0',
        httpAddress: '127.0.0.1:0',
        resyncIntervalMs: 0,
        controllerNamespace: 'osm-system',
        replicaIdentity: identity,
        podIdentityGraceMs: 300,
        logger: pino({ level: 'silent' }),
      });
    replicas.push(...(await Promise.all([start('replica-1'), start('replica-2')])));
    for (const r of replicas) {
      await until(async () => (await getJson(r.httpPort, '/readyz')).status === 200, 'readyz');
    }
  });

  after(async () => {
    for (const c of clients) c.close();
    await Promise.all(replicas.map((r) => r.stop()));
    await (server instanceof RealKubeApiServer ? server.shutdown() : server?.stop());
    await rm(dir, { recursive: true, force: true });
  });

  function connect(replica: RunningController, nodeId: string): AdsTestStream {
    const client = new AdsTestClient(`127.0.0.1:${replica.xdsPlaintextPort}`);
    clients.push(client);
    const stream = client.openStream(nodeId);
    stream.request(TypeUrl.Cluster);
    return stream;
  }

  it('share one CA root, created once', async () => {
    if (fake) {
      const posts = fake.requests.filter((r) => r.method === 'POST' && r.url.includes('/namespaces/osm-system/secrets'));
      assert.equal(posts.filter((r) => r.status === 201).length, 1, 'one create succeeded');
      assert.ok(posts.every((r) => r.status === 201 || r.status === 409), 'the loser got 409 AlreadyExists');
    }
    assert.deepEqual((await server.objects('Secret', 'osm-system')).map((s) => s.metadata.name), ['trellis-ca']);
    assert.equal(replicas[0].replica!.ca.caPem, replicas[1].replica!.ca.caPem);
  });

  it("present an xDS server certificate with the controller's URI SAN, which proxies require, from either replica", async () => {
    const ca = replicas[0].replica!.ca;
    const proxy = await ca.issue({ commonName: BUYER_CN, validitySeconds: 600, usage: 'client' });
    for (const r of replicas) {
      const uris = await connectLikeEnvoy({ port: r.xdsPort, caPem: ca.caPem, certPem: proxy.certPem, keyPem: proxy.keyPem, uriSans: [XDS_SERVER_SPIFFE_ID] });
      assert.deepEqual(uris, [XDS_SERVER_SPIFFE_ID]);
    }
  });

  it('serve a proxy the same configuration, byte for byte (same versions, SDS included), from either replica', async () => {
    const streams = replicas.map((r) => connect(r, BUYER_CN));
    for (const s of streams) await s.waitFor((r) => r.type_url === TypeUrl.Cluster, 10_000);
    const dumps = await Promise.all(replicas.map(async (r) => (await getJson(r.httpPort, `/debug/config_dump?proxy=${BUYER_UUID}`)).body));
    assert.ok(JSON.stringify(dumps[0]).includes('service-cert'), 'the dump has the service certificate');
    assert.deepEqual(dumps[0], dumps[1]);
    const [a, b] = streams.map((s) => s.responses.find((r) => r.type_url === TypeUrl.Cluster)!);
    assert.equal(a.version_info, b.version_info, 'CDS version');
    for (const s of streams) s.end();
  });

  it('refuse, and count, a proxy without a pod and one whose pod runs as another service account', async () => {
    const noPod = connect(replicas[0], '22222222-2222-4222-8222-222222222222.sidecar.bookbuyer.bookbuyer.cluster.local');
    const wrongSa = connect(replicas[0], '33333333-3333-4333-8333-333333333333.sidecar.bookbuyer.bookbuyer.cluster.local');
    await until(() => noPod.status !== undefined && wrongSa.status !== undefined, 'both streams refused');
    assert.match(String(noPod.status!.details), /no pod in namespace bookbuyer/);
    assert.match(String(wrongSa.status!.details), /runs as service account bookthief/);
    const metrics = String((await getJson(replicas[0].httpPort, '/metrics')).body);
    assert.match(metrics, /trellis_proxy_refusals_total\{reason="no_pod"\} 1/);
    assert.match(metrics, /trellis_proxy_refusals_total\{reason="service_account_mismatch"\} 1/);
  });

  it('`trellis proxy config` prints the dump of a pod\'s proxy', async () => {
    const stream = connect(replicas[0], BUYER_CN);
    await stream.waitFor((r) => r.type_url === TypeUrl.Cluster, 10_000);
    const out = collect();
    await proxyConfig(kubeConfig, 'bookbuyer-proxied', 'bookbuyer', `http://127.0.0.1:${replicas[0].httpPort}`, out);
    const dump = JSON.parse(out.text) as { proxy: string; configs: unknown[] };
    assert.equal(dump.proxy, BUYER_UUID);
    assert.ok(dump.configs.length > 0);
    await assert.rejects(proxyConfig(kubeConfig, 'bookbuyer-1', 'bookbuyer', `http://127.0.0.1:${replicas[0].httpPort}`, collect()), /has no osm-proxy-uuid label/);
    await assert.rejects(proxyConfig(kubeConfig, 'nope', 'bookbuyer', `http://127.0.0.1:${replicas[0].httpPort}`, collect()), /not found/);
    stream.end();
  });

  it('`trellis namespace add|list|remove` change the monitoring label', async () => {
    await server.apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'newcomer' } });
    await namespaceAdd(kubeConfig, ['newcomer'], 'osm', collect());
    assert.equal((await server.get('Namespace', undefined, 'newcomer'))!.metadata.labels?.['openservicemesh.io/monitored-by'], 'osm');
    if (fake) {
      const patches = fake.requests.filter((r) => r.method === 'PATCH' && r.url.includes('/namespaces/newcomer'));
      assert.equal(patches.at(-1)?.contentType, 'application/merge-patch+json');
    }
    const listed = collect();
    await namespaceList(kubeConfig, 'osm', listed);
    assert.match(listed.text, /^NAMESPACE\s+MESH\n/);
    assert.match(listed.text, /\nnewcomer\s+osm\n/);
    assert.match(listed.text, /\nbookbuyer\s+osm\n/);
    await assert.rejects(namespaceAdd(kubeConfig, ['newcomer'], 'other-mesh', collect()), /already part of mesh osm/);
    await namespaceRemove(kubeConfig, ['newcomer'], 'osm', collect());
    assert.equal((await server.get('Namespace', undefined, 'newcomer'))!.metadata.labels?.['openservicemesh.io/monitored-by'], undefined);
    const after = collect();
    await namespaceList(kubeConfig, 'osm', after);
    assert.doesNotMatch(after.text, /newcomer/);
    await assert.rejects(namespaceAdd(kubeConfig, ['missing'], 'osm', collect()), /namespace missing not found/);
  });

  it('have one Lease holder at a time, and the other takes over when it stops', async () => {
    await until(() => replicas.some((r) => r.replica!.elector.isLeader), 'a leader');
    assert.equal(replicas.filter((r) => r.replica!.elector.isLeader).length, 1, 'one holder');
    const leader = replicas.find((r) => r.replica!.elector.isLeader)!;
    const other = replicas.find((r) => r !== leader)!;
    const holder = async () => ((await server.get('Lease', 'osm-system', 'trellis-controller-leader'))?.spec as { holderIdentity?: string } | undefined)?.holderIdentity;
    assert.equal(await holder(), leader.replica!.elector.identity);
    await leader.stop();
    replicas.splice(replicas.indexOf(leader), 1);
    // Released on shutdown: the other replica takes it at its next attempt (every 5 s).
    await until(() => other.replica!.elector.isLeader, 'the other replica to take over', 15_000);
    assert.equal(await holder(), other.replica!.elector.identity);
  });
});
