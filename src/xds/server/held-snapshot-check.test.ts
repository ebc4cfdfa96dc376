import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { encodeAny } from '../../api/codec.js';
import { TypeUrl } from '../../api/type-urls.js';
import { ResourceInterner, buildProxySnapshot, type NamedResource } from '../cache/snapshot-cache.js';
import type { ProxySnapshot, ResourceName } from '../cache/types.js';
import { mulberry32 } from '../../../test/helpers/seeded-random.js';
import { HeldReferences, HeldSnapshotCheck, type SubscriptionView } from './held-references.js';

const { Cluster: CDS, ClusterLoadAssignment: EDS, Listener: LDS, RouteConfiguration: RDS, Secret: SDS } = TypeUrl;

/** A resource whose bytes carry `content`, naming `references`. */
function resource(typeUrl: TypeUrl, name: string, content: number, references?: ResourceName[]): NamedResource {
  return { name, resource: encodeAny(typeUrl, typeUrl === CDS ? { name, connect_timeout: { seconds: content } } : typeUrl === EDS ? { cluster_name: name } : { name }), references };
}

/** What a cluster at `content` names: its ClusterLoadAssignment, and a secret that depends on the content. */
function clusterReferences(name: string, content: number): ResourceName[] {
  return [
    { typeUrl: EDS, name },
    { typeUrl: SDS, name: `secret-${content % 3}` },
  ];
}

type Subscriptions = Map<TypeUrl, { wildcard: boolean; names: Set<string> }>;

describe('HeldSnapshotCheck', () => {
  it('after a held snapshot, finds what a whole check finds, over random pushes and subscription changes', () => {
    const interner = new ResourceInterner();
    const references = new HeldReferences();
    const clusters = ['a', 'b', 'c', 'd', 'e', 'f'];
    let checks = 0;
    let held = 0;
    for (let seed = 1; seed <= 60; seed++) {
      const next = mulberry32(seed);
      const pick = <T>(list: readonly T[]): T => list[Math.floor(next() * list.length)]!;
      const check = new HeldSnapshotCheck(references);
      let epoch = 0;
      const subscriptions: Subscriptions = new Map([
        [LDS, { wildcard: true, names: new Set() }],
        [CDS, { wildcard: next() < 0.7, names: new Set(clusters.filter(() => next() < 0.5)) }],
        [EDS, { wildcard: false, names: new Set(clusters.filter(() => next() < 0.95)) }],
        [RDS, { wildcard: false, names: new Set(['route']) }],
        [SDS, { wildcard: false, names: new Set(['secret-0', 'secret-1', 'secret-2'].filter(() => next() < 0.9)) }],
      ]);
      // The shared layer of clusters: the same array (so the same layer object) until it changes.
      let layer: NamedResource[] = [];
      let snapshot: ProxySnapshot | undefined;
      for (let step = 0; step < 80; step++) {
        const op = next();
        if (op < 0.5 || !snapshot) {
          if (!snapshot || next() < 0.5) {
            layer = clusters.filter((n) => n < 'd' && next() < 0.8).map((n) => {
              const content = Math.floor(next() * 4);
              return resource(CDS, n, content, clusterReferences(n, content));
            });
          }
          const own = clusters.filter((n) => n >= 'd' && next() < 0.6).map((n) => {
            const content = Math.floor(next() * 4);
            return resource(CDS, n, content, clusterReferences(n, content));
          });
          const input = new Map<TypeUrl, NamedResource[]>([
            [CDS, own],
            [LDS, [resource(LDS, 'outbound', 0, [{ typeUrl: RDS, name: 'route' }])]],
            [EDS, clusters.filter(() => next() < 0.8).map((n) => resource(EDS, n, 0))],
            [RDS, next() < 0.9 ? [resource(RDS, 'route', 0)] : []],
            [SDS, ['secret-0', 'secret-1', 'secret-2'].filter(() => next() < 0.8).map((n) => resource(SDS, n, 0))],
          ]);
          snapshot = buildProxySnapshot(input, interner, new Map([[CDS, layer]]));
        } else {
          const type = pick([CDS, EDS, SDS, RDS]);
          const sub = subscriptions.get(type)!;
          const name = type === CDS || type === EDS ? pick(clusters) : type === SDS ? pick(['secret-0', 'secret-1', 'secret-2']) : 'route';
          // The stream's rule: a narrowed subscription, or any change to those of Listeners and Clusters, is a new epoch.
          if (type === CDS && next() < 0.2) {
            sub.wildcard = !sub.wildcard;
            epoch++;
          } else if (sub.names.has(name) && next() < 0.3) {
            sub.names.delete(name);
            epoch++;
          } else if (!sub.names.has(name)) {
            sub.names.add(name);
            if (type === CDS) epoch++;
          }
        }
        const whole = new HeldSnapshotCheck(references).holds(snapshot, subscriptions as ReadonlyMap<TypeUrl, SubscriptionView>, 0);
        const incremental = check.holds(snapshot, subscriptions as ReadonlyMap<TypeUrl, SubscriptionView>, epoch);
        assert.equal(incremental, whole, `seed ${seed} step ${step}`);
        checks++;
        if (whole) held++;
      }
    }
    // Both outcomes were met often enough for the comparison to mean something.
    assert.ok(held > checks / 10 && held < checks - checks / 10, `${held} of ${checks} checks found the snapshot held`);
  });

  it('a reference the held snapshot lacked must be subscribed once it appears, though its cluster did not change', () => {
    const interner = new ResourceInterner();
    const check = new HeldSnapshotCheck(new HeldReferences());
    const cluster = resource(CDS, 'a', 1, [{ typeUrl: EDS, name: 'a' }]);
    const subscriptions = new Map<TypeUrl, SubscriptionView>([
      [CDS, { wildcard: true, names: new Set() }],
      [EDS, { wildcard: false, names: new Set() }],
    ]);
    const without = buildProxySnapshot(new Map([[CDS, [cluster]]]), interner);
    assert.equal(check.holds(without, subscriptions, 0), true, 'no ClusterLoadAssignment to hold');
    const withIt = buildProxySnapshot(new Map([[CDS, [cluster]], [EDS, [resource(EDS, 'a', 0)]]]), interner);
    assert.equal(check.holds(withIt, subscriptions, 0), false, 'its ClusterLoadAssignment is there and not subscribed');
  });
});
