/**
 * What a state-of-the-world stream selects of a type subscribed by name (EDS, as Envoy asks for
 * it: by the names of every cluster it has), when the snapshot's map is shared with other
 * snapshots (a `SharedResourceMap` layer) or the same object from one snapshot to the next:
 * the response carries exactly the subscribed resources that exist, with the `version_info`
 * (`typeVersion` of them) it always had, and a push whose maps and subscriptions are the same
 * objects does no per-resource work for them. Real gRPC clients on a real server.
 */
import { after, afterEach, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { encodeAny } from '../src/api/codec.js';
import { TypeUrl } from '../src/api/type-urls.js';
import { ResourceInterner, buildProxySnapshot, typeVersion, type NamedResource } from '../src/xds/cache/snapshot-cache.js';
import type { CachedResource, ProxySnapshot, ResourceMap } from '../src/xds/cache/types.js';
import { resourceNames, type AdsTestStream } from './helpers/ads-client.js';
import { PROXY, startAdsHarness, type AdsHarness } from './helpers/ads-harness.js';
import { eventually } from './helpers/wait.js';
import type { DiscoveryResponse__Output } from '../src/xds/server/discovery-types.js';

const { Cluster: CDS, ClusterLoadAssignment: EDS, Listener: LDS } = TypeUrl;

const clusterNames = Array.from({ length: 50 }, (_, i) => `ns/svc-${i}|80`);

const clusters = (seconds: number): NamedResource[] => clusterNames.map((name) => ({ name, resource: encodeAny(CDS, { name, connect_timeout: { seconds } }) }));
const loadAssignments = (octet: number): NamedResource[] =>
  clusterNames.map((cluster_name) => ({
    name: cluster_name,
    resource: encodeAny(EDS, { cluster_name, endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: `10.0.0.${octet}`, port_value: 80 } } } }] }] }),
  }));
const listener = (port: number): NamedResource[] => [{ name: 'l', resource: encodeAny(LDS, { name: 'l', address: { socket_address: { address: '0.0.0.0', port_value: port } } }) }];

/**
 * Snapshots whose CDS and EDS are shared layers of `ResourceInterner.sharedMap`, as the
 * controller builds them: the same layer arrays give the same map objects in every snapshot.
 */
function layeredSnapshot(interner: ResourceInterner, cds: NamedResource[], eds: NamedResource[], lds: NamedResource[]): ProxySnapshot {
  return buildProxySnapshot(
    new Map([[LDS, lds]]),
    interner,
    new Map([
      [CDS, cds],
      [EDS, eds],
    ]),
  );
}

/** Names and version of a response. */
function shape(r: DiscoveryResponse__Output): { names: string[]; version: string } {
  return { names: resourceNames(r).sort(), version: r.version_info ?? '' };
}

type Harness = AdsHarness<AdsTestStream, [nodeId?: string]>;

/** Subscribes `s` to CDS (wildcard), EDS (every cluster's name) and LDS (wildcard), ACKs each first response; returns the EDS one. */
async function subscribeAll(s: AdsTestStream): Promise<DiscoveryResponse__Output> {
  s.request(CDS);
  s.request(EDS, clusterNames);
  s.request(LDS);
  let eds: DiscoveryResponse__Output | undefined;
  for (const type of [CDS, EDS, LDS]) {
    const r = await s.waitFor((x) => x.type_url === type);
    if (type === EDS) eds = r;
    s.ack(r);
  }
  return eds!;
}

/** Sets a new listener and returns every response that came before its LDS response (the stream must be subscribed to LDS). */
async function barrier(h: Harness, s: AdsTestStream, set: (lds: NamedResource[]) => ProxySnapshot, port: number): Promise<DiscoveryResponse__Output[]> {
  const from = s.responses.length;
  const snap = set(listener(port));
  h.cache.setSnapshot(PROXY.uuid, snap);
  const lds = await s.waitFor((r) => r.type_url === LDS && r.version_info === snap.versions.get(LDS) && s.responses.indexOf(r) >= from);
  const before = s.responses.slice(from, s.responses.indexOf(lds));
  s.ack(lds);
  return before;
}

describe('SotW EDS by name over shared layers', () => {
  let h: Harness;
  afterEach(async () => {
    h.client.close();
    await h.server.stop(1000);
  });

  it('answers every subscribed name with the snapshot version, a superset without the missing name, a subset with its own version', async () => {
    const interner = new ResourceInterner();
    const cds = clusters(1);
    const eds = loadAssignments(1);
    const snap = layeredSnapshot(interner, cds, eds, listener(15000));
    h = await startAdsHarness((client, id?: string) => client.openStream(id));
    h.cache.setSnapshot(PROXY.uuid, snap);
    const s = h.open();
    s.request(EDS, clusterNames);
    const all = await s.next();
    assert.equal(all.type_url, EDS);
    assert.deepEqual(shape(all), { names: [...clusterNames].sort(), version: snap.versions.get(EDS) });
    assert.equal(all.version_info, typeVersion(snap.resources.get(EDS)!.values()));
    s.ack(all);

    // A name that does not exist added: nothing new to send (SotW EDS is per name).
    s.ack(all, [...clusterNames, 'ns/missing|80']);
    // Three names dropped (nothing to send for that), then every CLA changes: the subset goes out.
    const lessThree = clusterNames.slice(3);
    s.ack(all, lessThree);
    await eventually(() => h.typeInfo(EDS)?.resourceNameCount === lessThree.length, 'the smaller subscription applied');
    const changed = layeredSnapshot(interner, cds, loadAssignments(2), listener(15000));
    h.cache.setSnapshot(PROXY.uuid, changed);
    const subset = await s.next();
    const expected = [...changed.resources.get(EDS)!.values()].filter((r) => lessThree.includes(r.name));
    assert.deepEqual(shape(subset), { names: [...lessThree].sort(), version: typeVersion(expected) });
    assert.ok(!resourceNames(subset).includes(clusterNames[0]), 'an unsubscribed name is not sent');
    s.ack(subset);

    // Subscribing again to the names dropped sends the whole set, at the snapshot's version.
    s.ack(subset, clusterNames);
    const again = await s.next();
    assert.deepEqual(shape(again), { names: [...clusterNames].sort(), version: changed.versions.get(EDS) });
  });

  it('resends an EDS map that is the same object after CDS changed, sends nothing for the same snapshot again, and keeps a NACKed map unsent', async () => {
    const interner = new ResourceInterner();
    const eds = loadAssignments(1);
    const cds1 = clusters(1);
    h = await startAdsHarness((client, id?: string) => client.openStream(id));
    const first = layeredSnapshot(interner, cds1, eds, listener(15000));
    h.cache.setSnapshot(PROXY.uuid, first);
    const s = h.open();
    const e1 = await subscribeAll(s);

    // The same snapshot again, then one with only LDS changed: nothing but LDS goes out.
    h.cache.setSnapshot(PROXY.uuid, first);
    assert.deepEqual(await barrier(h, s, (lds) => layeredSnapshot(interner, cds1, eds, lds), 15001), []);

    // CDS changes, EDS is the very same map: EDS follows CDS (warming), the same resources and version.
    const cds2 = clusters(2);
    const changed = layeredSnapshot(interner, cds2, eds, listener(15001));
    assert.equal(changed.resources.get(EDS), first.resources.get(EDS), 'the EDS map is the same object');
    const fromHere = s.responses.length;
    h.cache.setSnapshot(PROXY.uuid, changed);
    const e2 = await s.waitFor((r) => r.type_url === EDS && s.responses.indexOf(r) >= fromHere);
    assert.deepEqual(shape(e2), shape(e1));
    s.ack(s.responses.find((r) => r.type_url === CDS && s.responses.indexOf(r) >= fromHere)!);
    s.ack(e2);

    // EDS changes and is NACKed: the same map is not sent again by a push that does not change it.
    const eds3 = loadAssignments(3);
    const third = layeredSnapshot(interner, cds2, eds3, listener(15001));
    const fromThird = s.responses.length;
    h.cache.setSnapshot(PROXY.uuid, third);
    const e3 = await s.waitFor((r) => r.type_url === EDS && s.responses.indexOf(r) >= fromThird);
    assert.equal(e3.version_info, third.versions.get(EDS));
    s.nack(e3, 'rejected');
    assert.deepEqual(await barrier(h, s, (lds) => layeredSnapshot(interner, cds2, eds3, lds), 15002), []);
  });
});

/**
 * A `ResourceMap` that counts the calls made to it (lookups and walks), to see the work a
 * stream does for a type: a stand-in for the snapshot maps a cache gives (the server only
 * knows `ReadonlyMap`).
 */
class CountingMap implements ReadonlyMap<string, CachedResource> {
  readonly [Symbol.toStringTag] = 'CountingMap';
  calls = 0;
  constructor(private readonly inner: ReadonlyMap<string, CachedResource>) {}
  get size(): number {
    return this.inner.size;
  }
  get(name: string): CachedResource | undefined {
    this.calls++;
    return this.inner.get(name);
  }
  has(name: string): boolean {
    this.calls++;
    return this.inner.has(name);
  }
  keys(): MapIterator<string> {
    this.calls++;
    return this.inner.keys();
  }
  values(): MapIterator<CachedResource> {
    this.calls++;
    return this.inner.values();
  }
  entries(): MapIterator<[string, CachedResource]> {
    this.calls++;
    return this.inner.entries();
  }
  [Symbol.iterator](): MapIterator<[string, CachedResource]> {
    return this.entries();
  }
  forEach(callback: (value: CachedResource, key: string, map: ReadonlyMap<string, CachedResource>) => void): void {
    this.calls++;
    this.inner.forEach((v, k) => callback(v, k, this));
  }
}

describe('SotW pushes whose maps are the same objects', () => {
  let h: Harness;
  let cdsMap: CountingMap;
  let edsMap: CountingMap;
  let base: ProxySnapshot;
  const interner = new ResourceInterner();

  /** `base` with its CDS and EDS maps the counting ones, and another listener. */
  const withListener = (lds: NamedResource[]): ProxySnapshot => {
    const built = buildProxySnapshot(new Map([[LDS, lds]]), interner);
    const resources = new Map<TypeUrl, ResourceMap>([
      [CDS, cdsMap],
      [EDS, edsMap],
      [LDS, built.resources.get(LDS)!],
    ]);
    const versions = new Map(base.versions);
    versions.set(LDS, built.versions.get(LDS)!);
    return { resources, versions };
  };

  before(async () => {
    base = layeredSnapshot(interner, clusters(1), loadAssignments(1), listener(15000));
    cdsMap = new CountingMap(base.resources.get(CDS)!);
    edsMap = new CountingMap(base.resources.get(EDS)!);
    h = await startAdsHarness((client, id?: string) => client.openStream(id));
  });
  after(async () => {
    h.client.close();
    await h.server.stop(1000);
  });

  it('neither looks up nor walks the CDS (wildcard) and EDS (every name) maps again', async () => {
    h.cache.setSnapshot(PROXY.uuid, withListener(listener(15000)));
    const s = h.open();
    const eds = await subscribeAll(s);
    assert.deepEqual(shape(eds), { names: [...clusterNames].sort(), version: base.versions.get(EDS) });
    assert.deepEqual(await barrier(h, s, withListener, 15001), []);

    cdsMap.calls = 0;
    edsMap.calls = 0;
    for (let port = 15002; port < 15007; port++) assert.deepEqual(await barrier(h, s, withListener, port), []);
    assert.equal(cdsMap.calls, 0, 'calls to the CDS map during 5 pushes that did not change it');
    assert.equal(edsMap.calls, 0, 'calls to the EDS map during 5 pushes that did not change it');
  });
});
