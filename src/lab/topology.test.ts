import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import path from 'node:path';
import { pino } from 'pino';
import { podNetnsName } from './network.js';
import { ManifestsSource } from '../sources/manifests/index.js';
import { ObjectStore } from '../store/object-store.js';
import type { KubeObject } from '../store/objects.js';
import { assignLabAddresses, labHostsFile, labTopology, LAB_COMMAND_ANNOTATION, parseHostAddresses, placeLabPods } from './topology.js';

const EXAMPLE = path.resolve(import.meta.dirname, '../../examples/bookstore');
const SUBNET = '10.250.0.0/24';

async function bookstore(extra: readonly KubeObject[] = []): Promise<ObjectStore> {
  const store = new ObjectStore();
  const source = new ManifestsSource({ dir: EXAMPLE, store, logger: pino({ level: 'silent' }), watch: false });
  await source.start();
  await source.stop();
  store.replaceAll('test', extra);
  return store;
}

function pod(namespace: string, name: string, podIP: string | undefined, annotations?: Record<string, string>): KubeObject {
  return {
    apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace, labels: { app: 'lab' }, ...(annotations ? { annotations } : {}) },
    spec: { containers: [{ name: 'c', ports: [{ name: 'tcp-echo', containerPort: 7000 }] }] },
    ...(podIP ? { status: { podIP } } : {}),
  } as KubeObject;
}

describe('labTopology', () => {
  it('runs every pod of examples/bookstore in the mesh, with its container ports and protocol', async () => {
    const t = labTopology(await bookstore(), { meshName: 'osm', subnet: SUBNET });
    assert.deepEqual([...t.pods.keys()], [
      'bookbuyer/bookbuyer-5d8c7f9b6-k2x4p', 'bookstore/bookstore-6b7f8d9c5-m4v1a', 'bookstore/bookstore-v2-8c4d5e6f7-r9v2b',
      'bookthief/bookthief-7c9d6b5f4-q8w2n', 'bookwarehouse/bookwarehouse-59f4c8b7d-t6h3c', 'bookwarehouse/mysql-0',
    ]);
    assert.ok([...t.pods.values()].every((p) => p.mesh));
    assert.deepEqual(t.pods.get('bookwarehouse/mysql-0')?.listen, [{ protocol: 'tcp', port: 3306 }]);
    assert.deepEqual(t.pods.get('bookstore/bookstore-6b7f8d9c5-m4v1a')?.listen, [{ protocol: 'http', port: 14001 }]);
    assert.deepEqual(t.problems, []);
    assert.deepEqual(t.addresses, ['10.96.10.1', '10.96.10.2', '10.96.10.3', '10.96.20.1', '10.244.1.10', '10.244.2.10', '10.244.3.10', '10.244.3.20', '10.244.4.10', '10.244.4.20']);
  });

  it('writes cluster names: <svc>.<ns>[.svc[.cluster.local]] to the ClusterIP, headless to pod IPs, bare names in the own namespace', async () => {
    const t = labTopology(await bookstore(), { meshName: 'osm', subnet: SUBNET });
    const hosts = labHostsFile(t, t.pods.get('bookwarehouse/bookwarehouse-59f4c8b7d-t6h3c')!).split('\n');
    assert.ok(hosts.includes('10.96.10.1\tbookstore.bookstore bookstore.bookstore.svc bookstore.bookstore.svc.cluster.local'));
    assert.ok(hosts.includes('10.244.4.20\tmysql mysql.bookwarehouse mysql.bookwarehouse.svc mysql.bookwarehouse.svc.cluster.local'));
    assert.ok(hosts.includes('10.96.20.1\tbookwarehouse bookwarehouse.bookwarehouse bookwarehouse.bookwarehouse.svc bookwarehouse.bookwarehouse.svc.cluster.local'));
    assert.ok(hosts.includes('10.244.4.10\tbookwarehouse-59f4c8b7d-t6h3c'));
  });

  it('keeps a pod of an unmonitored namespace outside the mesh, and leaves out pods it cannot run, saying why', async () => {
    const t = labTopology(await bookstore([
      pod('outside', 'host', '10.9.0.1'),
      pod('outside', 'no-ip', undefined),
      pod('outside', 'in-subnet', '10.250.0.7'),
      pod('outside', 'twin', '10.244.1.10'),
      pod('outside', 'clusterip', '10.96.10.1'),
      pod('outside', 'bad-command', '10.9.0.2', { [LAB_COMMAND_ANNOTATION]: '"sleep 1"' }),
      pod('outside', 'command', '10.9.0.3', { [LAB_COMMAND_ANNOTATION]: '["sleep","100"]' }),
    ]), { meshName: 'osm', subnet: SUBNET });
    assert.equal(t.pods.get('outside/host')?.mesh, false);
    assert.deepEqual(t.pods.get('outside/host')?.listen, [{ protocol: 'tcp', port: 7000 }]);
    assert.deepEqual(t.pods.get('outside/command')?.command, ['sleep', '100']);
    assert.deepEqual(t.problems.map((p) => `${p.key}: ${p.message}`).sort(), [
      `outside/bad-command: annotation ${LAB_COMMAND_ANNOTATION} must be a non-empty JSON array of strings (argv)`,
      'outside/clusterip: status.podIP 10.96.10.1 is already Service bookstore/bookstore\'s',
      'outside/in-subnet: status.podIP 10.250.0.7 is inside the lab subnet 10.250.0.0/24',
      'outside/no-ip: has no status.podIP: the lab runs only pods with an address',
      'outside/twin: status.podIP 10.244.1.10 is already Pod bookbuyer/bookbuyer-5d8c7f9b6-k2x4p\'s',
    ]);
  });

  it('changes a pod digest when what it runs changes, not otherwise', async () => {
    const a = labTopology(await bookstore([pod('outside', 'host', '10.9.0.1')]), { meshName: 'osm', subnet: SUBNET });
    const b = labTopology(await bookstore([pod('outside', 'host', '10.9.0.1')]), { meshName: 'osm', subnet: SUBNET });
    const c = labTopology(await bookstore([pod('outside', 'host', '10.9.0.9')]), { meshName: 'osm', subnet: SUBNET });
    assert.equal(a.pods.get('outside/host')?.digest, b.pods.get('outside/host')?.digest);
    assert.notEqual(a.pods.get('outside/host')?.digest, c.pods.get('outside/host')?.digest);
  });
});

describe('labTopology interception', () => {
  function meshConfig(traffic: Record<string, unknown>): KubeObject {
    return { apiVersion: 'config.openservicemesh.io/v1alpha2', kind: 'MeshConfig', metadata: { name: 'osm-mesh-config', namespace: 'osm-system' }, spec: { traffic } } as KubeObject;
  }

  it('changes the digest of the mesh pods when a MeshConfig exclusion list changes, and back', async () => {
    const key = 'bookstore/bookstore-6b7f8d9c5-m4v1a';
    const none = labTopology(await bookstore([meshConfig({})]), { meshName: 'osm', subnet: SUBNET });
    const excluded = labTopology(await bookstore([meshConfig({ inboundPortExclusionList: [8080] })]), { meshName: 'osm', subnet: SUBNET });
    const again = labTopology(await bookstore([meshConfig({})]), { meshName: 'osm', subnet: SUBNET });
    assert.deepEqual(excluded.pods.get(key)?.interception?.inboundPortExclusions, [8080]);
    assert.deepEqual(none.pods.get(key)?.interception?.inboundPortExclusions, []);
    assert.notEqual(none.pods.get(key)?.digest, excluded.pods.get(key)?.digest);
    assert.equal(none.pods.get(key)?.digest, again.pods.get(key)?.digest);
  });

  it('lists a mesh pod whose merged exclusion lists are invalid as not run', async () => {
    const t = labTopology(await bookstore([meshConfig({ outboundPortExclusionList: [70000] })]), { meshName: 'osm', subnet: SUBNET });
    assert.equal(t.pods.size, 0);
    assert.match(t.problems[0].message, /outboundPortExclusionList\[0\]/);
  });
});

describe('labTopology sidecar ports', () => {
  function withPort(namespace: string, name: string, podIP: string, containerPort: number): KubeObject {
    const p = pod(namespace, name, podIP) as KubeObject & { spec: { containers: { ports: { containerPort: number }[] }[] } };
    return { ...p, spec: { containers: [{ name: 'c', ports: [{ name: 'tcp-x', containerPort }] }] } } as KubeObject;
  }

  it('lists a mesh pod with a container port of the sidecar as not run, and runs such a pod outside the mesh', async () => {
    const ports = [15000, 15001, 15003, 15010, 15901, 15902, 15903, 15904];
    const t = labTopology(await bookstore([
      ...ports.map((port, i) => withPort('bookstore', `p${port}`, `10.244.9.${i + 1}`, port)),
      withPort('bookstore', 'fine', '10.244.9.100', 15005),
      withPort('outside', 'p15001', '10.9.0.1', 15001),
    ]), { meshName: 'osm', subnet: SUBNET });
    assert.deepEqual(t.problems.map((p) => p.key).sort(), ports.map((port) => `bookstore/p${port}`).sort());
    assert.match(t.problems.find((p) => p.key === 'bookstore/p15001')!.message, /^containerPort 15001 is a port of the sidecar/);
    assert.ok(t.pods.has('bookstore/fine'));
    assert.ok(t.pods.has('outside/p15001'));
  });
});

describe('labTopology addresses it never assigns', () => {
  it('lists pods with a special or host address as not run, and leaves such ClusterIPs unrouted', async () => {
    const ips = ['0.0.0.0', '0.1.2.3', '127.0.0.1', '169.254.169.254', '224.0.0.1', '239.1.1.1', '240.0.0.1', '255.255.255.255', '192.0.2.55'];
    const service = (name: string, clusterIP: string): KubeObject => ({
      apiVersion: 'v1', kind: 'Service', metadata: { name, namespace: 'outside' }, spec: { selector: { app: 'none' }, ports: [{ port: 80 }], clusterIP },
    } as KubeObject);
    const t = labTopology(await bookstore([
      ...ips.map((ip, i) => pod('outside', `p${i}`, ip)),
      pod('outside', 'fine', '10.9.0.1'),
      service('loop', '127.0.0.53'),
      service('host', '192.0.2.55'),
      service('ok', '10.96.99.1'),
    ]), { meshName: 'osm', subnet: SUBNET, hostAddresses: parseHostAddresses('1: lo    inet 127.0.0.1/8 scope host lo\n2: eth0    inet 192.0.2.55/24 brd 192.0.2.255 scope global eth0\n') });
    assert.deepEqual([...t.pods.keys()].filter((k) => k.startsWith('outside/')), ['outside/fine']);
    const problems = new Map(t.problems.map((p) => [p.key, p.message]));
    assert.equal(problems.get('outside/p0'), 'status.podIP 0.0.0.0 is "this network" (0.0.0.0/8): the lab never assigns it');
    assert.equal(problems.get('outside/p2'), 'status.podIP 127.0.0.1 is loopback (127.0.0.0/8): the lab never assigns it');
    assert.match(problems.get('outside/p4')!, /multicast/);
    assert.match(problems.get('outside/p7')!, /reserved \(240\.0\.0\.0\/4, with the broadcast address 255\.255\.255\.255\)/);
    assert.equal(problems.get('outside/p8'), 'status.podIP 192.0.2.55 is an address of this host: the lab never assigns it');
    assert.equal(ips.filter((_, i) => problems.has(`outside/p${i}`)).length, ips.length);
    assert.equal(problems.get('Service outside/loop'), 'ClusterIP 127.0.0.53 is loopback (127.0.0.0/8): the lab never assigns it: it is not routed');
    assert.match(problems.get('Service outside/host')!, /192\.0\.2\.55 is an address of this host/);
    assert.ok(t.addresses.includes('10.96.99.1'));
    assert.ok(!t.addresses.includes('127.0.0.53') && !t.addresses.includes('192.0.2.55'));
  });
});

describe('assignLabAddresses', () => {
  it('keeps the numbers pods have and gives new pods the lowest free ones from 2', () => {
    assert.deepEqual([...assignLabAddresses(SUBNET, ['a', 'b', 'c'], new Map([['b', 2]]))].sort(), [['a', 3], ['b', 2], ['c', 4]]);
  });

  it('gives no number to pods beyond the subnet or maxPods, keeping running pods first', () => {
    assert.deepEqual([...assignLabAddresses('10.250.0.0/30', ['a', 'b'], new Map())], [['a', 2]]);
    assert.deepEqual([...assignLabAddresses('10.250.0.0/29', ['a', 'b', 'c', 'd', 'e'], new Map([['d', 2]]))], [['d', 2], ['a', 3], ['b', 4], ['c', 5], ['e', 6]]);
    assert.deepEqual([...assignLabAddresses(SUBNET, ['a', 'b', 'c'], new Map([['c', 7]]), 2)], [['c', 7], ['a', 2]]);
  });
});

describe('placeLabPods', () => {
  const many = (n: number) => Array.from({ length: n }, (_, i) => pod('outside', `p${String(i).padStart(2, '0')}`, `10.9.0.${i + 1}`));

  it('runs the pods that fit a small subnet, in key order, and lists the rest as not run without a route', async () => {
    const subnet = '10.241.0.0/28'; // 13 pod addresses (2-14)
    const all = labTopology(await bookstore(many(10)), { meshName: 'osm', subnet });
    assert.equal(all.pods.size, 16);
    const { topology, numbers } = placeLabPods(all, { subnet, current: new Map() });
    assert.equal(topology.pods.size, 13);
    assert.equal(numbers.size, 13);
    const left = topology.problems.map((p) => p.key);
    assert.deepEqual(left, ['outside/p07', 'outside/p08', 'outside/p09']);
    assert.equal(topology.problems[0].message, 'no lab address: the lab subnet 10.241.0.0/28 has 13 pod addresses, and 16 pods want one');
    assert.ok(!topology.addresses.includes('10.9.0.8') && topology.addresses.includes('10.9.0.7'));
    // The running pods keep their places; the one free address goes to the first new pod by key.
    const running = new Map([...numbers].filter(([key]) => key !== 'outside/p06'));
    const again = placeLabPods(labTopology(await bookstore([pod('outside', 'a-new', '10.9.0.99'), ...many(10)]), { meshName: 'osm', subnet }), { subnet, current: running });
    assert.deepEqual(again.topology.problems.map((p) => p.key), ['outside/p06', 'outside/p07', 'outside/p08', 'outside/p09']);
    assert.ok([...running].every(([key, n]) => again.numbers.get(key) === n));
  });

  it('caps the pods at maxPods', async () => {
    const all = labTopology(await bookstore(many(5)), { meshName: 'osm', subnet: SUBNET });
    const { topology } = placeLabPods(all, { subnet: SUBNET, current: new Map(), maxPods: 8 });
    assert.equal(topology.pods.size, 8);
    assert.deepEqual(topology.problems.map((p) => `${p.key}: ${p.message}`), [
      'outside/p02: no lab address: the lab runs at most 8 pods (its maxPods), and 11 want to run',
      'outside/p03: no lab address: the lab runs at most 8 pods (its maxPods), and 11 want to run',
      'outside/p04: no lab address: the lab runs at most 8 pods (its maxPods), and 11 want to run',
    ]);
  });
});

describe('podNetnsName', () => {
  it('never gives a cut-and-hashed name to another pod verbatim', () => {
    const long = `q.${'n'.repeat(63)}`;
    const cut = podNetnsName('tto', long);
    assert.ok(cut.length <= 60 && cut.startsWith('tto-q.nnn'));
    // The verbatim name that would read the same (the hash after a "-" instead of the "_").
    const twin = cut.slice('tto-'.length).replace('_', '-');
    assert.notEqual(podNetnsName('tto', twin), cut);
    assert.equal(podNetnsName('tto', 'bookbuyer-5d8c7f9b6-k2x4p.bookbuyer'), 'tto-bookbuyer-5d8c7f9b6-k2x4p.bookbuyer');
    assert.match(podNetnsName('tto', 'Upper.ns'), /^tto-upper\.ns_[0-9a-f]{12}$/);
  });
});
