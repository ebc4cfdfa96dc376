import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SendBudget, type Release } from './send-budget.js';
import type { Timers } from '../../messaging/debouncer.js';

/** Timers whose clock moves only when told to. */
function manualTimers(): Timers & { advance(ms: number): void } {
  let now = 0;
  const pending = new Map<number, { at: number; fn: () => void }>();
  let next = 1;
  return {
    now: () => now,
    setTimeout(fn, ms) {
      const id = next++;
      pending.set(id, { at: now + ms, fn });
      return id;
    },
    clearTimeout(h) {
      pending.delete(h as number);
    },
    advance(ms) {
      now += ms;
      for (const [id, t] of [...pending]) {
        if (t.at > now) continue;
        pending.delete(id);
        t.fn();
      }
    },
  };
}

const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

describe('SendBudget', () => {
  it('grants while the bytes fit, then makes later requests wait in order until bytes are given back', async () => {
    const budget = new SendBudget(100, 10_000, manualTimers());
    const granted: string[] = [];
    const releases = new Map<string, Release>();
    const ask = (name: string, bytes: number) =>
      void budget.acquire(bytes).then((r) => {
        granted.push(name);
        releases.set(name, r);
      });
    ask('a', 60);
    ask('b', 30);
    ask('c', 30); // 120 > 100: waits
    ask('d', 5); // fits, but waits behind c (first come, first served)
    await tick();
    assert.deepEqual(granted, ['a', 'b']);
    assert.equal(budget.bytesInFlight, 90);
    assert.equal(budget.waiters, 2);
    releases.get('a')!();
    releases.get('a')!(); // a second call gives nothing back twice
    await tick();
    assert.deepEqual(granted, ['a', 'b', 'c', 'd']);
    assert.equal(budget.bytesInFlight, 65);
  });

  it('grants a request larger than the whole budget once nothing else is in flight', async () => {
    const budget = new SendBudget(10, 10_000, manualTimers());
    const small = await budget.acquire(5);
    let big: Release | undefined;
    void budget.acquire(50).then((r) => (big = r));
    await tick();
    assert.equal(big, undefined, 'waits while 5 bytes are in flight');
    small();
    await tick();
    assert.ok(big, 'granted alone');
    assert.equal(budget.bytesInFlight, 50);
  });

  it('gives back a grant held longer than the hold limit (a proxy that stopped reading)', async () => {
    const timers = manualTimers();
    const budget = new SendBudget(10, 1000, timers);
    await budget.acquire(10); // never given back by its holder
    let next: Release | undefined;
    void budget.acquire(10).then((r) => (next = r));
    await tick();
    assert.equal(next, undefined);
    timers.advance(999);
    await tick();
    assert.equal(next, undefined, 'not before the limit');
    timers.advance(1);
    await tick();
    assert.ok(next, 'granted once the stuck grant expired');
    assert.equal(budget.bytesInFlight, 10);
  });

  it('keeps counting grants held past the hold limit, up to the budget again: what is held never exceeds twice the budget', async () => {
    const timers = manualTimers();
    const budget = new SendBudget(10, 1000, timers);
    const granted: number[] = [];
    const releases: Release[] = [];
    for (let i = 0; i < 6; i++) {
      void budget.acquire(5).then((r) => {
        granted.push(i);
        releases[i] = r;
      });
    }
    await tick();
    assert.deepEqual(granted, [0, 1], 'the budget in flight');
    timers.advance(1000); // 0 and 1 held past the limit: 2 and 3 may go
    await tick();
    assert.deepEqual(granted, [0, 1, 2, 3]);
    assert.equal(budget.bytesInFlight, 10);
    assert.equal(budget.bytesOverdue, 10);
    timers.advance(1000); // 2 and 3 past the limit too: held past it is full, nothing more goes
    await tick();
    assert.deepEqual(granted, [0, 1, 2, 3], 'nothing beyond twice the budget held');
    assert.equal(budget.bytesInFlight, 0);
    assert.equal(budget.bytesOverdue, 20);
    timers.advance(60_000);
    await tick();
    assert.deepEqual(granted, [0, 1, 2, 3], 'however long they are held');
    releases[0]!(); // flushed (or its stream closed): room for one more
    releases[0]!();
    await tick();
    assert.deepEqual(granted, [0, 1, 2, 3, 4]);
    assert.equal(budget.bytesOverdue, 15);
    for (const i of [1, 2, 3, 4]) releases[i]!();
    await tick();
    assert.deepEqual(granted, [0, 1, 2, 3, 4, 5]);
    releases[5]!();
    assert.equal(budget.bytesInFlight + budget.bytesOverdue, 0);
  });

  it('evicts the oldest grants held past the limit, once each, when what is held is full and a write waits', async () => {
    const timers = manualTimers();
    const budget = new SendBudget(10, 1000, timers);
    const granted: number[] = [];
    const releases: Release[] = [];
    const evicted: number[] = [];
    const ask = (i: number, evictable: boolean): void => {
      void budget.acquire(5, evictable ? () => { evicted.push(i); releases[i]!(); } : undefined).then((r) => {
        granted.push(i);
        releases[i] = r;
      });
    };
    ask(0, true);
    ask(1, false); // a grant that may not be evicted stays
    await tick();
    timers.advance(1000); // 0 and 1 held past the limit
    ask(2, true);
    ask(3, true);
    await tick();
    assert.deepEqual(granted, [0, 1, 2, 3]);
    assert.deepEqual(evicted, [], 'room enough: nothing evicted');
    timers.advance(1000); // 2 and 3 past the limit too: what is held is full
    ask(4, true);
    await tick();
    assert.deepEqual(evicted, [0], 'the oldest evictable one, enough for the write');
    assert.deepEqual(granted, [0, 1, 2, 3, 4]);
    ask(5, true);
    ask(6, true);
    await tick();
    assert.deepEqual(granted, [0, 1, 2, 3, 4, 5], '4 is in flight, not past the limit: 6 waits (within the budget in flight)');
    assert.deepEqual(evicted, [0, 2], 'then the next oldest, never 1');
    releases[4]!();
    releases[5]!();
    await tick();
    assert.deepEqual(granted, [0, 1, 2, 3, 4, 5, 6]);
    for (const i of [1, 3, 6]) releases[i]!();
    assert.equal(budget.bytesInFlight + budget.bytesOverdue, 0);
  });

  it('rejects a budget that is not a positive integer', () => {
    assert.throws(() => new SendBudget(0), /positive integer/);
    assert.throws(() => new SendBudget(1.5), /positive integer/);
  });
});
