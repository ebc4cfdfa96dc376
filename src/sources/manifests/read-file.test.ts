import assert from 'node:assert/strict';
import { mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { describeInvalidUtf8, readSettledManifestFile } from './read-file.js';

/** `promise`, or a rejection naming `what` after a generous `ms`. */
function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what}: not done after ${ms} ms`)), ms)));
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

describe('readSettledManifestFile', () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'trellis-read-file-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('counts the quiet period from the modification: a file almost settled when first read is taken once settled, not a whole period later', async () => {
    const file = path.join(dir, 'almost.yaml');
    await writeFile(file, 'kind: ServiceAccount\n');
    const { mtimeMs } = await stat(file);
    const settleMs = 60_000;
    // A clock on which the file was modified 40 ms short of the quiet period when first read.
    const startedAt = Date.now();
    const now = (): number => mtimeMs + settleMs - 40 + (Date.now() - startedAt);
    const read = await within(readSettledManifestFile(file, 1024, settleMs, 10, now), 10_000, 'the read');
    assert.equal(read.status, 'ok');
    assert.equal(read.status === 'ok' && read.text, 'kind: ServiceAccount\n');
  });

  it('waits at most the quiet period between reads when the modification time is in the future (clock skew), and takes two reads that agree', async () => {
    const file = path.join(dir, 'skewed.yaml');
    await writeFile(file, 'kind: ServiceAccount\n');
    const { mtimeMs } = await stat(file);
    const read = await within(readSettledManifestFile(file, 1024, 50, 10, () => mtimeMs - 3_600_000), 10_000, 'the read');
    assert.equal(read.status, 'ok');
  });
});

describe('describeInvalidUtf8', () => {
  it('names the first invalid sequence: its byte, line, column (bytes) and byte offset', () => {
    assert.equal(describeInvalidUtf8(Buffer.from([0x61, 0x0a, 0x62, 0x63, 0xff, 0x0a])), 'not valid UTF-8: byte 0xff at line 2, column 3 (byte offset 4)');
    // Latin-1 "é" (0xe9) followed by ASCII: a lead byte without its continuation.
    assert.equal(describeInvalidUtf8(Buffer.from('name: caf\xe9 x\n', 'latin1')), 'not valid UTF-8: byte 0xe9 at line 1, column 10 (byte offset 9)');
    // An overlong "/" (0xc0 0xaf), a UTF-16 surrogate (0xed 0xa0 0x80), a sequence cut short by the end.
    assert.equal(describeInvalidUtf8(Buffer.from([0xe2, 0x82, 0xac, 0xc0, 0xaf])), 'not valid UTF-8: byte 0xc0 at line 1, column 4 (byte offset 3)');
    assert.equal(describeInvalidUtf8(Buffer.from([0x0a, 0x0a, 0xed, 0xa0, 0x80])), 'not valid UTF-8: byte 0xed at line 3, column 1 (byte offset 2)');
    assert.equal(describeInvalidUtf8(Buffer.from([0x61, 0xf0, 0x9f, 0x98])), 'not valid UTF-8: byte 0xf0 at line 1, column 2 (byte offset 1)');
  });
});
