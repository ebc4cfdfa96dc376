/**
 * A property test of the delta ADS stream against a model client (fixed seeds): random steps of
 * snapshots (new ones, ones made of the maps of earlier ones, and earlier snapshot objects set
 * again, so a type's map is often the very object the stream last planned), subscribes and
 * unsubscribes of named and wildcard types, NACKs and reconnects with `initial_resource_versions`,
 * sometimes several steps before the stream settles. After each settle, the client holds exactly
 * what its subscription covers of the current snapshot, at the current versions (nothing missed,
 * nothing removed kept).
 */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { TypeUrl } from '../src/api/type-urls.js';
import type { ProxySnapshot } from '../src/xds/cache/types.js';
import { TEST_NODE_ID } from './helpers/ads-client.js';
import { PROXY, snapshot, startAdsHarness, type Spec } from './helpers/ads-harness.js';
import { openDeltaTestStream, type DeltaTestStream } from './helpers/delta-client.js';
import { mulberry32 } from './helpers/seeded-random.js';

const { Cluster: CDS, ClusterLoadAssignment: EDS, Listener: LDS, Secret: SDS } = TypeUrl;
const TYPES = [CDS, LDS, EDS, SDS] as const;
const NAMES = ['a', 'b', 'c', 'd'];


it('a delta stream holds what its subscription covers of the current snapshot after random steps (the same map objects set again)', async () => {
  await deltaModel(false);
});

it('the same with shared layers: each type in a shared layer and the proxy’s own, names moving between them (a stream then walks only what differs from the layer it planned)', async () => {
  await deltaModel(true);
});

/** The property test, with snapshots in flat maps, or (`layered`) most of them with a random part of each type in a shared layer. */
async function deltaModel(layered: boolean): Promise<void> {
  const h = await startAdsHarness((client, resumeFrom?: DeltaTestStream) => openDeltaTestStream(client, TEST_NODE_ID, resumeFrom));
  const failures: string[] = [];
  try {
    for (let seed = 1; seed <= Number(process.env.DELTA_MODEL_SEEDS ?? 60) && failures.length === 0; seed++) {
      const r = mulberry32(seed);
      const pick = <T>(list: readonly T[]): T => list[Math.floor(r() * list.length)]!;
      const randomSpec = (): Spec => {
        const m = () => Object.fromEntries(NAMES.filter(() => r() < 0.6).map((n) => [n, 1 + Math.floor(r() * 3)]));
        return { clusters: m(), endpoints: m(), listeners: m(), secrets: m() };
      };
      // Layered: a snapshot in five is flat; the others put each resource in the layer or not at random.
      const make = (spec: Spec): ProxySnapshot => (layered && r() < 0.8 ? snapshot(spec, () => r() < 0.7) : snapshot(spec));
      const pool: ProxySnapshot[] = [make(randomSpec())];
      /** An earlier snapshot with one type's map replaced: its other maps are the same objects. */
      const derive = (): ProxySnapshot => {
        const base = pick(pool);
        const other = make(randomSpec());
        const type = pick(TYPES);
        const s = Object.freeze({ resources: new Map(base.resources).set(type, other.resources.get(type)!), versions: new Map(base.versions).set(type, other.versions.get(type)!) });
        pool.push(s);
        return s;
      };
      let current = pool[0]!;
      const set = (s: ProxySnapshot): void => {
        current = s;
        h.cache.setSnapshot(PROXY.uuid, s);
      };
      set(current);
      let s = h.open();
      let barriers = 0;
      /** Reads responses (ACKing, or NACKing the first when asked, applied as gRPC clients do) up to the answer of a missing secret subscribed now. */
      const barrier = async (nackFirst: boolean): Promise<void> => {
        const name = `barrier-${++barriers}`;
        s.subscribe(SDS, [name]);
        for (;;) {
          const res = await s.next();
          if (nackFirst && res.type_url !== SDS) {
            s.apply(res);
            s.nack(res, 'rejected');
            nackFirst = false;
            continue;
          }
          s.ack(res);
          if (res.type_url === SDS && (res.removed_resources ?? []).includes(name)) break;
        }
        s.unsubscribe(SDS, [name]);
      };
      // Twice: the first barrier may be merged into a request of its type queued before others.
      const settle = async (nackFirst: boolean): Promise<void> => {
        await barrier(nackFirst);
        await barrier(false);
      };
      s.subscribe(CDS);
      s.subscribe(LDS);
      s.subscribe(EDS, ['a']);
      s.subscribe(SDS, ['b']);
      await settle(false);
      const history: string[] = [];
      for (let step = 0; step < 40 && failures.length === 0; step++) {
        const op = r();
        let nack = false;
        let what: string;
        if (op < 0.25) {
          set(r() < 0.5 ? pick(pool) : derive());
          nack = r() < 0.2;
          what = `set #${pool.indexOf(current)}${nack ? ' (NACK)' : ''}`;
        } else if (op < 0.6) {
          const type = pick([EDS, SDS]);
          const name = pick(NAMES);
          if (op < 0.45) s.subscribe(type, [name]);
          else s.unsubscribe(type, [name]);
          what = `${op < 0.45 ? 'sub' : 'unsub'} ${type} ${name}`;
        } else if (op < 0.7) {
          const type = pick([CDS, LDS]);
          if (s.view(type).wildcard) s.unsubscribe(type, ['*']);
          else s.subscribe(type, ['*']);
          what = `${s.view(type).wildcard ? 'sub' : 'unsub'} * ${type}`;
        } else if (op < 0.8) {
          const type = pick([CDS, LDS]);
          const name = pick(NAMES);
          // A first request with no names would be a wildcard: a stream's first is a subscribe.
          const subscribe = r() < 0.5 || !s.view(type).requested;
          if (subscribe) s.subscribe(type, [name]);
          else s.unsubscribe(type, [name]);
          what = `${subscribe ? 'sub' : 'unsub'} ${type} ${name}`;
        } else if (op < 0.9) {
          s.cancel();
          if (r() < 0.5) set(r() < 0.5 ? pick(pool) : derive());
          const before = s;
          s = h.open(before);
          // The first request of each type it had again: its subscription and initial_resource_versions.
          for (const type of TYPES) {
            const v = before.types.get(type);
            if (v && (v.wildcard || v.names.size > 0)) s.subscribe(type, v.wildcard && v.names.size === 0 ? [] : [...v.names].slice(0, 1));
          }
          what = `reconnect, #${pool.indexOf(current)}`;
        } else {
          set(pick(pool));
          what = `set again #${pool.indexOf(current)}`;
        }
        history.push(what);
        if (!what.startsWith('reconnect') && r() < 0.5 && step < 39) continue; // settle later: requests queue and merge
        await settle(nack);
        for (const type of TYPES) {
          const v = s.view(type);
          // A response in flight when the client unsubscribed may carry what it no longer covers: a client drops it.
          for (const name of [...v.held.keys()]) if (!v.wildcard && !v.names.has(name)) v.held.delete(name);
          const want = Object.fromEntries([...current.resources.get(type)!].filter(([n]) => v.wildcard || v.names.has(n)).map(([n, c]) => [n, c.version]).sort());
          const held = s.held(type);
          try {
            assert.deepEqual(held, want);
          } catch {
            failures.push(`seed ${seed} step ${step} ${type}: holds ${JSON.stringify(held)}, want ${JSON.stringify(want)} after\n  ${history.join('\n  ')}`);
          }
        }
      }
      s.cancel();
    }
  } finally {
    for (const st of h.streams) st.cancel();
    h.client.close();
    await h.server.stop(100);
  }
  assert.deepEqual(failures, []);
}
