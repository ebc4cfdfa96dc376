import { Watch, type KubeConfig } from '@kubernetes/client-node';
import http from 'node:http';
import https from 'node:https';
import type { Logger } from 'pino';
import type { KubeObject } from '../../store/objects.js';
import { apiClientConfig } from '../../util/kube-api.js';
import { normalizeObject } from './normalize.js';
import { collectionPath, type WatchedResource } from './resources.js';

/** Where a {@link Reflector} writes: one kind's objects, as one source contribution. */
export interface ReflectorSink {
  /** The complete current set after a (re)list: objects missing from it are deleted. */
  replace(objects: readonly KubeObject[]): void;
  /** One object added or modified (watch event). */
  upsert(object: KubeObject): void;
  /** One object deleted (watch event). */
  delete(namespace: string | undefined, name: string): void;
}

/** Exponential backoff of a {@link Reflector}'s retries. */
export interface BackoffOptions {
  /** First delay, in ms (default 500). */
  initialMs?: number;
  /** Longest delay, in ms (default 30 000); also the retry interval of a missing CRD. */
  maxMs?: number;
}

/** Options of {@link Reflector}. */
export interface ReflectorOptions {
  kubeConfig: KubeConfig;
  resource: WatchedResource;
  sink: ReflectorSink;
  logger: Logger;
  /** Label selector of the list and the watch (e.g. `openservicemesh.io/monitored-by=osm`). */
  labelSelector?: string;
  backoff?: BackoffOptions;
  /**
   * `timeoutSeconds` asked of each watch (default 300, plus up to 20% jitter); the stream is
   * also abandoned client-side 30 s after that, in case the connection died silently.
   */
  watchTimeoutSeconds?: number;
  /** Timeout of a list request, in ms (default 60 000). */
  listTimeoutMs?: number;
}

/** Counters of one {@link Reflector}, for tests and diagnostics. */
export interface ReflectorStats {
  /** Successful lists (the first one and every relist). */
  lists: number;
  /** Relists after a `410 Gone`/`Expired`. */
  expired: number;
  /** Watch streams opened. */
  watches: number;
  /** Failed lists and watches (refused connection, 5xx, broken stream, …). */
  failures: number;
}

/** How one watch stream ended. */
type WatchOutcome = { kind: 'expired' } | { kind: 'ended'; events: number } | { kind: 'failed'; error: unknown };

class HttpStatusError extends Error {
  constructor(
    readonly statusCode: number,
    message: string,
  ) {
    super(message);
  }
}

/**
 * A list-then-watch loop for one resource type, written on the library's `Watch` (the watch
 * stream) and the kubeconfig's transport settings (`KubeConfig.applyToHTTPSOptions`, for the
 * list), instead of the library's `ListWatch` informer, which stops for good on a refused
 * connection, a 5xx or a failed list, and never asks for bookmarks.
 *
 * - List (consistent read) → {@link ReflectorSink.replace}, which also reconciles deletions
 *   made while the watch was down; then watch from the list's resourceVersion with
 *   `allowWatchBookmarks`, applying ADDED/MODIFIED/DELETED and advancing the resourceVersion on
 *   every event and BOOKMARK.
 * - A stream that ends cleanly (server `timeoutSeconds`) is re-opened at once from the last
 *   resourceVersion; a broken one (dropped connection, refused connection, 5xx) is re-opened from
 *   the last resourceVersion after an exponential backoff, so nothing is missed as long as
 *   the server still has that history.
 * - `410 Gone` (HTTP status or an `ERROR` event with code 410) → relist.
 * - A failed list is retried with the same backoff; the objects already in the store stay.
 * - A 404 on the list of an optional kind (CRD not installed) counts as synced and empty; the
 *   list is retried every `backoff.maxMs`.
 */
export class Reflector {
  readonly #options: ReflectorOptions;
  readonly #watch: Watch;
  /** `options.kubeConfig`, with an `http://` server accepted ({@link apiClientConfig}). */
  readonly #kubeConfig: KubeConfig;
  readonly #logger: Logger;
  #resourceVersion = '';
  #synced = false;
  #missing = false;
  #stopped = true;
  #attempt = 0;
  #loop: Promise<void> | undefined;
  #abortWatch: (() => void) | undefined;
  #abortList: (() => void) | undefined;
  #wake: (() => void) | undefined;
  #lastError: string | undefined;
  readonly #syncWaiters: (() => void)[] = [];
  /** Counters, for tests and diagnostics. */
  readonly stats: ReflectorStats = { lists: 0, expired: 0, watches: 0, failures: 0 };

  /** Creates a stopped reflector; call {@link Reflector.start}. */
  constructor(options: ReflectorOptions) {
    this.#options = options;
    this.#kubeConfig = apiClientConfig(options.kubeConfig);
    this.#watch = new Watch(this.#kubeConfig);
    this.#logger = options.logger;
  }

  /** The resource type reflected. */
  get resource(): WatchedResource {
    return this.#options.resource;
  }

  /** True once the first list succeeded (or found an optional kind missing); stays true. */
  get synced(): boolean {
    return this.#synced;
  }

  /** True while the kind's list answers 404 (an optional CRD that is not installed). */
  get missing(): boolean {
    return this.#missing;
  }

  /** The last resourceVersion seen (list, event or bookmark); `''` before the first list. */
  get resourceVersion(): string {
    return this.#resourceVersion;
  }

  /** The last error, cleared by the next successful list or watch event. */
  get lastError(): string | undefined {
    return this.#lastError;
  }

  /** Resolves once {@link Reflector.synced}. */
  whenSynced(): Promise<void> {
    if (this.#synced) return Promise.resolve();
    return new Promise((resolve) => this.#syncWaiters.push(resolve));
  }

  /** Starts the loop in the background (no-op when running). */
  start(): void {
    if (!this.#stopped) return;
    this.#stopped = false;
    this.#loop = this.#run().catch((err: unknown) => {
      this.#logger.error({ err, kind: this.resource.kind }, 'kubernetes reflector loop crashed');
    });
  }

  /** Stops the loop and closes the watch; resolves when the loop has exited. */
  async stop(): Promise<void> {
    this.#stopped = true;
    this.#abortWatch?.();
    this.#abortList?.();
    this.#wake?.();
    await this.#loop;
  }

  async #run(): Promise<void> {
    while (!this.#stopped) {
      if (this.#resourceVersion === '') {
        const listed = await this.#listOnce();
        if (this.#stopped) return;
        if (listed === 'failed') {
          await this.#sleep(this.#nextDelay());
          continue;
        }
        if (listed === 'missing') {
          await this.#sleep(this.#options.backoff?.maxMs ?? 30_000);
          continue;
        }
      }
      const started = Date.now();
      const outcome = await this.#watchOnce();
      if (this.#stopped) return;
      if (outcome.kind === 'expired') {
        this.stats.expired += 1;
        this.#logger.info({ kind: this.resource.kind, resourceVersion: this.#resourceVersion }, 'watch expired (410): relisting');
        this.#resourceVersion = '';
      } else if (outcome.kind === 'failed') {
        this.stats.failures += 1;
        this.#lastError = errorText(outcome.error);
        this.#logger.warn({ kind: this.resource.kind, err: this.#lastError }, 'watch failed: retrying with backoff');
        await this.#sleep(this.#nextDelay());
      } else if (outcome.events === 0 && Date.now() - started < 1000) {
        // A stream that closes at once without any event: don't spin.
        await this.#sleep(this.#nextDelay());
      }
    }
  }

  /** One list; on success the sink gets the complete set. */
  async #listOnce(): Promise<'ok' | 'missing' | 'failed'> {
    const { resource, labelSelector } = this.#options;
    const query = labelSelector ? `?labelSelector=${encodeURIComponent(labelSelector)}` : '';
    try {
      const { status, body } = await this.#getJson(`${collectionPath(resource)}${query}`);
      if (status === 404 && resource.optional) {
        if (!this.#missing) {
          this.#logger.warn(
            { kind: resource.kind, apiVersion: `${resource.group}/${resource.version}` },
            `${resource.plural}.${resource.group} is not served (CRD not installed?): treating ${resource.kind} as empty`,
          );
        }
        this.#missing = true;
        this.#options.sink.replace([]);
        this.#markSynced();
        return 'missing';
      }
      if (status !== 200) throw new HttpStatusError(status, `list ${collectionPath(resource)}: HTTP ${status}: ${statusMessage(body)}`);
      const list = body as { metadata?: { resourceVersion?: string }; items?: unknown[] };
      const objects: KubeObject[] = [];
      for (const item of list.items ?? []) {
        const object = normalizeObject(resource, item);
        if (object) objects.push(object);
      }
      if (this.#missing) this.#logger.info({ kind: resource.kind }, `${resource.plural}.${resource.group} is served now`);
      this.#missing = false;
      this.#options.sink.replace(objects);
      this.#resourceVersion = list.metadata?.resourceVersion ?? '';
      this.stats.lists += 1;
      this.#attempt = 0;
      this.#lastError = undefined;
      this.#markSynced();
      this.#logger.debug({ kind: resource.kind, count: objects.length, resourceVersion: this.#resourceVersion }, 'listed');
      return 'ok';
    } catch (err) {
      if (this.#stopped) return 'failed';
      this.stats.failures += 1;
      this.#lastError = errorText(err);
      this.#logger.warn({ kind: resource.kind, err: this.#lastError }, 'list failed: retrying with backoff');
      return 'failed';
    }
  }

  /** One watch stream from the current resourceVersion, until it ends. */
  #watchOnce(): Promise<WatchOutcome> {
    const { resource, labelSelector } = this.#options;
    const base = this.#options.watchTimeoutSeconds ?? 300;
    const timeoutSeconds = Math.max(1, Math.round(base * (1 + Math.random() * 0.2)));
    const query: Record<string, string | number | boolean> = {
      allowWatchBookmarks: true,
      resourceVersion: this.#resourceVersion,
      timeoutSeconds,
    };
    if (labelSelector) query.labelSelector = labelSelector;
    this.stats.watches += 1;
    return new Promise<WatchOutcome>((resolve) => {
      let events = 0;
      let settled = false;
      let expired = false;
      let errorEvent: string | undefined;
      let controller: AbortController | undefined;
      const finish = (outcome: WatchOutcome): void => {
        if (settled) return;
        settled = true;
        clearTimeout(guard);
        this.#abortWatch = undefined;
        controller?.abort();
        resolve(outcome);
      };
      const guard = setTimeout(() => finish({ kind: 'ended', events }), (timeoutSeconds + 30) * 1000);
      this.#abortWatch = () => finish({ kind: 'ended', events });
      const onEvent = (type: string, object: unknown): void => {
        if (settled) return;
        const rv = resourceVersionOf(object);
        switch (type) {
          case 'ADDED':
          case 'MODIFIED': {
            const normalized = normalizeObject(resource, object);
            if (normalized) this.#options.sink.upsert(normalized);
            break;
          }
          case 'DELETED': {
            const normalized = normalizeObject(resource, object);
            if (normalized) this.#options.sink.delete(normalized.metadata.namespace, normalized.metadata.name);
            break;
          }
          case 'BOOKMARK':
            break;
          case 'ERROR': {
            const code = (object as { code?: unknown } | null)?.code;
            if (code === 410) expired = true;
            else errorEvent = `watch error event: ${statusMessage(object)}`;
            finish(expired ? { kind: 'expired' } : { kind: 'failed', error: new Error(errorEvent) });
            return;
          }
          default:
            return;
        }
        if (rv) this.#resourceVersion = rv;
        events += 1;
        this.#attempt = 0;
        this.#lastError = undefined;
      };
      const onDone = (err: unknown): void => {
        if (expired) return finish({ kind: 'expired' });
        if (err && (err as { statusCode?: unknown }).statusCode === 410) return finish({ kind: 'expired' });
        if (err) return finish({ kind: 'failed', error: err });
        if (errorEvent) return finish({ kind: 'failed', error: new Error(errorEvent) });
        finish({ kind: 'ended', events });
      };
      this.#watch.watch(collectionPath(resource), query, onEvent, onDone).then(
        (c) => {
          controller = c;
          if (settled) c.abort();
        },
        (err: unknown) => finish({ kind: 'failed', error: err }),
      );
    });
  }

  async #getJson(urlPath: string): Promise<{ status: number; body: unknown }> {
    const cluster = this.#kubeConfig.getCurrentCluster();
    if (!cluster) throw new Error('the kubeconfig has no current cluster');
    const url = new URL(cluster.server.replace(/\/+$/, '') + urlPath);
    const opts: https.RequestOptions = {};
    await this.#kubeConfig.applyToHTTPSOptions(opts);
    opts.method = 'GET';
    opts.headers = { ...(opts.headers ?? {}), Accept: 'application/json' };
    const timeoutMs = this.#options.listTimeoutMs ?? 60_000;
    const request = url.protocol === 'https:' ? https.request : http.request;
    return new Promise((resolve, reject) => {
      const req = request(url, opts, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', reject);
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let body: unknown = text;
          try {
            body = JSON.parse(text);
          } catch {
            // not JSON: keep the text (for the error message)
          }
          resolve({ status: res.statusCode ?? 0, body });
        });
      });
      req.setTimeout(timeoutMs, () => req.destroy(new Error(`list timed out after ${timeoutMs} ms`)));
      req.on('error', reject);
      req.on('close', () => {
        this.#abortList = undefined;
      });
      this.#abortList = () => req.destroy(new Error('stopped'));
      req.end();
    });
  }

  #markSynced(): void {
    if (this.#synced) return;
    this.#synced = true;
    for (const resolve of this.#syncWaiters.splice(0)) resolve();
  }

  #nextDelay(): number {
    const initial = this.#options.backoff?.initialMs ?? 500;
    const max = this.#options.backoff?.maxMs ?? 30_000;
    const delay = Math.min(max, initial * 2 ** Math.min(this.#attempt, 30));
    this.#attempt += 1;
    return Math.round(delay * (0.8 + Math.random() * 0.4));
  }

  #sleep(ms: number): Promise<void> {
    if (this.#stopped) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done(): void {
        clearTimeout(timer);
        resolve();
      }
      this.#wake = () => {
        this.#wake = undefined;
        done();
      };
    });
  }
}

function resourceVersionOf(object: unknown): string | undefined {
  const rv = (object as { metadata?: { resourceVersion?: unknown } } | null)?.metadata?.resourceVersion;
  return typeof rv === 'string' && rv !== '' ? rv : undefined;
}

function statusMessage(body: unknown): string {
  if (body && typeof body === 'object' && typeof (body as { message?: unknown }).message === 'string') return (body as { message: string }).message;
  return typeof body === 'string' ? body.slice(0, 200) : JSON.stringify(body)?.slice(0, 200) ?? '';
}

function errorText(err: unknown): string {
  if (err instanceof Error) {
    const code = (err as { statusCode?: unknown; code?: unknown }).statusCode ?? (err as { code?: unknown }).code;
    return code !== undefined ? `${err.message} (${String(code)})` : err.message;
  }
  return String(err);
}
