import { createHash } from 'node:crypto';
import type { BigIntStats } from 'node:fs';
import { readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { setImmediate as yieldToEventLoop } from 'node:timers/promises';
import { watch } from 'chokidar';
import type { FSWatcher } from 'chokidar';
import type { Logger } from 'pino';
import { objectKeyOf } from '../../store/objects.js';
import type { KubeObject } from '../../store/objects.js';
import type { StoreWriter } from '../../store/store.js';
import { systemErrorCode } from '../../util/system-error.js';
import { formatManifestError, parseManifestSteps } from './parse.js';
import type { ManifestError, ManifestWarning, ParsedManifests } from './parse.js';
import { DEFAULT_MAX_MANIFEST_BYTES, DEFAULT_MAX_MANIFESTS_TOTAL_BYTES, readSettledManifestFile } from './read-file.js';
import type { ManifestRead } from './read-file.js';

/** File name endings read as manifests. */
export const MANIFEST_EXTENSIONS: readonly string[] = ['.yaml', '.yml', '.json'];

/** Every how many root checks a full rescan runs (30 s with {@link ROOT_CHECK_INTERVAL_MS}). */
const FULL_RESCAN_EVERY_CHECKS = 30;

/**
 * How old a file's last change (its ctime) must be, in ms, when its identity is recorded for
 * that identity to vouch for its content: the kernel stamps times from a coarse clock, so a
 * file rewritten to the same size within a tick of the stat that recorded it keeps its times.
 */
const IDENTITY_TRUST_AGE_MS = 1000;

/**
 * How many full rescans in a row an unchanged identity may spare a file its read: each full
 * rescan also reads the trusted files whose turn it is ({@link identityTurn}, a fixed share of
 * them), so a change that `stat` does not show is seen within this many full rescans (5 min):
 * a write through a shared memory mapping (it changes no time once the page is dirty and sends
 * no inotify event), or a file system that keeps no ctime (FAT's is its 2 s mtime; FUSE ones).
 */
const IDENTITY_TRUSTED_FULL_RESCANS = 10;

/**
 * The longest a rescan's result may wait for the rescans queued behind it (files written one
 * after another by a tool), in ms, counted from the first one held: the store then gets it.
 */
const HOLD_MAX_MS = 1000;

/** How many files a scan reads at once. */
const READ_BATCH = 64;

/** How many bytes of files a scan reads at once (a larger file is read alone). */
const READ_BATCH_BYTES = 16 * 1024 * 1024;

/** How long parsing may hold the event loop before it lets other work run, in ms. */
const PARSE_SLICE_MS = 10;

/** How often the source checks that its root directory is still the one it watches, in ms. */
export const ROOT_CHECK_INTERVAL_MS = 1000;

/** Options of {@link ManifestsSource}. */
export interface ManifestsSourceOptions {
  /** The directory to read, recursively. Errors name files as `path.join(dir, relativePath)`. */
  dir: string;
  /** Where the objects go; the source id is `manifests:<dir>`. */
  store: StoreWriter;
  logger: Logger;
  /** Quiet period after a file-system event before rescanning, in milliseconds (default 50). */
  debounceMs?: number;
  /** Watch the directory for changes after the initial load (default true). */
  watch?: boolean;
  /**
   * The largest file read, in bytes (default {@link DEFAULT_MAX_MANIFEST_BYTES}, 4 MiB): a larger
   * one is a manifest error and is not read (it keeps the objects it had).
   */
  maxFileBytes?: number;
  /**
   * The most bytes of manifests loaded from the directory, all files together (default
   * {@link DEFAULT_MAX_MANIFESTS_TOTAL_BYTES}, 64 MiB): a file whose new content would bring
   * the total past it is a manifest error and is not parsed (it keeps the objects it had).
   */
  maxTotalBytes?: number;
  /**
   * A file modified less than this long ago is read again once its modification is this old,
   * until two reads agree, so a file being written is not taken half written; in ms (default
   * 200; 0: off). The watcher's quiet period ({@link debounceMs}) counts in it.
   */
  settleMs?: number;
}

/** What reading a file found, or that its new content of `size` bytes does not fit in the total bound. */
type JudgedRead = ManifestRead | { readonly status: 'over-budget'; readonly size: number; readonly wouldLoad: number };

/** What one file contributes, and the text it was parsed from. */
interface FileState {
  /** The text last read, or undefined if the file could never be read. */
  text: string | undefined;
  /** The size of `text` in bytes (0 without one): what the file takes of the total bound. */
  size: number;
  /** True if its new content was refused for the total bound: read again at every rescan. */
  overBudget: boolean;
  parsed: ParsedManifests | undefined;
  /** The objects the file contributes now (after the keep-last-good rules), with their lines. */
  objects: readonly KubeObject[];
  lines: readonly number[];
  /** Errors to report for this file (parse errors, or a read error). */
  errors: readonly ManifestError[];
  /**
   * What `stat` said of the file just before `text` was read ({@link fileIdentity}), when its
   * last change was old enough to vouch for the content; a full rescan does not read a file
   * whose identity is still this one. Undefined: read it at every full rescan.
   */
  identity?: string | undefined;
}

/**
 * The manifests-directory source, Trellis's embedded default: every `*.yaml`, `*.yml` and
 * `*.json` file below `dir` (recursively; names starting with `.` are skipped, as are editor
 * temp files) is parsed with `parseManifests` (a turn for the event loop every few ms
 * between documents), and the union of their valid objects
 * replaces this source's contribution to the store (`store.replaceAll('manifests:'+dir, …)`).
 * The directory is watched with chokidar; any add/change/unlink (including an editor's atomic
 * save: write a temp file, rename it over the original) triggers, after a short quiet period,
 * a rescan of the files it named. Files whose text is unchanged are not parsed again; a full
 * rescan (every 30 s, or of a folder event) does not read a file whose device, inode, size and
 * times are those seen before its last read, but for a tenth of them in turn (each file is read
 * at least every tenth full rescan: `stat` does not show a write through a memory mapping).
 *
 * Keep-last-good rules, so that proxies keep their configuration while someone is editing:
 * - A file with a YAML syntax error anywhere keeps ALL the objects it contributed before,
 *   unchanged (a half-written file is not taken as a deletion). A file never loaded before
 *   contributes the valid documents it has.
 * - A file that cannot be read (other than "no longer exists") keeps its previous objects.
 *   So does a file larger than `maxFileBytes`, or one that is not a regular file (a FIFO,
 *   socket or device, or a symbolic link to one: never opened in a way that could block).
 * - The files' content loaded, all files together, is at most `maxTotalBytes`: the files read
 *   that shrank (or were deleted) count first, then those that grew, or are new, in path
 *   order; one that does not fit in what is left is not parsed and keeps its previous objects
 *   (so a first load takes the files in path order until the bound). It is read again at
 *   every rescan, and loads once the others leave room.
 * - A file modified less than `settleMs` ago is read again once its modification is `settleMs`
 *   old, until two reads agree: a file being written (truncated, then written in chunks) is not
 *   taken half written.
 * - A document rejected by validation is skipped; if the same kind/namespace/name was loaded
 *   from this file before, that previous version is kept.
 * - A file that was deleted contributes nothing any more.
 * - The same kind/namespace/name in two files: the one in the file that sorts first (by
 *   relative path) wins; the other is an error.
 *
 * Errors and warnings (see {@link ManifestError}) are logged once when they first appear and
 * are available from {@link ManifestsSource.errors} until fixed. Documents of kinds Trellis
 * does not read are logged once per file and kind, at info level.
 */
export class ManifestsSource {
  /** The store source id: `manifests:<dir>`. */
  readonly sourceId: string;
  readonly #dir: string;
  readonly #absoluteDir: string;
  readonly #store: StoreWriter;
  readonly #logger: Logger;
  readonly #debounceMs: number;
  readonly #watch: boolean;
  readonly #maxFileBytes: number;
  readonly #maxTotalBytes: number;
  readonly #settleMs: number;
  #files = new Map<string, FileState>();
  #errors: readonly ManifestError[] = [];
  #warnings: readonly ManifestWarning[] = [];
  readonly #loggedIgnored = new Set<string>();
  #loggedProblems = new Set<string>();
  #watcher: FSWatcher | undefined;
  #rootCheck: NodeJS.Timeout | undefined;
  #checksSinceFullScan = 0;
  /** Full rescans run so far: whose turn it is to be read although its identity is unchanged. */
  #fullScans = 0;
  /** Files named by watcher events since the last rescan, or `'all'`. */
  #dirty: Set<string> | 'all' = new Set();
  #rootIno = 0;
  #rootMissing = false;
  #rootChecking = false;
  #timer: NodeJS.Timeout | undefined;
  #chain: Promise<void> = Promise.resolve();
  /** Rescans queued or running. */
  #queued = 0;
  /** When the first rescan whose result the store has not got yet was held (ms since the epoch). */
  #heldSince: number | undefined;
  #started = false;
  #stopped = false;
  #synced = false;

  /** Creates the source; nothing is read until {@link ManifestsSource.start}. */
  constructor(options: ManifestsSourceOptions) {
    this.#dir = options.dir;
    this.#absoluteDir = path.resolve(options.dir);
    this.#store = options.store;
    this.#logger = options.logger.child({ source: 'manifests', dir: options.dir });
    this.#debounceMs = options.debounceMs ?? 50;
    this.#watch = options.watch ?? true;
    this.#maxFileBytes = options.maxFileBytes ?? DEFAULT_MAX_MANIFEST_BYTES;
    this.#maxTotalBytes = options.maxTotalBytes ?? DEFAULT_MAX_MANIFESTS_TOTAL_BYTES;
    this.#settleMs = options.settleMs ?? 200;
    this.sourceId = `manifests:${options.dir}`;
  }

  /** True once the initial load has been written to the store. */
  get synced(): boolean {
    return this.#synced;
  }

  /** The current load errors (invalid documents, syntax errors, unreadable files, duplicates), by file and line. */
  errors(): readonly ManifestError[] {
    return this.#errors;
  }

  /**
   * The first current error that may hide the object `kind` `namespace`/`name` (so that the
   * store may lack it although a file holds it): one of a document of that kind whose namespace
   * and name are theirs or unknown, or one whose kind is unknown (a file that could not be read
   * or parsed, a document without a kind). Undefined when none.
   */
  errorHiding(kind: string, namespace: string, name: string): ManifestError | undefined {
    return this.#errors.find((e) => e.kind === undefined || (e.kind === kind && (e.namespace ?? namespace) === namespace && (e.name ?? name) === name));
  }

  /**
   * Where the object `kind` `namespace`/`name` loaded now comes from: its file (as errors name
   * it) and the line of its document; undefined when no file contributes it. Linear in the objects loaded.
   */
  locate(kind: string, namespace: string | undefined, name: string): { readonly file: string; readonly line: number } | undefined {
    for (const [relative, state] of this.#files) {
      const i = state.objects.findIndex((o) => o.kind === kind && o.metadata.name === name && o.metadata.namespace === namespace);
      if (i >= 0) return { file: this.#displayName(relative), line: state.lines[i] };
    }
    return undefined;
  }

  /** The current warnings (YAML 1.1/1.2 ambiguous scalars); the objects concerned are loaded. */
  warnings(): readonly ManifestWarning[] {
    return this.#warnings;
  }

  /**
   * Starts watching (unless `watch: false`), then loads the directory and writes it to the
   * store; resolves when that initial load is done ({@link ManifestsSource.synced}).
   * Invalid manifests do not make it fail: they are reported by {@link ManifestsSource.errors}.
   * @throws Error if `dir` is not a readable directory, or if called twice.
   */
  async start(): Promise<void> {
    if (this.#started) throw new Error('ManifestsSource.start called twice');
    this.#started = true;
    const info = await stat(this.#absoluteDir).catch((err: NodeJS.ErrnoException) => {
      throw new Error(`manifests directory ${this.#dir}: ${err.code === 'ENOENT' ? 'does not exist (ENOENT)' : err.code === 'EACCES' ? 'not readable (EACCES)' : (err.code ?? err.message)}`);
    });
    if (!info.isDirectory()) throw new Error(`manifests directory ${this.#dir}: not a directory`);
    if (this.#watch) {
      this.#rootIno = info.ino;
      await this.#startWatcher();
      // The watcher follows the directory it was given; if that directory is renamed away or
      // deleted and another takes its place, no event ever comes. Check the root's identity.
      this.#rootCheck = setInterval(() => void this.#checkRoot(), ROOT_CHECK_INTERVAL_MS);
      this.#rootCheck.unref();
    }
    await this.rescan();
    this.#synced = true;
    this.#logger.info({ files: this.#files.size, errors: this.#errors.length }, 'manifests loaded');
  }

  async #startWatcher(): Promise<void> {
    const root = this.#absoluteDir;
    const watcher = watch(root, {
      ignoreInitial: true,
      // Symbolic links are not followed: a link loop would make the watcher recurse forever.
      followSymlinks: false,
      // Dot files and folders (editor swap files, .git) below the root don't trigger rescans.
      ignored: (p: string) => path.relative(root, p).split(path.sep).some((segment) => segment.startsWith('.') && segment !== '..' && segment !== '.'),
    });
    this.#watcher = watcher;
    watcher.on('all', (event, changed) => {
      // A file event names the file to re-read; a folder event may hide many files: re-read all.
      if (event === 'addDir' || event === 'unlinkDir' || this.#dirty === 'all') this.#dirty = 'all';
      else this.#dirty.add(path.relative(root, changed));
      this.#schedule();
    });
    watcher.on('error', (err) => {
      const code = systemErrorCode(err);
      // A system error (ENOSPC: no inotify watch left, EACCES) is the host's condition: its message, not a stack.
      this.#logger.error(code !== undefined ? { err: (err as Error).message, code } : { err }, 'watching the manifests directory failed');
    });
    await new Promise<void>((resolve) => watcher.once('ready', () => resolve()));
  }

  /** Re-watches and rescans when the root directory was replaced (renamed back, re-created). */
  async #checkRoot(): Promise<void> {
    if (this.#stopped || this.#rootChecking) return;
    this.#rootChecking = true;
    try {
      const info = await stat(this.#absoluteDir).catch(() => undefined);
      if (!info?.isDirectory()) {
        if (!this.#rootMissing) this.#logger.warn('the manifests directory is gone; keeping the objects loaded from it');
        this.#rootMissing = true;
        return;
      }
      if (!this.#rootMissing && info.ino === this.#rootIno) {
        // A safety net for what no event reports (a symlinked file's target edited outside
        // the directory): a full rescan now and then; an unchanged file costs a stat.
        if (++this.#checksSinceFullScan >= FULL_RESCAN_EVERY_CHECKS) {
          this.#checksSinceFullScan = 0;
          await this.rescan();
        }
        return;
      }
      this.#logger.info('the manifests directory was replaced; watching it again');
      this.#rootMissing = false;
      this.#rootIno = info.ino;
      await this.#watcher?.close();
      if (this.#stopped) return;
      await this.#startWatcher();
      await this.rescan();
    } finally {
      this.#rootChecking = false;
    }
  }

  /** Stops watching and waits for a rescan in progress. Idempotent. */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#rootCheck) clearInterval(this.#rootCheck);
    this.#rootCheck = undefined;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#watcher?.close();
    this.#watcher = undefined;
    await this.#chain;
  }

  /**
   * Reads the directory again now and updates the store (rescans run one at a time).
   * Resolves when done; never rejects (an unreadable directory is logged and keeps the
   * previous objects).
   */
  rescan(): Promise<void> {
    return this.#rescan('all');
  }

  /**
   * Rescans, re-reading only `dirty` files (and new ones) unless it is `'all'`. `mayHold`: the
   * result may wait for the rescans behind it (a rescan of watcher events; see {@link HOLD_MAX_MS}).
   */
  #rescan(dirty: ReadonlySet<string> | 'all', mayHold = false): Promise<void> {
    this.#queued++;
    this.#chain = this.#chain.then(() =>
      this.#scanOnce(dirty, mayHold)
        .catch((err: unknown) => {
          const code = systemErrorCode(err);
          // The directory removed or unreadable (ENOENT, EACCES): expected, and the objects stay; anything else is a fault.
          if (code !== undefined) this.#logger.warn({ err: (err as Error).message, code }, 'rescanning the manifests directory failed; keeping the previous objects');
          else this.#logger.error({ err }, 'rescanning the manifests directory failed; keeping the previous objects');
        })
        .finally(() => this.#queued--),
    );
    return this.#chain;
  }

  #schedule(): void {
    if (this.#stopped) return;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      const dirty = this.#dirty;
      this.#dirty = new Set();
      void this.#rescan(dirty, true);
    }, this.#debounceMs);
  }

  async #scanOnce(dirty: ReadonlySet<string> | 'all', mayHold: boolean): Promise<void> {
    // The watcher named every file added, changed or removed (a folder event makes it 'all'):
    // the file list is the known one plus the named manifests; a named file that is gone is
    // dropped when reading it finds nothing. The periodic full rescan lists the directory.
    let relativePaths: string[];
    if (dirty === 'all' || this.#files.size === 0) relativePaths = await listManifestFiles(this.#absoluteDir);
    else {
      // A directory that is gone (renamed away, deleted) is not a deletion of its files: fail
      // as listing it would, and keep the objects.
      const root = await stat(this.#absoluteDir);
      if (!root.isDirectory()) throw new Error(`${this.#dir} is not a directory`);
      relativePaths = [...new Set([...this.#files.keys(), ...[...dirty].filter(isManifestFileName)])].sort();
    }
    const next = new Map<string, FileState>();
    // Files the watcher did not name keep their state without being read again; the others
    // are read a batch at a time (a full scan of a large directory is I/O bound), then judged
    // against the total bound, then parsed one at a time (a parse tree at a time in memory).
    const turn = dirty === 'all' ? this.#fullScans++ % IDENTITY_TRUSTED_FULL_RESCANS : -1;
    const candidates = relativePaths.filter((r) => dirty === 'all' || dirty.has(r) || !this.#files.has(r) || this.#files.get(r)?.overBudget === true);
    // The sizes first (a stat each): a file that does not fit in the total bound is not read.
    // A full rescan does not read a file whose identity (device, inode, size, times) is the one
    // recorded before its last read (any write changes its ctime, a rename its inode), unless
    // it is the file's turn to be read anyway ({@link IDENTITY_TRUSTED_FULL_RESCANS}).
    const statSizes = new Map<string, number | undefined>();
    const identities = new Map<string, string | undefined>();
    const toRead: string[] = [];
    for (let i = 0; i < candidates.length; i += READ_BATCH) {
      const batch = candidates.slice(i, i + READ_BATCH);
      const statedAt = Date.now();
      const infos = await Promise.all(batch.map((r) => stat(path.join(this.#absoluteDir, r), { bigint: true }).catch(() => undefined)));
      batch.forEach((r, j) => {
        const info = infos[j];
        const identity = info?.isFile() ? fileIdentity(info, statedAt) : undefined;
        const previous = this.#files.get(r);
        const named = dirty !== 'all' && dirty.has(r);
        const trusted = identity !== undefined && previous?.identity === identity && identityTurn(r) !== turn;
        if (!named && trusted && !previous.overBudget && previous.errors === previous.parsed?.errors) return;
        toRead.push(r);
        identities.set(r, identity);
        // A file over the per-file limit is not judged here: reading it reports that.
        statSizes.set(r, info?.isFile() && info.size <= BigInt(this.#maxFileBytes) ? Number(info.size) : undefined);
      });
    }
    const refusedUnread = this.#overBudget(relativePaths, statSizes);
    // Then the content of the others, at most READ_BATCH files and READ_BATCH_BYTES at once
    // (but one file at least); judged again, as a file may have grown since its stat.
    const reads = new Map<string, JudgedRead>();
    const readSizes = new Map<string, number | 'missing' | undefined>();
    const reading = toRead.filter((r) => !refusedUnread.has(r));
    const statBytes = (relative: string): number => statSizes.get(relative) ?? 0;
    for (let i = 0; i < reading.length; ) {
      let end = i + 1;
      for (let bytes = statBytes(reading[i]); end < reading.length && end - i < READ_BATCH && bytes + statBytes(reading[end]) <= READ_BATCH_BYTES; end++) bytes += statBytes(reading[end]);
      const batch = reading.slice(i, end);
      const results = await Promise.all(batch.map((r) => readSettledManifestFile(path.join(this.#absoluteDir, r), this.#maxFileBytes, this.#settleMs)));
      batch.forEach((r, j) => {
        reads.set(r, results[j]);
        const read = results[j];
        readSizes.set(r, read.status === 'ok' ? read.size : read.status === 'missing' ? 'missing' : undefined);
      });
      i = end;
    }
    const refused = this.#overBudget(relativePaths, readSizes);
    for (const [relative, wouldLoad] of refusedUnread) {
      reads.set(relative, { status: 'over-budget', size: statBytes(relative), wouldLoad });
    }
    for (const [relative, wouldLoad] of refused) {
      const read = reads.get(relative) as { size: number };
      reads.set(relative, { status: 'over-budget', size: read.size, wouldLoad });
    }
    const loaded = new Map<string, FileState | undefined>();
    for (const relative of toRead) {
      const read = reads.get(relative) as JudgedRead;
      const state = await this.#loadFile(relative, this.#files.get(relative), read);
      const identity = read.status === 'ok' ? identities.get(relative) : undefined;
      loaded.set(relative, state === undefined || state.identity === identity ? state : { ...state, identity });
    }
    for (const relative of relativePaths) {
      const state = loaded.has(relative) ? loaded.get(relative) : this.#files.get(relative);
      if (state) next.set(relative, state);
    }
    const same = next.size === this.#files.size && [...next].every(([relative, state]) => this.#files.get(relative) === state);
    this.#files = next;
    // Nothing read differs from what was loaded (a full rescan of unchanged files): the objects,
    // errors and warnings are those already given (unless a result is held).
    if (same && this.#synced && this.#heldSince === undefined) return;
    // Files named while this scan of watcher events read (a tool writing a set of files one by
    // one: a policy moved from a file to another) are read by the rescan behind it: the store gets
    // both at once (the controller pushes a manifests change at once), unless held HOLD_MAX_MS.
    if (mayHold && this.#synced && !this.#stopped && (this.#queued > 1 || this.#timer !== undefined)) {
      this.#heldSince ??= Date.now();
      if (Date.now() - this.#heldSince < HOLD_MAX_MS) return;
    }
    this.#heldSince = undefined;

    const objects: KubeObject[] = [];
    const owner = new Map<string, string>();
    const errors: ManifestError[] = [];
    const warnings: ManifestWarning[] = [];
    for (const [relative, state] of next) {
      const file = this.#displayName(relative);
      errors.push(...state.errors);
      warnings.push(...(state.parsed?.warnings ?? []));
      state.objects.forEach((object, i) => {
        const key = objectKeyOf(object);
        const first = owner.get(key);
        if (first !== undefined) {
          errors.push({
            file,
            line: state.lines[i],
            kind: object.kind,
            namespace: object.metadata.namespace,
            name: object.metadata.name,
            field: undefined,
            message: `duplicate object: already defined in ${first}`,
          });
          return;
        }
        owner.set(key, `${file}:${state.lines[i]}`);
        objects.push(object);
      });
      for (const ignored of state.parsed?.ignored ?? []) {
        const id = `${relative}\0${ignored.apiVersion ?? ''}\0${ignored.kind}`;
        if (this.#loggedIgnored.has(id)) continue;
        this.#loggedIgnored.add(id);
        this.#logger.info({ file, kind: ignored.kind, apiVersion: ignored.apiVersion }, `ignoring kind ${ignored.kind} (not read by Trellis)`);
      }
    }
    this.#errors = Object.freeze(errors);
    this.#warnings = Object.freeze(warnings);
    this.#logNewProblems();
    if (this.#stopped && this.#synced) return;
    const changes = this.#store.replaceAll(this.sourceId, objects);
    if (changes.length > 0) this.#logger.debug({ changes: changes.length, objects: objects.length }, 'manifests changed');
  }

  /**
   * The files of `sizes` whose new content does not fit in the total bound, with the bytes
   * the manifests loaded would then take. `sizes` has the new size of the files read, or
   * `'missing'`, or undefined for a file not read (it keeps its state). The bytes loaded are
   * those of every listed file's current state; deleted files and files that shrank free
   * theirs first, then the files that grew (or are new) take theirs in path order while they fit.
   */
  #overBudget(relativePaths: readonly string[], sizes: ReadonlyMap<string, number | 'missing' | undefined>): Map<string, number> {
    let loadedBytes = 0;
    for (const relative of relativePaths) loadedBytes += this.#files.get(relative)?.size ?? 0;
    const growing: [string, number, number][] = [];
    for (const [relative, size] of sizes) {
      const previousSize = this.#files.get(relative)?.size ?? 0;
      if (size === 'missing') loadedBytes -= previousSize;
      else if (size !== undefined && size <= previousSize) loadedBytes -= previousSize - size;
      else if (size !== undefined) growing.push([relative, previousSize, size]);
    }
    const refused = new Map<string, number>();
    for (const [relative, previousSize, size] of growing.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
      const wouldLoad = loadedBytes - previousSize + size;
      if (wouldLoad <= this.#maxTotalBytes) loadedBytes = wouldLoad;
      else refused.set(relative, wouldLoad);
    }
    return refused;
  }

  /** The state of a file read (or judged) as `read`, given its `previous` one. */
  async #loadFile(relative: string, previous: FileState | undefined, read: JudgedRead): Promise<FileState | undefined> {
    const file = this.#displayName(relative);
    if (read.status === 'missing') return undefined; // deleted (or renamed away) since listed
    if (read.status !== 'ok') {
      const keeping = previous && previous.objects.length > 0 ? '; keeping its previous objects' : '';
      const message =
        read.status === 'over-budget'
          ? `is ${formatBytes(read.size)}: loading it would bring the manifests loaded to ${formatBytes(read.wouldLoad)}, more than the limit of ${formatBytes(this.#maxTotalBytes)} for all files (--max-manifests-total-size): not loaded${keeping}`
          : read.status === 'not-regular'
            ? `is ${read.type}, not a regular file: not read${keeping}`
            : read.status === 'too-large'
              ? `is ${read.grew ? `more than ${formatBytes(this.#maxFileBytes)}` : formatBytes(read.size)}, larger than the limit of ${formatBytes(this.#maxFileBytes)} (--max-manifest-size): not read${keeping}`
              : read.status === 'unsettled'
                ? `is still being written (it changed at every re-read): not read yet${keeping}`
                : `cannot read the file (${read.code})${keeping}`;
      const readError: ManifestError = { file, line: 1, kind: undefined, namespace: undefined, name: undefined, field: undefined, message };
      return { ...(previous ?? { text: undefined, size: 0, parsed: undefined, objects: [], lines: [] }), overBudget: read.status === 'over-budget', errors: [readError] };
    }
    const text = read.text;
    if (previous && previous.text === text && previous.parsed) {
      // Unchanged; but a read error reported since (a FIFO or an oversized file in between) is over.
      return previous.errors === previous.parsed.errors && !previous.overBudget ? previous : { ...previous, overBudget: false, errors: previous.parsed.errors };
    }

    const parsed = await parseYielding(file, text);
    if (parsed.syntaxError && previous && previous.text !== undefined) {
      // Keep everything the file contributed before: a half-saved file is not a deletion.
      if (previous.objects.length > 0) {
        this.#logger.warn({ file, objects: previous.objects.length }, 'YAML syntax error: keeping the objects loaded before from this file');
      }
      return { text, size: read.size, overBudget: false, parsed, objects: previous.objects, lines: previous.lines, errors: parsed.errors };
    }
    const objects = [...parsed.objects];
    const lines = [...parsed.lines];
    if (previous && parsed.rejectedKeys.length > 0) {
      const rejected = new Set(parsed.rejectedKeys);
      const loaded = new Set(objects.map(objectKeyOf));
      previous.objects.forEach((object, i) => {
        const key = objectKeyOf(object);
        if (rejected.has(key) && !loaded.has(key)) {
          objects.push(object); // the last good version of a document now invalid
          lines.push(previous.lines[i]);
        }
      });
    }
    return { text, size: read.size, overBudget: false, parsed, objects, lines, errors: parsed.errors };
  }

  #displayName(relative: string): string {
    return path.join(this.#dir, relative);
  }

  #logNewProblems(): void {
    const current = new Set<string>();
    for (const error of this.#errors) {
      const line = formatManifestError(error);
      current.add(line);
      if (!this.#loggedProblems.has(line)) this.#logger.warn(`invalid manifest: ${line}`);
    }
    for (const warning of this.#warnings) {
      const line = `warning: ${formatManifestError(warning)}`;
      current.add(line);
      if (!this.#loggedProblems.has(line)) this.#logger.warn(line);
    }
    this.#loggedProblems = current;
  }
}

/**
 * Runs {@link parseManifestSteps} to its end, giving the event loop a turn whenever it has
 * held it for {@link PARSE_SLICE_MS} (between documents), so that a large file does not stall
 * health checks and xDS streams.
 */
async function parseYielding(file: string, text: string): Promise<ParsedManifests> {
  const steps = parseManifestSteps(file, text);
  let sliceStart = performance.now();
  for (;;) {
    const step = steps.next();
    if (step.done) return step.value;
    if (performance.now() - sliceStart >= PARSE_SLICE_MS) {
      await yieldToEventLoop();
      sliceStart = performance.now();
    }
  }
}

/** `n` bytes in the largest binary unit that keeps it at least 1 (`52428800` → `50 MiB`). */
function formatBytes(n: number): string {
  if (n < 1024) return `${n} bytes`;
  const [value, unit] = n < 1024 * 1024 ? [n / 1024, 'KiB'] : n < 1024 ** 3 ? [n / 1024 / 1024, 'MiB'] : [n / 1024 ** 3, 'GiB'];
  return `${Number.isInteger(value) ? value : value.toFixed(1)} ${unit}`;
}

/**
 * A file's identity for {@link FileState.identity}: device, inode, size, modification and
 * change times (ns), or undefined when its last change is less than
 * {@link IDENTITY_TRUST_AGE_MS} older than `statedAtMs`, the moment of the stat, or it is empty.
 */
function fileIdentity(info: BigIntStats, statedAtMs: number): string | undefined {
  // A file of size 0 may have content stat does not describe (procfs): read it every time.
  if (info.size === 0n || statedAtMs - Number(info.ctimeNs / 1_000_000n) < IDENTITY_TRUST_AGE_MS) return undefined;
  return `${info.dev}:${info.ino}:${info.size}:${info.mtimeNs}:${info.ctimeNs}`;
}

/**
 * Which of the {@link IDENTITY_TRUSTED_FULL_RESCANS} full rescans in turn reads the file at
 * `relative` although its identity is unchanged: from a hash of its path, so the files read
 * are a fixed share of the directory and each file's turn comes back at the same interval.
 */
function identityTurn(relative: string): number {
  return createHash('sha1').update(relative).digest().readUInt32BE(0) % IDENTITY_TRUSTED_FULL_RESCANS;
}

/** True for a file name with a manifest extension (`.yaml`, `.yml`, `.json`). */
function isManifestFileName(name: string): boolean {
  return MANIFEST_EXTENSIONS.some((ext) => name.endsWith(ext));
}

/**
 * The manifest files below `root`, as paths relative to it, sorted. Entries whose name starts
 * with `.` are skipped; symbolic links to files are followed, to directories not. Entries that
 * are not regular files (FIFOs, sockets, devices) are listed too: reading them reports them.
 * @throws the file system's error if `root` itself cannot be read.
 */
export async function listManifestFiles(root: string): Promise<string[]> {
  const found: string[] = [];
  const walk = async (relativeDir: string): Promise<void> => {
    let entries;
    try {
      entries = await readdir(path.join(root, relativeDir), { withFileTypes: true });
    } catch (err) {
      if (relativeDir === '') throw err;
      return; // a subfolder removed while walking
    }
    for (const entry of entries) {
      if (entry.name.startsWith('.')) continue;
      const relative = path.join(relativeDir, entry.name);
      if (entry.isDirectory()) {
        await walk(relative);
      } else if (isManifestFileName(entry.name)) {
        if (!entry.isSymbolicLink()) found.push(relative);
        else {
          // A link whose target cannot be reached (dangling, a loop) is listed: reading it reports
          // it, where skipping it would drop the manifest without a word.
          const target = await stat(path.join(root, relative)).catch(() => undefined);
          if (!target?.isDirectory()) found.push(relative);
        }
      }
    }
  };
  await walk('');
  return found.sort();
}
