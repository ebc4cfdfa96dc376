import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Debouncer, type Timers } from './debouncer.js';

/** Manual clock: timers fire only when `advance` passes their due time. */
function fakeTimers() {
  let now = 0;
  let seq = 0;
  const due = new Map<number, { at: number; fn: () => void }>();
  const timers: Timers = {
    now: () => now,
    setTimeout: (fn, ms) => {
      const id = ++seq;
      due.set(id, { at: now + ms, fn });
      return id;
    },
    clearTimeout: (h) => void due.delete(h as number),
  };
  const advance = async (ms: number) => {
    now += ms;
    for (const [id, t] of [...due.entries()].sort((a, b) => a[1].at - b[1].at)) {
      if (t.at <= now) {
        due.delete(id);
        t.fn();
      }
    }
    await new Promise((r) => setImmediate(r));
  };
  return { timers, advance };
}

const union = (a: string[] | undefined, b: string[]) => [...(a ?? []), ...b];

describe('Debouncer', () => {
  it('coalesces a burst into one batch after the quiet period', async () => {
    const { timers, advance } = fakeTimers();
    const batches: string[][] = [];
    const d = new Debouncer<string[]>({ quietMs: 100, maxDelayMs: 1000, timers }, union, (b) => void batches.push(b));
    d.push(['a']);
    await advance(50);
    d.push(['b']);
    await advance(50);
    assert.deepEqual(batches, []);
    await advance(60);
    assert.deepEqual(batches, [['a', 'b']]);
  });

  it('flushes at the max delay even while events keep coming', async () => {
    const { timers, advance } = fakeTimers();
    const batches: string[][] = [];
    const d = new Debouncer<string[]>({ quietMs: 100, maxDelayMs: 250, timers }, union, (b) => void batches.push(b));
    for (let i = 0; i < 4; i++) {
      d.push([String(i)]);
      await advance(60);
    }
    assert.deepEqual(batches, [], 'no quiet period yet at t=240');
    await advance(10);
    assert.deepEqual(batches, [['0', '1', '2', '3']], 'flushed at t=250, the max delay');
  });

  it('never drops an event that arrives during a flush', async () => {
    const { timers, advance } = fakeTimers();
    const batches: string[][] = [];
    let release: () => void = () => {};
    const d = new Debouncer<string[]>({ quietMs: 10, maxDelayMs: 100, timers }, union, async (b) => {
      batches.push(b);
      if (batches.length === 1) await new Promise<void>((r) => (release = r));
    });
    d.push(['first']);
    await advance(10);
    d.push(['second']);
    await advance(10);
    assert.deepEqual(batches, [['first']]);
    release();
    await advance(0);
    await advance(10);
    assert.deepEqual(batches, [['first'], ['second']]);
  });
});
