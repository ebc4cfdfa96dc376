import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { CachedResource, ResourceMap } from '../cache/types.js';
import { KnownVersions } from './known-versions.js';

function map(entries: Record<string, string>): ResourceMap {
  return new Map(Object.entries(entries).map(([name, version]) => [name, { name, version } as CachedResource]));
}

function held(known: KnownVersions): Record<string, string> {
  return Object.fromEntries([...known.keys()].sort().map((name) => [name, known.get(name)!]));
}

describe('KnownVersions', () => {
  it('holds what was set and deleted before any rebase', () => {
    const known = new KnownVersions(() => true);
    known.set('a', '1');
    known.set('b', '2');
    known.delete('a');
    assert.deepEqual(held(known), { b: '2' });
    assert.equal(known.has('a'), false);
  });

  it('after a rebase holds the covered resources of the map, at its versions, with nothing of its own', () => {
    const names = new Set(['a', 'c']);
    const known = new KnownVersions((name) => names.has(name));
    known.set('x', '9');
    known.rebase(map({ a: '1', b: '2', c: '3' }));
    assert.deepEqual(held(known), { a: '1', c: '3' });
    assert.equal(known.get('b'), undefined, 'not covered: not held');
    assert.equal(known.get('x'), undefined, 'what was held before the rebase is gone');
    assert.equal(known.differenceCount, 0);
  });

  it('keeps only what differs from the base', () => {
    const known = new KnownVersions(() => true);
    known.rebase(map({ a: '1', b: '2' }));
    known.set('a', '1');
    assert.equal(known.differenceCount, 0, 'the base version: no difference');
    known.set('a', '5');
    known.delete('b');
    known.set('c', '7');
    assert.deepEqual(held(known), { a: '5', c: '7' });
    known.set('a', '1');
    known.delete('c');
    assert.deepEqual(held(known), { a: '1' });
    assert.equal(known.differenceCount, 1, 'b, deleted from the base');
  });

  it('a name the subscription covers after a delete stays not held until set', () => {
    const names = new Set<string>();
    const known = new KnownVersions((name) => names.has(name));
    known.rebase(map({ a: '1' }));
    known.delete('a'); // what the stream does before it subscribes a name
    names.add('a');
    assert.equal(known.has('a'), false);
    known.set('a', '1');
    assert.equal(known.get('a'), '1');
    assert.equal(known.differenceCount, 0);
  });
});
