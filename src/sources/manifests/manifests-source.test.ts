import { afterEach, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, mkdir, rename, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { ObjectStore } from '../../store/object-store.js';
import type { TrafficSplit } from '../../store/objects.js';
import type { ObjectChange } from '../../store/store.js';
import { ManifestsSource } from './manifests-source.js';
import { formatManifestError } from './parse.js';

const logger = pino({ level: 'silent' });

function serviceAccount(name: string, namespace = 'bookstore'): string {
  return `apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: ${name}\n  namespace: ${namespace}\n`;
}
function split(v1: number | string, v2: number | string): string {
  return `apiVersion: split.smi-spec.io/v1alpha2\nkind: TrafficSplit\nmetadata:\n  name: bookstore-split\n  namespace: bookstore\nspec:\n  service: bookstore.bookstore\n  backends:\n  - service: bookstore-v1\n    weight: ${v1}\n  - service: bookstore-v2\n    weight: ${v2}\n`;
}
function weights(store: ObjectStore): number[] | undefined {
  return store.get<TrafficSplit>('TrafficSplit', 'bookstore', 'bookstore-split')?.spec.backends?.map((b) => b.weight);
}

/** Resolves with the first batch of store changes for which `predicate` holds; rejects after a generous timeout. */
function nextChange(store: ObjectStore, predicate: (changes: readonly ObjectChange[]) => boolean, timeoutMs = 10_000): Promise<readonly ObjectChange[]> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      off();
      reject(new Error('no matching store change'));
    }, timeoutMs);
    const off = store.onChange((changes) => {
      if (!predicate(changes)) return;
      clearTimeout(timer);
      off();
      resolve(changes);
    });
  });
}
const touches = (name: string) => (changes: readonly ObjectChange[]) => changes.some((c) => c.name === name);

describe('ManifestsSource', () => {
  let dir: string;
  let store: ObjectStore;
  let source: ManifestsSource | undefined;

  beforeEach(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'trellis-manifests-'));
    store = new ObjectStore();
  });
  afterEach(async () => {
    await source?.stop();
    source = undefined;
    await rm(dir, { recursive: true, force: true });
  });

  it('loads every manifest file recursively, ignoring other files and dot files', async () => {
    await mkdir(path.join(dir, 'apps/nested'), { recursive: true });
    await writeFile(path.join(dir, 'a.yaml'), serviceAccount('a'));
    await writeFile(path.join(dir, 'apps/b.yml'), serviceAccount('b'));
    await writeFile(path.join(dir, 'apps/nested/c.json'), JSON.stringify({ apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'c', namespace: 'bookstore' } }));
    await writeFile(path.join(dir, 'notes.txt'), serviceAccount('txt'));
    await writeFile(path.join(dir, '.hidden.yaml'), serviceAccount('hidden'));
    source = new ManifestsSource({ dir, store, logger, watch: false });
    assert.equal(source.synced, false);
    await source.start();
    assert.equal(source.synced, true);
    assert.deepEqual(store.list('ServiceAccount').map((o) => o.metadata.name), ['a', 'b', 'c']);
    assert.equal(store.sourceOf('ServiceAccount', 'bookstore', 'a'), `manifests:${dir}`);
  });

  it('logs an ignored kind once per file and kind, not on every rescan', async () => {
    const lines: string[] = [];
    const recording = pino({ level: 'info' }, { write: (line: string) => lines.push(line) });
    await writeFile(path.join(dir, 'mysql.yaml'), 'apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: mysql}\n---\napiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: other}\n');
    source = new ManifestsSource({ dir, store, logger: recording, watch: false });
    await source.start();
    await writeFile(path.join(dir, 'mysql.yaml'), 'apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: mysql2}\n');
    await source.rescan();
    await source.rescan();
    const ignoredLines = lines.filter((l) => l.includes('ignoring kind StatefulSet'));
    assert.equal(ignoredLines.length, 1);
    assert.deepEqual(source.errors(), []);
    assert.equal(store.size, 0);
  });

  it('fails to start on a missing directory', async () => {
    source = new ManifestsSource({ dir: path.join(dir, 'missing'), store, logger, watch: false });
    await assert.rejects(source.start(), /manifests directory .*missing/);
  });

  it('keeps a file\'s previous objects while it has a YAML syntax error', async () => {
    const file = path.join(dir, 'split.yaml');
    await writeFile(file, `${serviceAccount('sa')}---\n${split(50, 50)}`);
    source = new ManifestsSource({ dir, store, logger, watch: false });
    await source.start();
    assert.deepEqual(weights(store), [50, 50]);

    // A half-written save: the split document is cut off inside a flow collection.
    await writeFile(file, `${serviceAccount('sa')}---\n${split(100, 0).replace('weight: 0', 'weight: [0')}`);
    await source.rescan();
    assert.deepEqual(weights(store), [50, 50]);
    assert.ok(store.get('ServiceAccount', 'bookstore', 'sa'));
    assert.equal(source.errors().length > 0, true);
    assert.match(formatManifestError(source.errors()[0]), /split\.yaml:\d+: YAML syntax error/);

    await writeFile(file, split(100, 0));
    await source.rescan();
    assert.deepEqual(weights(store), [100, 0]);
    assert.equal(store.get('ServiceAccount', 'bookstore', 'sa'), undefined);
    assert.deepEqual(source.errors(), []);
  });

  it('keeps the last good version of a document that becomes invalid, and reports it', async () => {
    const file = path.join(dir, 'split.yaml');
    await writeFile(file, split(50, 50));
    await writeFile(path.join(dir, 'sa.yaml'), serviceAccount('sa'));
    source = new ManifestsSource({ dir, store, logger, watch: false });
    await source.start();
    await writeFile(file, split(50, '"fifty"'));
    await source.rescan();
    assert.deepEqual(weights(store), [50, 50]);
    assert.deepEqual(source.errors().map(formatManifestError), [
      `${path.join(dir, 'split.yaml')}:12: TrafficSplit bookstore/bookstore-split: spec.backends[1].weight: must be number`,
    ]);
  });

  it('reports the same object in two files as an error in the file that sorts second', async () => {
    await writeFile(path.join(dir, 'a.yaml'), serviceAccount('sa'));
    await writeFile(path.join(dir, 'b.yaml'), `${serviceAccount('other')}---\n${serviceAccount('sa')}`);
    source = new ManifestsSource({ dir, store, logger, watch: false });
    await source.start();
    assert.deepEqual(store.list('ServiceAccount').map((o) => o.metadata.name), ['other', 'sa']);
    assert.deepEqual(source.errors().map(formatManifestError), [
      `${path.join(dir, 'b.yaml')}:7: ServiceAccount bookstore/sa: duplicate object: already defined in ${path.join(dir, 'a.yaml')}:1`,
    ]);
  });

  it('keeps watching after the directory is renamed away and back, and ignores symlink loops', async () => {
    await writeFile(path.join(dir, 'split.yaml'), split(50, 50));
    await mkdir(path.join(dir, 'loop'));
    await symlink('..', path.join(dir, 'loop', 'up'));
    await symlink(path.join(dir, 'loop'), path.join(dir, 'loop', 'self'));
    source = new ManifestsSource({ dir, store, logger });
    await source.start();
    assert.deepEqual(weights(store), [50, 50]);
    const away = `${dir}-away`;
    await rename(dir, away);
    await new Promise((r) => setTimeout(r, 1500));
    assert.deepEqual(weights(store), [50, 50], 'objects kept while the directory is gone');
    await rename(away, dir);
    await new Promise((r) => setTimeout(r, 1500));
    const changed = nextChange(store, touches('bookstore-split'));
    await writeFile(path.join(dir, 'split.yaml'), split(100, 0));
    await changed;
    assert.deepEqual(weights(store), [100, 0]);
  });

  it('watches the directory: new files add objects, edits change them, deletions remove them', async () => {
    source = new ManifestsSource({ dir, store, logger });
    await source.start();
    assert.equal(store.size, 0);

    let changed = nextChange(store, touches('bookstore-split'));
    await writeFile(path.join(dir, 'split.yaml'), split(50, 50));
    let changes = await changed;
    assert.equal(changes.find((c) => c.name === 'bookstore-split')?.oldObject, undefined);
    assert.deepEqual(weights(store), [50, 50]);

    changed = nextChange(store, touches('bookstore-split'));
    await writeFile(path.join(dir, 'split.yaml'), split(100, 0));
    changes = await changed;
    assert.ok(changes.find((c) => c.name === 'bookstore-split')?.oldObject);
    assert.deepEqual(weights(store), [100, 0]);

    // An editor's atomic save: write a temp file, rename it over the original.
    changed = nextChange(store, touches('bookstore-split'));
    await writeFile(path.join(dir, '.split.yaml.tmp'), split(0, 100));
    await rename(path.join(dir, '.split.yaml.tmp'), path.join(dir, 'split.yaml'));
    await changed;
    assert.deepEqual(weights(store), [0, 100]);

    // A new subfolder with a file.
    changed = nextChange(store, touches('nested'));
    await mkdir(path.join(dir, 'more'));
    await writeFile(path.join(dir, 'more/sa.yaml'), serviceAccount('nested'));
    await changed;
    assert.ok(store.get('ServiceAccount', 'bookstore', 'nested'));

    // A folder renamed into the directory, then a write inside it.
    const outside = await mkdtemp(path.join(tmpdir(), 'trellis-outside-'));
    try {
      await writeFile(path.join(outside, 'sa.yaml'), serviceAccount('moved-in'));
      changed = nextChange(store, touches('moved-in'));
      await rename(outside, path.join(dir, 'moved'));
      await changed;
      changed = nextChange(store, touches('written-after-move'));
      await writeFile(path.join(dir, 'moved/sa2.yaml'), serviceAccount('written-after-move'));
      await changed;
    } finally {
      await rm(outside, { recursive: true, force: true });
    }

    changed = nextChange(store, touches('bookstore-split'));
    await rm(path.join(dir, 'split.yaml'));
    changes = await changed;
    assert.equal(changes.find((c) => c.name === 'bookstore-split')?.newObject, undefined);
    assert.equal(weights(store), undefined);
    assert.ok(store.get('ServiceAccount', 'bookstore', 'nested'));
  });
});
