import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ObjectStore, stableStringify } from './object-store.js';
import type { KubeObject, Service } from './objects.js';
import type { ObjectChange } from './store.js';

function svc(namespace: string, name: string, port = 80): Service {
  return { apiVersion: 'v1', kind: 'Service', metadata: { name, namespace }, spec: { ports: [{ port }] } };
}
function ns(name: string): KubeObject {
  return { apiVersion: 'v1', kind: 'Namespace', metadata: { name } };
}
function summary(changes: readonly ObjectChange[]): string[] {
  return changes.map((c) => `${c.oldObject ? (c.newObject ? 'changed' : 'deleted') : 'added'} ${c.kind}/${c.namespace ?? ''}/${c.name}`);
}

describe('ObjectStore', () => {
  it('replaceAll adds, changes and deletes, emitting one batch each time', () => {
    const store = new ObjectStore();
    const batches: string[][] = [];
    store.onChange((changes) => batches.push(summary(changes)));

    store.replaceAll('a', [svc('bookstore', 'bookstore'), svc('bookstore', 'bookstore-v1'), ns('bookstore')]);
    assert.deepEqual(batches, [['added Namespace//bookstore', 'added Service/bookstore/bookstore', 'added Service/bookstore/bookstore-v1']]);

    store.replaceAll('a', [svc('bookstore', 'bookstore', 14001), ns('bookstore'), svc('bookstore', 'bookstore-v2')]);
    assert.deepEqual(batches[1], ['changed Service/bookstore/bookstore', 'deleted Service/bookstore/bookstore-v1', 'added Service/bookstore/bookstore-v2']);
    assert.equal(store.get<Service>('Service', 'bookstore', 'bookstore')?.spec.ports?.[0].port, 14001);
    assert.equal(store.get('Service', 'bookstore', 'bookstore-v1'), undefined);
    assert.equal(store.revision, 2);
  });

  it('emits nothing when the content is the same, whatever the key order', () => {
    const store = new ObjectStore();
    let calls = 0;
    store.onChange(() => calls++);
    store.replaceAll('a', [svc('x', 'a')]);
    const reordered: KubeObject = { spec: { ports: [{ port: 80 }] }, metadata: { namespace: 'x', name: 'a' }, kind: 'Service', apiVersion: 'v1' };
    assert.deepEqual(store.replaceAll('a', [reordered]), []);
    assert.equal(calls, 1);
    assert.equal(stableStringify({ b: 1, a: [1, { d: 2, c: undefined }] }), '{"a":[1,{"d":2}],"b":1}');
  });

  it('keeps sources apart: replacing one source does not delete another source\'s objects', () => {
    const store = new ObjectStore();
    store.replaceAll('a', [svc('x', 'a1')]);
    store.replaceAll('b', [svc('x', 'b1')]);
    const changes = store.replaceAll('a', []);
    assert.deepEqual(summary(changes), ['deleted Service/x/a1']);
    assert.deepEqual(store.list('Service').map((o) => o.metadata.name), ['b1']);
    assert.equal(store.sourceOf('Service', 'x', 'b1'), 'b');
  });

  it('lists sorted by namespace then name, per namespace, and caches until the kind changes', () => {
    const store = new ObjectStore();
    store.replaceAll('a', [svc('b', 'z'), svc('a', 'y'), svc('b', 'a'), ns('n1')]);
    const first = store.list('Service');
    assert.deepEqual(first.map((o) => `${o.metadata.namespace}/${o.metadata.name}`), ['a/y', 'b/a', 'b/z']);
    assert.deepEqual(store.list('Service', 'b').map((o) => o.metadata.name), ['a', 'z']);
    assert.equal(store.list('Service'), first, 'cached');
    store.upsert('a', ns('n2'));
    assert.equal(store.list('Service'), first, 'other kind changed: still cached');
    store.upsert('a', svc('a', 'x'));
    assert.notEqual(store.list('Service'), first);
    assert.deepEqual(store.list('Service').map((o) => o.metadata.name), ['x', 'y', 'a', 'z']);
    assert.deepEqual(store.list('Pod'), []);
  });

  it('keeps a namespace\'s list (the same array) while only other namespaces change', () => {
    const store = new ObjectStore();
    store.replaceAll('a', [svc('a', 'x'), svc('b', 'y')]);
    const [inA, inB] = [store.list('Service', 'a'), store.list('Service', 'b')];
    store.replaceAll('a', [svc('a', 'x', 81), svc('b', 'y')]);
    assert.equal(store.list('Service', 'b'), inB, 'b unchanged: same array');
    assert.notEqual(store.list('Service', 'a'), inA);
    assert.deepEqual(store.list('Service', 'a').map((o) => (o as Service).spec.ports?.[0]?.port), [81]);
    store.delete('Service', 'b', 'y');
    assert.deepEqual(store.list('Service', 'b'), []);
    assert.deepEqual(store.list('Service').map((o) => o.metadata.name), ['x']);
  });

  it('upsert and delete emit single changes; cluster-scoped kinds ignore a namespace', () => {
    const store = new ObjectStore();
    const batches: string[][] = [];
    store.onChange((c) => batches.push(summary(c)));
    store.upsert('k8s', { ...ns('bookstore'), metadata: { name: 'bookstore', namespace: 'ignored' } });
    assert.ok(store.get('Namespace', undefined, 'bookstore'));
    assert.ok(store.get('Namespace', 'whatever', 'bookstore'));
    assert.equal(store.upsert('k8s', ns('bookstore')), undefined);
    store.delete('Namespace', undefined, 'bookstore');
    assert.equal(store.delete('Namespace', undefined, 'bookstore'), undefined);
    assert.deepEqual(batches, [['added Namespace//bookstore'], ['deleted Namespace//bookstore']]);
  });

  it('freezes stored objects and unsubscribes listeners', () => {
    const store = new ObjectStore();
    let calls = 0;
    const off = store.onChange(() => calls++);
    store.upsert('a', svc('x', 'a'));
    const stored = store.get<Service>('Service', 'x', 'a');
    assert.ok(stored && Object.isFrozen(stored.spec.ports));
    assert.throws(() => {
      (stored.spec.ports as { port: number }[])[0].port = 1;
    }, TypeError);
    off();
    off();
    store.upsert('a', svc('x', 'b'));
    assert.equal(calls, 1);
  });
});
