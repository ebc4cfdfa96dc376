import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { PendingStreams } from './pending-streams.js';

class Stream {
  requestReceived = false;
  constructor(readonly name: string) {}
}

describe('PendingStreams', () => {
  it('holds at most maxPerCertificate streams of one certificate; a deleted one frees its place; plaintext streams are not counted', () => {
    const pending = new PendingStreams<Stream>(() => assert.fail('no timer should fire'), { firstRequestTimeoutMs: 60_000, maxPerCertificate: 2 });
    const a = 'AA:01';
    const b = 'BB:02';
    const [a1, a2, a3, b1] = ['a1', 'a2', 'a3', 'b1'].map((n) => new Stream(n));
    assert.equal(pending.add(a1!, a), undefined);
    assert.equal(pending.add(a2!, a), undefined);
    assert.equal(pending.add(a3!, a), 'too_many_pending_streams');
    assert.equal(pending.add(b1!, b), undefined, 'another certificate has its own count');
    for (let i = 0; i < 10; i++) assert.equal(pending.add(new Stream(`plain${i}`), undefined), undefined);
    assert.equal(pending.delete(a1!), true);
    assert.equal(pending.delete(a1!), false);
    assert.equal(pending.add(a3!, a), undefined);
    assert.deepEqual([...pending.values()].map((s) => s.name).slice(0, 3), ['a2', 'b1', 'plain0']);
    for (const s of [...pending.values()]) pending.delete(s);
    assert.equal(pending.size, 0);
  });

  it('expires a stream with no complete request after firstRequestTimeoutMs, and not one that has one', async () => {
    const expired: string[] = [];
    const pending = new PendingStreams<Stream>((s) => expired.push(s.name), { firstRequestTimeoutMs: 50, maxPerCertificate: 1 });
    const key = 'CC:03';
    const silent = new Stream('silent');
    const talking = new Stream('talking');
    pending.add(silent, key);
    pending.add(talking, undefined);
    talking.requestReceived = true;
    await new Promise((r) => setTimeout(r, 120));
    assert.deepEqual(expired, ['silent']);
    assert.deepEqual([...pending.values()].map((s) => s.name), ['talking'], 'held until admitted');
    assert.equal(pending.add(new Stream('next'), key), undefined, 'the expired stream freed its certificate place');
    for (const s of [...pending.values()]) pending.delete(s);
  });
});
