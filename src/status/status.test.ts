import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { MeshSnapshot } from '../catalog/types.js';
import { serviceIdentity, type ServiceIdentity } from '../proxy/types.js';
import { ObjectStore } from '../store/object-store.js';
import type { KubeObject } from '../store/objects.js';
import { affectedSelector } from './affected.js';
import { policyObjects } from './policy-objects.js';
import { kubernetesStatus, sameStatus } from './kubernetes-status.js';
import { FIRST_GENERATION, ObjectVersions } from './object-versions.js';
import { isProgrammed, programmedSummary, ProgressIndex, type PolicyObjectState, type ProxyProgress } from './policy-status.js';
import { MAX_RETIRED, SnapshotHistory } from './snapshot-history.js';

const BUYER = serviceIdentity('bookbuyer', 'bookbuyer');
const STORE = serviceIdentity('bookstore', 'bookstore');
const THIEF = serviceIdentity('bookthief', 'bookthief');

function proxy(uuid: string, identity: ServiceIdentity, programmedThrough: number | undefined, nack?: ProxyProgress['nack']): ProxyProgress {
  return { uuid, identity, clientType: 'envoy', programmedThrough, nack };
}

function object(enteredAt: number | undefined, selector: Partial<PolicyObjectState['selector']>, problems: string[] = []): PolicyObjectState {
  return {
    kind: 'TrafficSplit',
    namespace: 'bookstore',
    name: 'split',
    generation: 3,
    enteredAt,
    problems,
    selector: { all: false, identities: new Set(), services: new Set(), ...selector },
  };
}

describe('ProgressIndex (policy status computation)', () => {
  const deps = new Map<ServiceIdentity, Set<string>>([
    [BUYER, new Set(['bookstore/bookstore', 'bookstore/bookstore-v1'])],
    [STORE, new Set(['bookstore/bookstore-v1', 'bookstore/bookstore'])],
    [THIEF, new Set()],
  ]);
  const asked: ServiceIdentity[] = [];
  const dependenciesOf = (identity: ServiceIdentity) => {
    asked.push(identity);
    return deps.get(identity) ?? new Set<string>();
  };
  const at = (s: number) => new Date(Date.UTC(2026, 11, 2, 3, 0, s));
  const proxies = [
    proxy('a', BUYER, 7),
    proxy('b', BUYER, 4, { through: 7, type: 'RDS', message: 'late', at: at(9) }),
    proxy('c', BUYER, undefined, { through: 6, type: 'LDS', message: 'early', at: at(1) }),
    proxy('d', STORE, 5),
    proxy('e', THIEF, 9),
  ];
  const index = new ProgressIndex(proxies, dependenciesOf);

  it('counts the proxies whose dependencies hold a service, programmed when their ACKed configuration is right for the generation the content entered at', () => {
    const s = index.status(object(5, { services: new Set(['bookstore/bookstore']) }));
    assert.deepEqual([s.affected, s.programmed, s.nacked], [4, 2, 2]); // a (7) and d (5); b and c NACKed configurations for ≥ 5
    assert.deepEqual(s.firstNack, { proxy: 'c', identity: 'bookbuyer/bookbuyer', type: 'LDS', message: 'early' }); // the earliest
    assert.equal(isProgrammed(s), false);
    assert.equal(programmedSummary(s), 'reached 2 of 4 affected proxies, 2 NACKed (LDS from bookbuyer/bookbuyer c: early)');
    assert.deepEqual([...new Set(asked)].sort(), [BUYER, STORE, THIEF].sort()); // each kind of proxy once
  });

  it('a NACK of a configuration older than the content is not this content NACKed; a proxy programmed since is not NACKed', () => {
    const s = index.status(object(7, { services: new Set(['bookstore/bookstore']) }));
    assert.deepEqual([s.affected, s.programmed, s.nacked], [4, 1, 1]); // only a; b NACKed one right for 7; c's NACK is of 6
    assert.equal(s.firstNack?.proxy, 'b');
    const older = index.status(object(4, { identities: new Set([BUYER]) }));
    assert.deepEqual([older.affected, older.programmed, older.nacked], [3, 2, 1]); // b is programmed for 4 (its NACK does not count), c NACKed
  });

  it('content no MeshSnapshot was built from yet is programmed nowhere', () => {
    const s = index.detail(object(undefined, { all: true }));
    assert.deepEqual([s.affected, s.programmed, s.nacked, s.meshGeneration], [5, 0, 0, null]);
    assert.deepEqual(s.waiting.map((w) => w.reason), Array(5).fill('no configuration built from this version yet'));
  });

  it('lists the proxies it waits for with why, and says programmed when every affected proxy is', () => {
    const detail = index.detail(object(6, { all: true }));
    assert.deepEqual(detail.waiting, [
      { proxy: 'b', identity: 'bookbuyer/bookbuyer', reason: 'NACKed RDS: late' },
      { proxy: 'c', identity: 'bookbuyer/bookbuyer', reason: 'NACKed LDS: early' },
      { proxy: 'd', identity: 'bookstore/bookstore', reason: 'not ACKed yet' },
    ]);
    const thief = index.status(object(9, { identities: new Set([THIEF]) }));
    assert.equal(isProgrammed(thief), true);
    assert.equal(isProgrammed({ ...thief, accepted: false }), false);
    const none = index.status(object(9, { identities: new Set([serviceIdentity('x', 'y')]) }));
    assert.deepEqual([none.affected, none.programmed, isProgrammed(none)], [0, 0, true]);
  });

  it('an object with problems is not accepted', () => {
    const s = index.status(object(1, { all: true }, ['TrafficSplit bookstore/split: spec.backends[0].service: …']));
    assert.equal(s.accepted, false);
    assert.deepEqual(s.problems, ['TrafficSplit bookstore/split: spec.backends[0].service: …']);
  });
});

describe('SnapshotHistory', () => {
  const s1 = { n: 1 };
  const s2 = { n: 2 };

  it('the current snapshot is right up to the settled generation; a replaced one up to the generation before the new one', () => {
    const h = new SnapshotHistory<object>();
    assert.equal(h.through('p', s1, { snapshot: s1, generation: 3, settled: 8 }), 8); // confirmed unaffected by pushes 4…8
    assert.equal(h.through('p', s1, { snapshot: s1, generation: 9, settled: 8 }), 9); // regenerated by the push of 9, still running
    assert.equal(h.through('p', s1, { snapshot: s1, generation: undefined, settled: 8 }), undefined);
    h.replaced('p', { snapshot: s1, generation: 3, settled: 8 });
    assert.equal(h.through('p', s1, { snapshot: s2, generation: 9, settled: 8 }), 8);
    assert.equal(h.through('p', s2, { snapshot: s2, generation: 9, settled: 9 }), 9);
    assert.equal(h.through('p', { n: 3 }, { snapshot: s2, generation: 9, settled: 9 }), undefined); // not one of its snapshots
    h.forget('p');
    assert.equal(h.through('p', s1, { snapshot: s2, generation: 9, settled: 9 }), undefined);
  });

  it('a configuration that failed caps the snapshot the proxy keeps; a partial first one is right for nothing', () => {
    const h = new SnapshotHistory<object>();
    h.failed('p', 6);
    h.failed('p', 7);
    assert.equal(h.through('p', s1, { snapshot: s1, generation: 3, settled: 9 }), 5);
    h.complete('p');
    assert.equal(h.through('p', s1, { snapshot: s1, generation: 7, settled: 9 }), 9);
    h.partial('q');
    assert.equal(h.through('q', s1, { snapshot: s1, generation: 7, settled: 9 }), 0);
    h.replaced('q', { snapshot: s1, generation: 7, settled: 9 });
    assert.equal(h.through('q', s1, { snapshot: s2, generation: 10, settled: 10 }), 0);
    assert.equal(h.through('q', s2, { snapshot: s2, generation: 10, settled: 10 }), 10);
  });

  it(`remembers ${MAX_RETIRED} snapshots before the current one`, () => {
    const h = new SnapshotHistory<object>();
    const snaps = Array.from({ length: MAX_RETIRED + 2 }, (_, i) => ({ i }));
    for (let i = 0; i + 1 < snaps.length; i++) h.replaced('p', { snapshot: snaps[i], generation: i + 1, settled: i + 1 });
    const current = { snapshot: snaps.at(-1), generation: snaps.length, settled: snaps.length };
    assert.equal(h.through('p', snaps[0], current), undefined);
    assert.equal(h.through('p', snaps[1], current), 2);
  });
});

describe('ObjectVersions', () => {
  const split = (weight: number, extra: Partial<KubeObject> = {}): KubeObject => ({
    apiVersion: 'split.smi-spec.io/v1alpha2',
    kind: 'TrafficSplit',
    metadata: { name: 'split', namespace: 'bookstore' },
    spec: { service: 'bookstore', backends: [{ service: 'v1', weight }] },
    ...extra,
  });

  it('counts content versions, ignores metadata and status, and records the generation each entered at', () => {
    const v = new ObjectVersions();
    assert.deepEqual(v.versionOf(split(1)), { generation: 1, enteredAt: FIRST_GENERATION });
    v.changed([{ kind: 'TrafficSplit', namespace: 'bookstore', name: 'split', oldObject: split(1), newObject: split(2) }]);
    assert.deepEqual(v.versionOf(split(2)), { generation: 2, enteredAt: undefined });
    v.built(4);
    assert.deepEqual(v.versionOf(split(2)), { generation: 2, enteredAt: 4 });
    const relabelled = split(2, { metadata: { name: 'split', namespace: 'bookstore', labels: { a: 'b' }, resourceVersion: '9' }, status: { currentStatus: 'committed' } });
    v.changed([{ kind: 'TrafficSplit', namespace: 'bookstore', name: 'split', oldObject: split(2), newObject: relabelled }]);
    v.built(5);
    assert.deepEqual(v.versionOf(relabelled), { generation: 2, enteredAt: 4 });
    v.changed([{ kind: 'TrafficSplit', namespace: 'bookstore', name: 'split', oldObject: split(2), newObject: undefined }]);
    v.changed([{ kind: 'TrafficSplit', namespace: 'bookstore', name: 'split', oldObject: undefined, newObject: split(3) }]);
    v.built(6);
    assert.deepEqual(v.versionOf(split(3)), { generation: 1, enteredAt: 6 });
    // Other kinds are not tracked.
    v.changed([{ kind: 'Service', namespace: 'bookstore', name: 'split', oldObject: undefined, newObject: { ...split(1), kind: 'Service' } }]);
  });

  it('takes metadata.generation when the source gives it (Kubernetes)', () => {
    const v = new ObjectVersions();
    const object = split(1, { metadata: { name: 'split', namespace: 'bookstore', generation: 7 } as KubeObject['metadata'] });
    assert.equal(v.versionOf(object).generation, 7);
  });
});

describe('affectedSelector', () => {
  const store = new ObjectStore();
  const tt = (name: string, rules: { kind: string; name: string }[]): KubeObject => ({
    apiVersion: 'access.smi-spec.io/v1alpha3',
    kind: 'TrafficTarget',
    metadata: { name, namespace: 'bookstore' },
    spec: { destination: { kind: 'ServiceAccount', name: 'bookstore', namespace: 'bookstore' }, sources: [{ kind: 'ServiceAccount', name: 'bookbuyer', namespace: 'bookbuyer' }, { kind: 'Group', name: 'x' }], rules },
  });
  const objects: KubeObject[] = [
    tt('t1', [{ kind: 'HTTPRouteGroup', name: 'routes' }]),
    tt('t2', [{ kind: 'TCPRoute', name: 'tcp' }]),
    { apiVersion: 'policy.openservicemesh.io/v1alpha1', kind: 'Egress', metadata: { name: 'e', namespace: 'bookstore' }, spec: { sources: [{ kind: 'ServiceAccount', name: 'bookthief', namespace: 'bookthief' }], ports: [], matches: [{ apiGroup: 'policy.openservicemesh.io/v1alpha1', kind: 'UpstreamTrafficSetting', name: 'uts' }] } },
  ];
  store.replaceAll('test', objects);
  const mesh = { identitiesByService: new Map([['bookstore/bookstore', [STORE]]]) } as unknown as MeshSnapshot;
  const select = (kind: Parameters<typeof affectedSelector>[0], object: KubeObject) => {
    const s = affectedSelector(kind, object, mesh, store, 'osm-system/osm-mesh-config');
    return { all: s.all, identities: [...s.identities].sort(), services: [...s.services].sort() };
  };

  it('an object with warnings alone (a ServiceAccount that exists nowhere yet) is accepted; with an error it is not', () => {
    const input = { store, mesh, errors: [], versions: new ObjectVersions(), meshConfigName: 'osm-system/osm-mesh-config' };
    const warned = policyObjects({ ...input, problems: [{ kind: 'TrafficTarget', namespace: 'bookstore', name: 't1', field: 'spec.sources[0]', severity: 'warning', message: 'ServiceAccount bookbuyer/bookbuyer exists nowhere' }] });
    const t1 = warned.find((o) => o.name === 't1')!;
    assert.deepEqual([t1.problems, t1.warnings], [[], ['TrafficTarget bookstore/t1: spec.sources[0]: ServiceAccount bookbuyer/bookbuyer exists nowhere']]);
    const index = new ProgressIndex([], () => new Set<string>());
    assert.equal(index.status(t1).accepted, true);
    const failed = policyObjects({ ...input, problems: [{ kind: 'TrafficTarget', namespace: 'bookstore', name: 't1', field: 'spec.rules[0]', message: 'no such HTTPRouteGroup' }] }).find((o) => o.name === 't1')!;
    assert.equal(index.status(failed).accepted, false);
  });

  it('follows each kind: targets name identities, route groups go through the targets that use them, splits and settings name services', () => {
    assert.deepEqual(select('TrafficTarget', objects[0]), { all: false, identities: [BUYER, STORE], services: [] });
    const routes = { apiVersion: 'specs.smi-spec.io/v1alpha4', kind: 'HTTPRouteGroup', metadata: { name: 'routes', namespace: 'bookstore' } } as KubeObject;
    assert.deepEqual(select('HTTPRouteGroup', routes), { all: false, identities: [BUYER, STORE], services: [] });
    assert.deepEqual(select('HTTPRouteGroup', { ...routes, metadata: { name: 'unused', namespace: 'bookstore' } }), { all: false, identities: [], services: [] });
    assert.deepEqual(select('TCPRoute', { ...routes, kind: 'TCPRoute', metadata: { name: 'tcp', namespace: 'bookstore' } }), { all: false, identities: [BUYER, STORE], services: [] });
    const split = { apiVersion: 'split.smi-spec.io/v1alpha2', kind: 'TrafficSplit', metadata: { name: 's', namespace: 'bookstore' }, spec: { service: 'bookstore.bookstore', backends: [] } } as KubeObject;
    assert.deepEqual(select('TrafficSplit', split), { all: false, identities: [], services: ['bookstore/bookstore'] });
    const uts = { apiVersion: 'policy.openservicemesh.io/v1alpha1', kind: 'UpstreamTrafficSetting', metadata: { name: 'uts', namespace: 'bookstore' }, spec: { host: 'bookstore.bookstore.svc.cluster.local' } } as KubeObject;
    assert.deepEqual(select('UpstreamTrafficSetting', uts), { all: false, identities: [THIEF], services: ['bookstore/bookstore'] });
    const ib = { apiVersion: 'policy.openservicemesh.io/v1alpha1', kind: 'IngressBackend', metadata: { name: 'ib', namespace: 'bookstore' }, spec: { backends: [{ name: 'bookstore', port: { number: 14001, protocol: 'http' } }], sources: [] } } as KubeObject;
    assert.deepEqual(select('IngressBackend', ib), { all: false, identities: [STORE], services: [] });
    assert.deepEqual(select('Egress', objects[2]), { all: false, identities: [THIEF], services: [] });
    const retry = { apiVersion: 'policy.openservicemesh.io/v1alpha1', kind: 'Retry', metadata: { name: 'r', namespace: 'bookbuyer' }, spec: { source: { kind: 'ServiceAccount', name: 'bookbuyer' }, destinations: [] } } as KubeObject;
    assert.deepEqual(select('Retry', retry), { all: false, identities: [BUYER], services: [] });
    const mc = { apiVersion: 'config.openservicemesh.io/v1alpha2', kind: 'MeshConfig', metadata: { name: 'osm-mesh-config', namespace: 'osm-system' } } as KubeObject;
    assert.equal(select('MeshConfig', mc).all, true);
    assert.equal(select('MeshConfig', { ...mc, metadata: { name: 'other', namespace: 'osm-system' } }).all, false);
  });
});

describe('kubernetesStatus', () => {
  const base = { kind: 'IngressBackend' as const, namespace: 'bookstore', name: 'ib', generation: 4, accepted: true, problems: [], affected: 2, programmed: 2, nacked: 0, firstNack: null };
  const t0 = '2026-12-02T03:00:00Z';
  const t1 = '2026-12-02T03:01:00Z';

  it('says committed with both conditions True at the generation when every affected proxy has it', () => {
    const s = kubernetesStatus(base, undefined, t0);
    assert.deepEqual(s, {
      currentStatus: 'committed',
      reason: 'successfully committed: reached 2 of 2 affected proxies',
      conditions: [
        { type: 'Accepted', status: 'True', observedGeneration: 4, lastTransitionTime: t0, reason: 'Accepted', message: 'no problem found' },
        { type: 'Programmed', status: 'True', observedGeneration: 4, lastTransitionTime: t0, reason: 'Programmed', message: 'reached 2 of 2 affected proxies' },
      ],
    });
    assert.equal(sameStatus(s, JSON.parse(JSON.stringify(s))), true);
    assert.equal(sameStatus(s, { ...s, currentStatus: 'pending' }), false);
    assert.equal(sameStatus(s, undefined), false);
  });

  it('keeps a condition\'s transition time while its status stays, and says pending, rejected or invalid', () => {
    const first = kubernetesStatus(base, undefined, t0);
    const pending = kubernetesStatus({ ...base, generation: 5, programmed: 1 }, first, t1);
    assert.equal(pending.currentStatus, 'pending');
    assert.deepEqual(pending.conditions.map((c) => [c.status, c.reason, c.lastTransitionTime, c.observedGeneration]), [['True', 'Accepted', t0, 5], ['False', 'Pending', t1, 5]]);
    const nack = { proxy: 'u', identity: 'bookstore/bookstore', type: 'LDS', message: 'bad' };
    const rejected = kubernetesStatus({ ...base, programmed: 1, nacked: 1, firstNack: nack }, pending, t1);
    assert.equal(rejected.currentStatus, 'error');
    assert.equal(rejected.conditions[1].reason, 'Rejected');
    assert.match(rejected.conditions[1].message, /1 NACKed \(LDS from bookstore\/bookstore u: bad\)/);
    const invalid = kubernetesStatus({ ...base, accepted: false, problems: ['IngressBackend bookstore/ib: spec.backends[0].name: no such service'] }, first, t1);
    assert.deepEqual(invalid.conditions.map((c) => [c.status, c.reason]), [['False', 'Invalid'], ['False', 'Invalid']]);
    assert.equal(invalid.currentStatus, 'error');
    assert.equal(invalid.reason, 'IngressBackend bookstore/ib: spec.backends[0].name: no such service');
  });
});
