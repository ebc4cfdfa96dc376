import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { FakeKubeApiServer } from './helpers/fake-kube-apiserver.js';
import { Kubectl, findKubectl } from './helpers/kubectl.js';
import { eventually } from './helpers/wait.js';

/** Polls `check` until it returns true (bounded). */
const until = (check: () => boolean | Promise<boolean>, what: string, timeoutMs = 10_000) => eventually(check, what, timeoutMs, 20);

function kubeConfigFor(server: FakeKubeApiServer): k8s.KubeConfig {
  const kc = new k8s.KubeConfig();
  kc.loadFromString(server.kubeconfigYaml());
  return kc;
}

interface WatchLine {
  type: string;
  object: { kind?: string; code?: number; reason?: string; metadata?: { name?: string; resourceVersion?: string } };
}

/** Opens a raw watch with the library's Watch and collects its events until it ends. */
function rawWatch(kc: k8s.KubeConfig, urlPath: string, query: Record<string, string>) {
  const events: WatchLine[] = [];
  let ended: unknown = false;
  const ready = new k8s.Watch(kc).watch(
    urlPath,
    query,
    (type, object) => events.push({ type, object } as WatchLine),
    (err) => {
      ended = err ?? true;
    },
  );
  return { events, ready, ended: () => ended };
}

describe('fake kube-apiserver with @kubernetes/client-node', () => {
  let server: FakeKubeApiServer;
  let kc: k8s.KubeConfig;
  let core: k8s.CoreV1Api;

  before(async () => {
    server = await new FakeKubeApiServer({ bookmarkIntervalMs: 50 }).start();
    kc = kubeConfigFor(server);
    core = kc.makeApiClient(k8s.CoreV1Api);
  });
  after(async () => {
    await server.stop();
  });

  it('serves discovery for core, CRD and OSM groups', async () => {
    const groups = await (await fetch(`${server.url}/apis`)).json();
    const names = (groups.groups as { name: string }[]).map((g) => g.name);
    for (const g of ['apps', 'discovery.k8s.io', 'coordination.k8s.io', 'access.smi-spec.io', 'policy.openservicemesh.io']) assert.ok(names.includes(g), g);
    const policy = await (await fetch(`${server.url}/apis/policy.openservicemesh.io/v1alpha1`)).json();
    const retries = policy.resources.find((r: { name: string }) => r.name === 'retries');
    assert.equal(retries.kind, 'Retry');
    assert.equal(retries.namespaced, true);
    assert.ok(retries.verbs.includes('watch'));
    const v1 = await (await fetch(`${server.url}/api/v1`)).json();
    assert.equal(v1.resources.find((r: { name: string }) => r.name === 'namespaces').namespaced, false);
  });

  it('creates, refuses duplicates, updates with resourceVersion preconditions, patches and deletes', async () => {
    await core.createNamespace({ body: { metadata: { name: 'ns1', labels: { a: '1' } } } });
    await assert.rejects(core.createNamespace({ body: { metadata: { name: 'ns1' } } }), (e: k8s.ApiException<unknown>) => e.code === 409);
    const secret = await core.createNamespacedSecret({ namespace: 'ns1', body: { metadata: { name: 's' }, data: { k: 'dg==' } } });
    const rv = secret.metadata?.resourceVersion;
    assert.ok(rv);
    const updated = await core.replaceNamespacedSecret({ namespace: 'ns1', name: 's', body: { ...secret, data: { k: 'dzI=' } } });
    assert.notEqual(updated.metadata?.resourceVersion, rv);
    await assert.rejects(
      core.replaceNamespacedSecret({ namespace: 'ns1', name: 's', body: { ...secret, data: { k: 'eA==' } } }),
      (e: k8s.ApiException<unknown>) => e.code === 409,
    );
    await core.patchNamespace(
      { name: 'ns1', body: { metadata: { labels: { 'openservicemesh.io/monitored-by': 'osm', a: null } } } },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
    assert.deepEqual(server.get('Namespace', undefined, 'ns1')?.metadata.labels, { 'openservicemesh.io/monitored-by': 'osm' });
    const read = await core.readNamespacedSecret({ namespace: 'ns1', name: 's' });
    assert.equal(read.data?.k, 'dzI=');
    await core.deleteNamespacedSecret({ namespace: 'ns1', name: 's' });
    await assert.rejects(core.readNamespacedSecret({ namespace: 'ns1', name: 's' }), (e: k8s.ApiException<unknown>) => e.code === 404);
  });

  it('lists with a global resourceVersion and a label selector', async () => {
    server.apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'other' } });
    const all = await core.listNamespace();
    assert.equal(all.metadata?.resourceVersion, server.resourceVersion);
    const monitored = await core.listNamespace({ labelSelector: 'openservicemesh.io/monitored-by=osm' });
    assert.deepEqual(
      monitored.items.map((n) => n.metadata?.name),
      ['ns1'],
    );
  });

  it('feeds a library informer: list, then ADDED/MODIFIED/DELETED from the watch', async () => {
    const path = '/api/v1/namespaces/ns1/services';
    const informer = k8s.makeInformer(kc, path, () => core.listNamespacedService({ namespace: 'ns1' }));
    const seen: string[] = [];
    informer.on('add', (o) => seen.push(`add ${o.metadata?.name}`));
    informer.on('update', (o) => seen.push(`update ${o.metadata?.name} ${JSON.stringify(o.spec?.selector)}`));
    informer.on('delete', (o) => seen.push(`delete ${o.metadata?.name}`));
    server.apply({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'a', namespace: 'ns1' }, spec: { selector: { app: 'a' } } });
    await informer.start();
    await until(() => seen.includes('add a'), 'initial list');
    server.apply({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'b', namespace: 'ns1' }, spec: {} });
    server.apply({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'a', namespace: 'ns1' }, spec: { selector: { app: 'a2' } } });
    server.remove('Service', 'ns1', 'b');
    await until(() => seen.includes('delete b'), 'watch events');
    assert.deepEqual(seen, ['add a', 'add b', 'update a {"app":"a2"}', 'delete b']);
    await informer.stop();
  });

  it('streams watches from a resourceVersion, with bookmarks and label-selection transitions', async () => {
    const from = server.resourceVersion;
    server.apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'w1', labels: { m: 'x' } } });
    const w = rawWatch(kc, '/api/v1/namespaces', { resourceVersion: from, allowWatchBookmarks: 'true', labelSelector: 'm=x' });
    await w.ready;
    server.apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'w1', labels: { m: 'y' } } });
    server.apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'w2', labels: { m: 'y' } } });
    server.apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'w2', labels: { m: 'x' } } });
    await until(() => w.events.some((e) => e.type === 'BOOKMARK'), 'a bookmark');
    const changes = w.events.filter((e) => e.type !== 'BOOKMARK').map((e) => `${e.type} ${e.object.metadata?.name}`);
    assert.deepEqual(changes, ['ADDED w1', 'DELETED w1', 'ADDED w2']);
    const bookmark = w.events.find((e) => e.type === 'BOOKMARK');
    assert.equal(bookmark?.object.kind, 'Namespace');
    assert.equal(server.dropWatches(), 1);
    await until(() => w.ended() !== false, 'the dropped watch to end');
  });

  it('answers a watch from before the compaction point with 410 Expired', async () => {
    const old = server.resourceVersion;
    server.apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'c1' } });
    server.compact();
    const w = rawWatch(kc, '/api/v1/namespaces', { resourceVersion: old });
    await w.ready;
    await until(() => w.ended() !== false, 'the expired watch to end');
    assert.equal(w.events[0]?.type, 'ERROR');
    assert.equal(w.events[0]?.object.code, 410);
    assert.equal(w.events[0]?.object.reason, 'Expired');

    const strict = await new FakeKubeApiServer({ expiredWatch: 'http-410' }).start();
    try {
      strict.apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'x' } });
      const before = strict.resourceVersion;
      strict.apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'y' } });
      strict.compact();
      const res = await fetch(`${strict.url}/api/v1/namespaces?watch=1&resourceVersion=${Number(before) - 1}`);
      assert.equal(res.status, 410);
      assert.equal((await res.json()).reason, 'Expired');
    } finally {
      await strict.stop();
    }
  });

  it('fails the next requests on demand and is unreachable between stop() and start()', async () => {
    server.failNext(2, 503);
    await assert.rejects(core.listNamespace(), (e: k8s.ApiException<unknown>) => e.code === 503);
    await assert.rejects(core.listNamespace(), (e: k8s.ApiException<unknown>) => e.code === 503);
    await core.listNamespace();
    const port = server.port;
    await server.stop();
    await assert.rejects(fetch(`${server.url}/api`));
    await server.start();
    assert.equal(server.port, port);
    assert.ok((await core.listNamespace()).items.length > 0, 'objects survive a restart');
  });
});

describe('fake kube-apiserver kubeconfig file', () => {
  it('is loadable by KubeConfig.loadFromFile', async () => {
    const server = await new FakeKubeApiServer().start();
    const dir = await mkdtemp(path.join(os.tmpdir(), 'trellis-fake-kube-'));
    try {
      const kc = new k8s.KubeConfig();
      kc.loadFromFile(await server.writeKubeconfig(dir));
      assert.equal(kc.getCurrentCluster()?.server, server.url);
      const list = await kc.makeApiClient(k8s.CoreV1Api).listNamespace();
      assert.deepEqual(list.items, []);
    } finally {
      await server.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

const kubectl = findKubectl();

describe('fake kube-apiserver with a real kubectl', () => {
  it('takes kubectl apply (create, then strategic-merge and merge patches), get and delete', { skip: kubectl.skip }, async () => {
    const server = await new FakeKubeApiServer().start();
    const k = await Kubectl.for(server, kubectl.path ?? '');
    try {
      await k.apply(path.resolve(import.meta.dirname, '../examples/bookstore'));
      assert.deepEqual(
        server.objects('Namespace').map((n) => n.metadata.name),
        ['bookbuyer', 'bookstore', 'bookthief', 'bookwarehouse'],
      );
      const annotations = server.get('TrafficSplit', 'bookstore', 'bookstore-split')?.metadata.annotations as Record<string, string> | undefined;
      assert.ok(annotations?.['kubectl.kubernetes.io/last-applied-configuration']);
      const service = [
        'apiVersion: v1',
        'kind: Service',
        'metadata: {name: bookstore, namespace: bookstore, labels: {app: bookstore}}',
        'spec: {clusterIP: 10.96.10.1, selector: {app: bookstore}, ports: [{name: http, port: 14002}]}',
        '',
      ].join('\n');
      assert.match(await k.apply('-', service), /configured/);
      assert.ok(server.requests.some((r) => r.method === 'PATCH' && r.contentType?.startsWith('application/strategic-merge-patch+json')));
      assert.deepEqual((server.get('Service', 'bookstore', 'bookstore')?.spec as { ports: unknown }).ports, [{ name: 'http', port: 14002 }]);
      const split = await k.ok(['get', 'trafficsplit', '-n', 'bookstore', 'bookstore-split', '-o', 'json']);
      assert.equal(JSON.parse(split).spec.service, 'bookstore.bookstore');
      await k.ok(['delete', 'namespace', 'bookthief']);
      assert.equal(server.objects('Pod', 'bookthief').length, 0);
    } finally {
      await server.stop();
      await rm(path.dirname(k.kubeconfig), { recursive: true, force: true });
    }
  });
});
