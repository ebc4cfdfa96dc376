/**
 * Manifest files that are not UTF-8: the loader must report them (file, line, column and byte
 * offset of the first invalid sequence) and keep the objects the file had, never decode them
 * with replacement characters (a name `bookst\uFFFDre` would replace `bookstore`); `trellis
 * validate` exits 1 on one. A UTF-8 byte order mark is fine.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { cp, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { pino } from 'pino';
import { ManifestsSource } from '../src/sources/manifests/manifests-source.js';
import { formatManifestError } from '../src/sources/manifests/parse.js';
import { ObjectStore } from '../src/store/object-store.js';

const CLI = path.resolve(import.meta.dirname, 'helpers/cli-main.ts');
const EXAMPLE = path.resolve(import.meta.dirname, '../examples/bookstore');

const serviceAccount = (name: string): string => `apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: ${name}\n  namespace: bookstore\n`;
/** {@link serviceAccount} with `name`'s bytes, which may be anything. */
const serviceAccountBytes = (name: Buffer): Buffer => Buffer.concat([Buffer.from('apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: '), name, Buffer.from('\n  namespace: bookstore\n')]);

function validate(dir: string): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, ['--import', 'tsx', CLI, 'validate', dir], { encoding: 'utf8', timeout: 60_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? ((error as { code?: number }).code ?? null) : 0, out: stdout + stderr });
    });
  });
}

describe('manifests that are not UTF-8', () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 's10h-utf8-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('reports a file turned invalid and keeps its previous objects; a byte order mark is fine', async () => {
    const objects = new ObjectStore();
    const watched = new ManifestsSource({ dir, store: objects, logger: pino({ level: 'silent' }), watch: false, settleMs: 0 });
    try {
      await writeFile(path.join(dir, 'a.yaml'), serviceAccount('bookstore'));
      await writeFile(path.join(dir, 'bom.yaml'), Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(serviceAccount('bom'))]));
      await watched.start();
      assert.deepEqual(watched.errors().map(formatManifestError), []);
      assert.ok(objects.get('ServiceAccount', 'bookstore', 'bookstore'));
      assert.ok(objects.get('ServiceAccount', 'bookstore', 'bom'), 'a file with a UTF-8 byte order mark is read');

      // "bookstore" with its "o" in Latin-1's "ö" (0xf6): not UTF-8.
      await writeFile(path.join(dir, 'a.yaml'), serviceAccountBytes(Buffer.from('bookst\xf6re', 'latin1')));
      await writeFile(path.join(dir, 'new.yaml'), serviceAccountBytes(Buffer.from([0x62, 0xff])));
      await watched.rescan();
      assert.deepEqual(watched.errors().map(formatManifestError), [
        `${path.join(dir, 'a.yaml')}:1: cannot read the file (not valid UTF-8: byte 0xf6 at line 4, column 15 (byte offset 60)); keeping its previous objects`,
        `${path.join(dir, 'new.yaml')}:1: cannot read the file (not valid UTF-8: byte 0xff at line 4, column 10 (byte offset 55))`,
      ]);
      assert.ok(objects.get('ServiceAccount', 'bookstore', 'bookstore'), 'the objects the file had stay');
      assert.deepEqual(objects.list('ServiceAccount').map((o) => o.metadata.name).sort(), ['bom', 'bookstore'], 'nothing decoded with replacement characters');

      await writeFile(path.join(dir, 'a.yaml'), serviceAccount('bookstore'));
      await rm(path.join(dir, 'new.yaml'));
      await watched.rescan();
      assert.deepEqual(watched.errors().map(formatManifestError), []);
    } finally {
      await watched.stop();
    }
  });

  it('trellis validate exits 1 naming the file and where, also when the bytes are in a free-text field', async () => {
    const bad = await mkdtemp(path.join(tmpdir(), 's10h-utf8-validate-'));
    try {
      await cp(EXAMPLE, bad, { recursive: true });
      assert.equal((await validate(bad)).code, 0, 'the example is clean');
      // An annotation in Windows-1252 ("caf\xe9"): no name check sees it.
      await writeFile(
        path.join(bad, 'notes.yaml'),
        Buffer.concat([Buffer.from('apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: notes\n  namespace: bookstore\n  annotations:\n    note: caf'), Buffer.from([0xe9]), Buffer.from('\n')]),
      );
      const r = await validate(bad);
      assert.equal(r.code, 1, r.out);
      assert.match(r.out, /notes\.yaml:1: cannot read the file \(not valid UTF-8: byte 0xe9 at line 7, column 14 \(byte offset 111\)\)/);
    } finally {
      await rm(bad, { recursive: true, force: true });
    }
  });
});
