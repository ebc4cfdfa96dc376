import { isUtf8 } from 'node:buffer';
import { constants } from 'node:fs';
import { lstat, open } from 'node:fs/promises';
import { setTimeout as delay } from 'node:timers/promises';

/** The default largest manifest file read, in bytes (4 MiB; the API server caps one object at about 1.5 MB). */
export const DEFAULT_MAX_MANIFEST_BYTES = 4 * 1024 * 1024;

/**
 * The default bound on the manifests loaded from a directory, all files together, in bytes
 * (64 MiB: sixteen files at the per-file limit; OSM's demo manifests are a few hundred KiB).
 */
export const DEFAULT_MAX_MANIFESTS_TOTAL_BYTES = 64 * 1024 * 1024;

/** What reading one manifest file found. */
export type ManifestRead =
  /** The file's content (valid UTF-8; a byte order mark is kept), and its size and modification time when it was read. */
  | { readonly status: 'ok'; readonly text: string; readonly size: number; readonly mtimeMs: number }
  /** There is no such file (any more). */
  | { readonly status: 'missing' }
  /** Not a regular file (a FIFO, socket, device or directory, or a symbolic link to one): not read. */
  | { readonly status: 'not-regular'; readonly type: string }
  /** Larger than the limit: `size` is its size, or at least the bytes read when it grew while read. */
  | { readonly status: 'too-large'; readonly size: number; readonly grew: boolean }
  /**
   * Reading failed with this error code (`EACCES`, `EIO`, …), or why the content cannot be
   * taken (`not valid UTF-8: …`, see {@link describeInvalidUtf8}).
   */
  | { readonly status: 'error'; readonly code: string }
  /** Its content still changed after every re-read ({@link readSettledManifestFile}). */
  | { readonly status: 'unsettled' };

/** The kind of a non-regular file, for messages. */
function fileType(info: { isDirectory(): boolean; isFIFO(): boolean; isSocket(): boolean; isCharacterDevice(): boolean; isBlockDevice(): boolean }): string {
  if (info.isDirectory()) return 'a directory';
  if (info.isFIFO()) return 'a FIFO';
  if (info.isSocket()) return 'a socket';
  if (info.isCharacterDevice()) return 'a character device';
  if (info.isBlockDevice()) return 'a block device';
  return 'not a regular file';
}

/**
 * Reads a manifest file without ever blocking on it and with a bound: opens it with
 * `O_NONBLOCK` (opening a FIFO does not wait for a writer; a symbolic link is followed), then
 * checks the open descriptor (`fstat`, so the check and the read concern the same file): only
 * a regular file of at most `maxBytes` bytes is read, and at most `maxBytes + 1` bytes are read
 * from it, so a file that grows after the check is still bounded. The content must be UTF-8
 * (YAML 1.2 and JSON allow others, but Kubernetes manifests are UTF-8): a file that is not is
 * an `error` naming where ({@link describeInvalidUtf8}), never decoded with replacement
 * characters. Never rejects.
 * @param file the path to read.
 * @param maxBytes the largest size read, in bytes.
 */
export async function readManifestFile(file: string, maxBytes: number): Promise<ManifestRead> {
  let handle;
  try {
    handle = await open(file, constants.O_RDONLY | (constants.O_NONBLOCK ?? 0));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? String(err);
    if (code === 'ENOENT' || code === 'ENOTDIR') {
      // A symbolic link that is there but leads nowhere is an error to report, not a file removed.
      const link = await lstat(file).catch(() => undefined);
      return link?.isSymbolicLink() ? { status: 'error', code: 'a symbolic link to a file that does not exist' } : { status: 'missing' };
    }
    // Opening a Unix socket fails with ENXIO.
    if (code === 'ENXIO') return { status: 'not-regular', type: 'a socket' };
    return { status: 'error', code };
  }
  try {
    const info = await handle.stat();
    if (!info.isFile()) return { status: 'not-regular', type: fileType(info) };
    if (info.size > maxBytes) return { status: 'too-large', size: info.size, grew: false };
    const limit = maxBytes + 1;
    const chunks: Buffer[] = [];
    let total = 0;
    let chunkSize = Math.min(Math.max(info.size + 1, 64 * 1024), limit);
    while (total < limit) {
      const buffer = Buffer.allocUnsafe(Math.min(chunkSize, limit - total));
      const { bytesRead } = await handle.read(buffer, 0, buffer.length, total);
      if (bytesRead === 0) break;
      chunks.push(bytesRead === buffer.length ? buffer : buffer.subarray(0, bytesRead));
      total += bytesRead;
      chunkSize *= 2;
    }
    if (total > maxBytes) return { status: 'too-large', size: total, grew: true };
    const bytes = Buffer.concat(chunks, total);
    // Decoding invalid bytes would replace them with U+FFFD silently: a name or value would change.
    if (!isUtf8(bytes)) return { status: 'error', code: describeInvalidUtf8(bytes) };
    return { status: 'ok', text: bytes.toString('utf8'), size: total, mtimeMs: info.mtimeMs };
  } catch (err) {
    return { status: 'error', code: (err as NodeJS.ErrnoException).code ?? String(err) };
  } finally {
    await handle.close().catch(() => undefined);
  }
}

/**
 * Where the first sequence of `bytes` that is not UTF-8 (RFC 3629: no overlong form, no
 * surrogate, nothing above U+10FFFF, no sequence cut short) starts, for messages:
 * `not valid UTF-8: byte 0xff at line 3, column 5 (byte offset 41)` (line and column count from
 * 1, the column in bytes). `bytes` must hold such a sequence (`isUtf8(bytes)` false).
 */
export function describeInvalidUtf8(bytes: Uint8Array): string {
  const offset = firstInvalidUtf8(bytes);
  let line = 1;
  let lineStart = 0;
  for (let i = bytes.indexOf(0x0a); i !== -1 && i < offset; i = bytes.indexOf(0x0a, i + 1)) {
    line++;
    lineStart = i + 1;
  }
  return `not valid UTF-8: byte 0x${bytes[offset].toString(16).padStart(2, '0')} at line ${line}, column ${offset - lineStart + 1} (byte offset ${offset})`;
}

/** The offset of the first byte of `bytes` that starts a sequence that is not UTF-8 (a sequence cut short counts from its lead byte); `bytes.length` when there is none. */
function firstInvalidUtf8(bytes: Uint8Array): number {
  let i = 0;
  while (i < bytes.length) {
    const b = bytes[i];
    if (b < 0x80) {
      i++;
      continue;
    }
    // The length of the sequence and the range of its second byte (RFC 3629, section 4).
    let length: number;
    let low = 0x80;
    let high = 0xbf;
    if (b >= 0xc2 && b <= 0xdf) length = 2;
    else if (b >= 0xe0 && b <= 0xef) {
      length = 3;
      if (b === 0xe0) low = 0xa0;
      else if (b === 0xed) high = 0x9f;
    } else if (b >= 0xf0 && b <= 0xf4) {
      length = 4;
      if (b === 0xf0) low = 0x90;
      else if (b === 0xf4) high = 0x8f;
    } else return i;
    for (let k = 1; k < length; k++) {
      if (i + k >= bytes.length) return i;
      const c = bytes[i + k];
      if (c < (k === 1 ? low : 0x80) || c > (k === 1 ? high : 0xbf)) return i;
    }
    i += length;
  }
  return i;
}

/**
 * {@link readManifestFile}, waiting until a file being written is written: when the file was
 * modified less than `settleMs` ago, it is read again once its modification is `settleMs` old
 * (at most `settleMs` later, whatever a clock skew makes its modification time say), until two
 * reads find the same content, size and modification time: it is taken once it has stayed
 * unchanged for `settleMs` (a write in several chunks, or truncate then write, is not taken
 * half done). The wait counts from the modification, not from the read: the file watcher's own
 * quiet period before the first read is part of it, not added to it. After `attempts` re-reads
 * that all differ: `unsettled`.
 * @param settleMs the quiet period, in ms (0: read once).
 * @param attempts how many times to re-read at most.
 * @param now the clock, in ms since the epoch (tests).
 */
export async function readSettledManifestFile(file: string, maxBytes: number, settleMs: number, attempts = 10, now: () => number = Date.now): Promise<ManifestRead> {
  let read = await readManifestFile(file, maxBytes);
  for (let i = 0; read.status === 'ok' && now() - read.mtimeMs < settleMs; i++) {
    if (i === attempts) return { status: 'unsettled' };
    await delay(Math.min(settleMs, Math.max(1, read.mtimeMs + settleMs - now())));
    const again = await readManifestFile(file, maxBytes);
    if (again.status === 'ok' && again.text === read.text && again.size === read.size && again.mtimeMs === read.mtimeMs) break;
    read = again;
  }
  return read;
}
