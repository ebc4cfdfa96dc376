import { afterEach, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { constants } from 'node:fs';
import { mkdtemp, mkdir, open, rename, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { pino } from 'pino';
import { ObjectStore } from '../../store/object-store.js';
import type { TrafficSplit } from '../../store/objects.js';
import type { ObjectChange } from '../../store/store.js';
import { ManifestsSource } from './manifests-source.js';
import { formatManifestError } from './parse.js';
import { DEFAULT_MAX_MANIFEST_BYTES } from './read-file.js';

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

/** True when `python3` with its mmap module runs here (the memory-mapped writer). */
function hasPython(): boolean {
  return spawnSync('python3', ['-c', 'import mmap'], { stdio: 'ignore' }).status === 0;
}

/**
 * A Python program that maps the file `argv[1]`, replaces `aaaa` with `cccc` through the
 * mapping and says `mapped`, then on a line from stdin replaces it with `bbbb` and says `written`.
 */
const MMAP_WRITER = [
  'import mmap, sys',
  "f = open(sys.argv[1], 'r+b'); m = mmap.mmap(f.fileno(), 0); i = m.find(b'aaaa')",
  "m[i:i + 4] = b'cccc'; print('mapped', flush=True)",
  "sys.stdin.readline(); m[i:i + 4] = b'bbbb'; print('written', flush=True)",
  'sys.stdin.readline()',
].join('\n');

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

  it('sees at a full rescan every edit since the last read, of a file or of a linked file outside the directory, even one that keeps the size', async () => {
    const outside = await mkdtemp(path.join(tmpdir(), 'trellis-manifests-target-'));
    try {
      const target = path.join(outside, 'split.yaml');
      await writeFile(target, split(50, 50));
      await symlink(target, path.join(dir, 'split.yaml'));
      await writeFile(path.join(dir, 'sa.yaml'), serviceAccount('sa'));
      source = new ManifestsSource({ dir, store, logger, watch: false });
      await source.start();
      assert.deepEqual(weights(store), [50, 50]);
      // Old enough for a full rescan to record the files' identities and skip reading them next time.
      await new Promise((resolve) => setTimeout(resolve, 1100));
      await source.rescan();
      await writeFile(target, split(60, 40));
      await writeFile(path.join(dir, 'sa.yaml'), serviceAccount('sb'));
      await source.rescan();
      assert.deepEqual(weights(store), [60, 40]);
      assert.ok(store.get('ServiceAccount', 'bookstore', 'sb'));
      assert.equal(store.get('ServiceAccount', 'bookstore', 'sa'), undefined);
      // The link pointed at another file of the same size and times: a new inode.
      const other = path.join(outside, 'other.yaml');
      await writeFile(other, split(70, 30));
      await new Promise((resolve) => setTimeout(resolve, 1100));
      await source.rescan();
      await rm(path.join(dir, 'split.yaml'));
      await symlink(other, path.join(dir, 'split.yaml'));
      await source.rescan();
      assert.deepEqual(weights(store), [70, 30]);
    } finally {
      await rm(outside, { recursive: true, force: true });
    }
  });

  it('sees within a few full rescans a file written through a shared memory mapping, which changes neither its times nor sends an event', { skip: !hasPython() }, async () => {
    const file = path.join(dir, 'sa.yaml');
    await writeFile(file, serviceAccount('aaaa'));
    // A writer that maps the file, writes once (the page fault stamps the times), then, told
    // to, writes again to the page already dirty: no time changes, no inotify event.
    const writer = spawn('python3', ['-c', MMAP_WRITER, file], { stdio: ['pipe', 'pipe', 'inherit'] });
    try {
      const said = createInterface({ input: writer.stdout })[Symbol.asyncIterator]();
      assert.equal((await said.next()).value, 'mapped');
      // Old enough for the load to record the file's identity and trust it.
      await new Promise((resolve) => setTimeout(resolve, 1100));
      source = new ManifestsSource({ dir, store, logger, watch: false });
      await source.start();
      await source.rescan();
      assert.ok(store.get('ServiceAccount', 'bookstore', 'cccc'));
      const before = await stat(file, { bigint: true });
      writer.stdin.write('again\n');
      assert.equal((await said.next()).value, 'written');
      assert.equal((await stat(file, { bigint: true })).ctimeNs, before.ctimeNs, 'the second write changed no time');
      for (let i = 0; i < 30 && !store.get('ServiceAccount', 'bookstore', 'bbbb'); i++) await source.rescan();
      assert.ok(store.get('ServiceAccount', 'bookstore', 'bbbb'), 'the content written through the mapping was never read');
    } finally {
      writer.kill();
    }
  });

  it('gives the store files written one after another while it reads them as one change: a TrafficTarget moved to another file is never gone', async () => {
    const routes = `apiVersion: specs.smi-spec.io/v1alpha4\nkind: HTTPRouteGroup\nmetadata:\n  name: routes\n  namespace: bookstore\nspec:\n  matches:\n  - name: all\n    pathRegex: .*\n`;
    const target = `apiVersion: access.smi-spec.io/v1alpha3\nkind: TrafficTarget\nmetadata:\n  name: bookstore\n  namespace: bookstore\nspec:\n  destination:\n    kind: ServiceAccount\n    name: bookstore\n    namespace: bookstore\n  sources:\n  - kind: ServiceAccount\n    name: bookbuyer\n    namespace: bookbuyer\n  rules:\n  - kind: HTTPRouteGroup\n    name: routes\n    matches: [all]\n`;
    const granted = () => store.get('TrafficTarget', 'bookstore', 'bookstore') !== undefined;
    await writeFile(path.join(dir, 'access.yaml'), `${routes}---\n${target}`);
    // A long settle: the second file is written while the first is still being read.
    source = new ManifestsSource({ dir, store, logger, debounceMs: 20, settleMs: 1000 });
    await source.start();
    assert.ok(granted());
    let revoked = 0;
    store.onChange(() => void (granted() ? undefined : revoked++));
    const moved = nextChange(store, () => store.get('HTTPRouteGroup', 'bookstore', 'moved') !== undefined);
    // A tool moving the TrafficTarget to its own file: the old file first, then the new one
    // (with a marker object, so that the change that brings it can be waited for).
    await writeFile(path.join(dir, 'access.yaml'), routes);
    await new Promise((resolve) => setTimeout(resolve, 150));
    await writeFile(path.join(dir, 'target.yaml'), `${target}---\n${routes.replace('name: routes', 'name: moved')}`);
    await moved;
    assert.ok(granted());
    assert.equal(revoked, 0, 'the store was without the TrafficTarget in between (a push revoking the access it grants)');
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
      `${path.join(dir, 'split.yaml')}:12: TrafficSplit bookstore/bookstore-split: spec.backends[1].weight: must be a number, not a string`,
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

  it('refuses a file over the size limit, naming it, reading no more than the limit, and keeps its previous objects', async () => {
    const file = path.join(dir, 'big.yaml');
    const withAnnotation = (name: string, bytes: number): string => `${serviceAccount(name)}  annotations:\n    big: "${'x'.repeat(bytes)}"\n`;
    await writeFile(file, withAnnotation('sa', 100));
    await writeFile(path.join(dir, 'other.yaml'), serviceAccount('other'));
    source = new ManifestsSource({ dir, store, logger, watch: false, maxFileBytes: 4096, settleMs: 0 });
    await source.start();
    assert.ok(store.get('ServiceAccount', 'bookstore', 'sa'));
    await writeFile(file, withAnnotation('sa2', 5000));
    await source.rescan();
    assert.deepEqual(source.errors().map(formatManifestError), [
      `${file}:1: is 5.0 KiB, larger than the limit of 4 KiB (--max-manifest-size): not read; keeping its previous objects`,
    ]);
    assert.ok(store.get('ServiceAccount', 'bookstore', 'sa'), 'the previous objects stay');
    assert.equal(store.get('ServiceAccount', 'bookstore', 'sa2'), undefined);
    assert.ok(store.get('ServiceAccount', 'bookstore', 'other'));
    await writeFile(file, withAnnotation('sa', 100)); // back as it was: the error is over
    await source.rescan();
    assert.deepEqual(source.errors(), []);
    await writeFile(file, withAnnotation('sa2', 100));
    await source.rescan();
    assert.deepEqual(source.errors(), []);
    assert.ok(store.get('ServiceAccount', 'bookstore', 'sa2'));
    // A file whose size says 0 but that holds more (as one that grew after fstat): read up to the limit only.
    await symlink('/proc/self/smaps', path.join(dir, 'proc.yaml'));
    await source.rescan();
    assert.deepEqual(source.errors().map(formatManifestError), [
      `${path.join(dir, 'proc.yaml')}:1: is more than 4 KiB, larger than the limit of 4 KiB (--max-manifest-size): not read`,
    ]);
  });

  it('bounds the manifests loaded, all files together: the files past the bound, in path order, are errors naming them and keep their previous objects', async () => {
    const withAnnotation = (name: string, bytes: number): string => `${serviceAccount(name)}  annotations:\n    pad: "${'x'.repeat(bytes)}"\n`;
    const file = (name: string): string => path.join(dir, name);
    // Three files of 1006 bytes fit in 3500 bytes, four do not.
    await writeFile(file('a.yaml'), withAnnotation('a', 900));
    await writeFile(file('b.yaml'), withAnnotation('b', 900));
    await writeFile(file('c.yaml'), withAnnotation('c', 900));
    await writeFile(file('d.yaml'), withAnnotation('d', 900));
    source = new ManifestsSource({ dir, store, logger, watch: false, maxTotalBytes: 3500, settleMs: 0 });
    await source.start();
    const names = (): string[] => store.list('ServiceAccount').map((o) => o.metadata.name);
    assert.deepEqual(names(), ['a', 'b', 'c'], 'the first files in path order');
    assert.deepEqual(source.errors().map(formatManifestError), [
      `${file('d.yaml')}:1: is 1006 bytes: loading it would bring the manifests loaded to 3.9 KiB, more than the limit of 3.4 KiB for all files (--max-manifests-total-size): not loaded`,
    ]);
    // A file that grows past the bound keeps its previous objects; one that sorts before it and shrinks makes room first.
    await writeFile(file('b.yaml'), withAnnotation('b2', 1900));
    await source.rescan();
    assert.deepEqual(names(), ['a', 'b', 'c']);
    assert.deepEqual(source.errors().map(formatManifestError), [
      `${file('b.yaml')}:1: is 2.0 KiB: loading it would bring the manifests loaded to 3.9 KiB, more than the limit of 3.4 KiB for all files (--max-manifests-total-size): not loaded; keeping its previous objects`,
      `${file('d.yaml')}:1: is 1006 bytes: loading it would bring the manifests loaded to 3.9 KiB, more than the limit of 3.4 KiB for all files (--max-manifests-total-size): not loaded`,
    ]);
    // Room made (a file deleted): the refused files are read again and load, in path order.
    await rm(file('c.yaml'));
    await source.rescan();
    assert.deepEqual(names(), ['a', 'b2']);
    assert.equal(source.errors().length, 1);
    assert.match(formatManifestError(source.errors()[0]), /^.*d\.yaml:1: is 1006 bytes: loading it would bring the manifests loaded to 3\.9 KiB/);
    await writeFile(file('a.yaml'), serviceAccount('a'));
    await source.rescan();
    assert.deepEqual(names(), ['a', 'b2', 'd']);
    assert.deepEqual(source.errors(), []);
  });

  it('refuses a file over the default limit of 4 MiB at start-up, and starts', async () => {
    await writeFile(path.join(dir, 'big.yaml'), `${serviceAccount('big')}  annotations:\n    big: "${'lorem ipsum '.repeat(Math.ceil(DEFAULT_MAX_MANIFEST_BYTES / 12))}"\n`);
    await writeFile(path.join(dir, 'sa.yaml'), serviceAccount('sa'));
    source = new ManifestsSource({ dir, store, logger, watch: false, settleMs: 0 });
    await source.start();
    assert.deepEqual(source.errors().map(formatManifestError), [`${path.join(dir, 'big.yaml')}:1: is 4.0 MiB, larger than the limit of 4 MiB (--max-manifest-size): not read`]);
    assert.deepEqual(store.list('ServiceAccount').map((o) => o.metadata.name), ['sa']);
  });

  it('never blocks on a FIFO renamed over a manifest (or linked to): reports it, applies later changes, and stops', async () => {
    const fifos = [path.join(dir, '.fifo'), path.join(dir, '.fifo2'), path.join(dir, 'listed.yaml')];
    await writeFile(path.join(dir, 'a.yaml'), serviceAccount('a'));
    await writeFile(path.join(dir, 'c.yaml'), serviceAccount('c'));
    execFileSync('mkfifo', fifos.slice(0, 2));
    let stopping: Promise<unknown> | undefined;
    try {
      source = new ManifestsSource({ dir, store, logger, settleMs: 0 });
      await source.start();
      assert.ok(store.get('ServiceAccount', 'bookstore', 'a'));

      await rename(fifos[0], path.join(dir, 'a.yaml'));
      await rm(path.join(dir, 'c.yaml'));
      await symlink(fifos[1], path.join(dir, 'c.yaml'));
      const applied = nextChange(store, touches('b'));
      await writeFile(path.join(dir, 'b.yaml'), serviceAccount('b'));
      await applied;
      assert.deepEqual(source.errors().map(formatManifestError), [
        `${path.join(dir, 'a.yaml')}:1: is a FIFO, not a regular file: not read; keeping its previous objects`,
        `${path.join(dir, 'c.yaml')}:1: is a FIFO, not a regular file: not read; keeping its previous objects`,
      ]);
      assert.ok(store.get('ServiceAccount', 'bookstore', 'a'), 'the objects it had stay');
      // One found by listing the directory is reported too.
      execFileSync('mkfifo', [fifos[2]]);
      await source.rescan();
      assert.equal(source.errors().map(formatManifestError)[2], `${fifos[2]}:1: is a FIFO, not a regular file: not read`);
      let stopped = false;
      stopping = source.stop().then(() => (stopped = true));
      await Promise.race([stopping, new Promise((r) => setTimeout(r, 10_000).unref())]);
      assert.equal(stopped, true, 'stop() resolves');
    } finally {
      // Today's main blocks in open() on these, read after read: a writer that opens and closes
      // releases one; release them until the source has stopped.
      let stopped = false;
      stopping ??= source?.stop();
      source = undefined;
      void stopping?.then(() => (stopped = true));
      for (let i = 0; i < 200 && !stopped; i++) {
        for (const fifo of [path.join(dir, 'a.yaml'), fifos[1], fifos[2]]) {
          await open(fifo, constants.O_WRONLY | constants.O_NONBLOCK).then((h) => h.close(), () => undefined);
        }
        await new Promise((r) => setTimeout(r, 50));
      }
    }
  });

  it('does not take a file written in two chunks for its first chunk: no object is removed meanwhile', async () => {
    const file = path.join(dir, 'sas.yaml');
    await writeFile(file, ['a', 'b', 'c'].map((n) => serviceAccount(n)).join('---\n'));
    source = new ManifestsSource({ dir, store, logger, settleMs: 1000 });
    await source.start();
    const removed: string[] = [];
    store.onChange((changes) => {
      for (const c of changes) if (c.newObject === undefined) removed.push(c.name);
    });
    const done = nextChange(store, touches('d'));
    const handle = await open(file, 'w'); // truncates: an empty file, which is valid YAML
    try {
      await handle.write(['a', 'b'].map((n) => serviceAccount(n)).join('---\n')); // valid YAML, fewer objects
      await new Promise((r) => setTimeout(r, 300));
      await handle.write(`---\n${['c', 'd'].map((n) => serviceAccount(n)).join('---\n')}`);
    } finally {
      await handle.close();
    }
    await done;
    assert.deepEqual(store.list('ServiceAccount').map((o) => o.metadata.name), ['a', 'b', 'c', 'd']);
    assert.deepEqual(removed, []);
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
