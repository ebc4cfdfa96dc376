import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Lifecycle, StartError, StopError } from './lifecycle.js';

/** A lifecycle whose parts write what happens to `events`. */
function recorded(options: { stopTimeoutMs?: number } = {}) {
  const events: string[] = [];
  const stopErrors: string[] = [];
  const lifecycle = new Lifecycle({ ...options, onStopError: (part, error) => stopErrors.push(`${part}: ${error.message}`) });
  const part = (name: string) =>
    lifecycle.start(
      name,
      async () => {
        events.push(`start ${name}`);
        return name.toUpperCase();
      },
      (value) => void events.push(`stop ${name} (${value})`),
    );
  return { lifecycle, events, stopErrors, part };
}

describe('Lifecycle', () => {
  it('starts parts in order, returns what each start returned, and stops them in reverse order', async () => {
    const { lifecycle, events, part } = recorded();
    assert.equal(await part('store'), 'STORE');
    assert.equal(await part('source'), 'SOURCE');
    assert.equal(await part('server'), 'SERVER');
    assert.deepEqual(lifecycle.started, ['store', 'source', 'server']);
    await lifecycle.stop();
    assert.deepEqual(events, ['start store', 'start source', 'start server', 'stop server (SERVER)', 'stop source (SOURCE)', 'stop store (STORE)']);
    assert.deepEqual(lifecycle.started, []);
  });

  it('stops once: a second stop, also one made while the first runs, stops nothing again', async () => {
    const { lifecycle, events, part } = recorded();
    await part('a');
    await part('b');
    const first = lifecycle.stop();
    const second = lifecycle.stop();
    assert.equal(first, second);
    await Promise.all([first, second]);
    await lifecycle.stop();
    assert.deepEqual(events.filter((e) => e.startsWith('stop')), ['stop b (B)', 'stop a (A)']);
  });

  it('unwinds what started when a part fails to start, and the error names that part', async () => {
    const { lifecycle, events, part } = recorded();
    await part('operations server');
    await part('certificate manager');
    const cause = new Error('cannot listen on --xds-address 127.0.0.1:1: EADDRINUSE');
    const failed = lifecycle.start('ADS server', () => {
      throw cause;
    }, () => void events.push('stop ADS server'));
    await assert.rejects(failed, (err: unknown) => {
      assert.ok(err instanceof StartError);
      assert.equal(err.part, 'ADS server');
      assert.equal(err.message, 'ADS server: cannot listen on --xds-address 127.0.0.1:1: EADDRINUSE');
      assert.equal(err.cause, cause);
      return true;
    });
    assert.deepEqual(events, ['start operations server', 'start certificate manager', 'stop certificate manager (CERTIFICATE MANAGER)', 'stop operations server (OPERATIONS SERVER)']);
    assert.equal(lifecycle.stopping, true);
    await lifecycle.stop();
    assert.equal(events.length, 4, 'stop after the unwind stops nothing again');
    await assert.rejects(part('late'), /late: not started/);
    assert.ok(!events.includes('start late'));
  });

  it('an async start that rejects unwinds the same way', async () => {
    const { lifecycle, events, part } = recorded();
    await part('a');
    await assert.rejects(
      lifecycle.start('b', async () => {
        await new Promise((resolve) => setImmediate(resolve));
        throw new Error('no');
      }),
      (err: unknown) => err instanceof StartError && err.part === 'b' && err.message === 'b: no',
    );
    assert.deepEqual(events, ['start a', 'stop a (A)']);
  });

  it('a stop that throws does not keep the others from stopping, and stop names it afterwards', async () => {
    const { lifecycle, events, stopErrors, part } = recorded();
    await part('first');
    await lifecycle.start('breaks', () => undefined, () => {
      throw new Error('socket already closed');
    });
    await lifecycle.start('rejects', () => undefined, async () => Promise.reject(new Error('lease not released')));
    await part('last');
    await assert.rejects(lifecycle.stop(), (err: unknown) => {
      assert.ok(err instanceof StopError);
      assert.deepEqual(err.parts, ['rejects', 'breaks']);
      assert.match(err.message, /rejects: lease not released; breaks: socket already closed/);
      return true;
    });
    assert.deepEqual(events.filter((e) => e.startsWith('stop')), ['stop last (LAST)', 'stop first (FIRST)']);
    assert.deepEqual(stopErrors, ['rejects: lease not released', 'breaks: socket already closed']);
  });

  it('a stop that hangs is left after the time-out and the next part stops', async () => {
    const { lifecycle, events, stopErrors, part } = recorded({ stopTimeoutMs: 20 });
    await part('first');
    await lifecycle.start('hangs', () => undefined, () => new Promise(() => undefined));
    await assert.rejects(lifecycle.stop(), /hangs: did not stop within 20 ms/);
    assert.deepEqual(events.filter((e) => e.startsWith('stop')), ['stop first (FIRST)']);
    assert.deepEqual(stopErrors, ['hangs: did not stop within 20 ms']);
  });

  it('a failing stop during an unwind does not hide the start error', async () => {
    const { lifecycle, events, stopErrors, part } = recorded();
    await part('a');
    await lifecycle.start('b', () => undefined, () => {
      throw new Error('b would not stop');
    });
    await assert.rejects(
      lifecycle.start('c', () => {
        throw new Error('c is broken');
      }),
      (err: unknown) => err instanceof StartError && err.part === 'c',
    );
    assert.deepEqual(events, ['start a', 'stop a (A)']);
    assert.deepEqual(stopErrors, ['b: b would not stop']);
  });

  it('a part that finishes starting after stop began is stopped too, and its start rejects', async () => {
    const { lifecycle, events, part } = recorded();
    await part('a');
    let finish!: () => void;
    const slow = lifecycle.start(
      'slow',
      () => new Promise<string>((resolve) => (finish = () => resolve('SLOW'))),
      (value) => void events.push(`stop slow (${value})`),
    );
    await lifecycle.stop();
    finish();
    await assert.rejects(slow, (err: unknown) => err instanceof StartError && err.part === 'slow' && /stopped while starting/.test(err.message));
    assert.deepEqual(events, ['start a', 'stop a (A)', 'stop slow (SLOW)']);
  });
});
