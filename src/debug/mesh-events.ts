import type http from 'node:http';
import type { AdsHooks } from '../xds/server/stream-common.js';

/** Options of {@link MeshEvents}; every duration in ms. */
export interface MeshEventsOptions {
  /**
   * A cheap token of what the page shows that changes without a hook calling
   * {@link MeshEvents.changed} (the MeshSnapshot's generation, the manifest error count); read
   * every `watchMs` while a client is connected, an event is sent when it differs.
   */
  readonly version: () => string;
  /** Most event clients at once (default 32); one more is refused with 503. */
  readonly maxClients?: number;
  /** A comment line is sent this often so that proxies and browsers keep the stream (default 15 000). */
  readonly heartbeatMs?: number;
  /** Changes are merged until none came for this long (default 100)… */
  readonly quietMs?: number;
  /** …or the first of them waited this long (default 1000). */
  readonly maxDelayMs?: number;
  /** How often `version` is read while a client is connected (default 250). */
  readonly watchMs?: number;
  /** A client whose unsent output passes this many bytes is dropped (default 64 KiB). */
  readonly maxBufferedBytes?: number;
}

/** Default of {@link MeshEventsOptions.maxClients}. */
export const DEFAULT_MAX_EVENT_CLIENTS = 32;

/**
 * The page's live updates: `GET /debug/events` as server-sent events (WHATWG HTML §9.2,
 * `text/event-stream`). Each client gets a `mesh` event when it connects and one more per
 * debounced change (a push generation, a proxy's stream opening or closing, an ACK or NACK):
 * `data` is `{"version": "...", "seq": n}`, and the client reads `/debug/mesh` again. The
 * number of clients is bounded; {@link close} (the operations server's stop) ends every stream,
 * so the controller's shutdown does not wait for browsers.
 */
export class MeshEvents {
  private readonly clients = new Set<http.ServerResponse>();
  private readonly maxClients: number;
  private readonly heartbeatMs: number;
  private readonly quietMs: number;
  private readonly maxDelayMs: number;
  private readonly watchMs: number;
  private readonly maxBufferedBytes: number;
  private seq = 0;
  private lastVersion: string | undefined;
  private firstChangeAt: number | undefined;
  private lastChangeAt: number | undefined;
  private debounce: NodeJS.Timeout | undefined;
  private heartbeat: NodeJS.Timeout | undefined;
  private watch: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(private readonly options: MeshEventsOptions) {
    this.maxClients = options.maxClients ?? DEFAULT_MAX_EVENT_CLIENTS;
    this.heartbeatMs = options.heartbeatMs ?? 15_000;
    this.quietMs = options.quietMs ?? 100;
    this.maxDelayMs = options.maxDelayMs ?? 1000;
    this.watchMs = options.watchMs ?? 250;
    this.maxBufferedBytes = options.maxBufferedBytes ?? 64 * 1024;
  }

  /** How many changes were reported ({@link changed}) since the start: with the version, what a cached `/debug/mesh` answer is keyed by. */
  get changes(): number {
    return this.seq;
  }

  /** Clients connected now. */
  get clientCount(): number {
    return this.clients.size;
  }

  /**
   * Serves one `GET /debug/events`: 503 (with `Retry-After`) when {@link MeshEventsOptions.maxClients}
   * are connected or the server is stopping, else the event stream until the client leaves.
   */
  connect(req: http.IncomingMessage, res: http.ServerResponse): void {
    if (this.closed || this.clients.size >= this.maxClients) {
      res.writeHead(503, { 'content-type': 'text/plain', 'retry-after': '10' });
      res.end(this.closed ? 'stopping\n' : `too many event clients (at most ${this.maxClients}): poll /debug/mesh instead\n`);
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-store', 'x-accel-buffering': 'no' });
    // The version the other clients were last told stays theirs: a change they were not told of
    // yet is sent to them (resetting it here would lose that change for them until the next one).
    const version = this.options.version();
    if (this.clients.size === 0) this.lastVersion = version;
    else if (version !== this.lastVersion) this.changed();
    this.clients.add(res);
    const forget = () => this.drop(res);
    req.once('close', forget);
    res.once('close', forget);
    this.write(res, `retry: 3000\n${this.event(version)}`);
    this.arm();
  }

  /** Something the page shows changed: one event follows, merged with the changes around it. */
  changed(): void {
    if (this.closed) return;
    this.seq++;
    if (this.clients.size === 0) return;
    // O(1) per change and no timer churn (a push ACKed by 1000 proxies calls this 5000 times):
    // the timer, when it fires, waits again while changes keep coming within the quiet period.
    this.lastChangeAt = Date.now();
    this.firstChangeAt ??= this.lastChangeAt;
    this.debounce ??= setTimeout(() => this.settle(), this.quietMs);
  }

  /** The debounce timer fired: broadcast, or wait for the quiet period (bounded by the maximum delay). */
  private settle(): void {
    const now = Date.now();
    const wait = Math.min((this.lastChangeAt ?? now) + this.quietMs, (this.firstChangeAt ?? now) + this.maxDelayMs) - now;
    if (wait > 0) {
      this.debounce = setTimeout(() => this.settle(), wait);
      return;
    }
    this.broadcast();
  }

  /** Ends every stream and refuses new ones (the operations server's stop). */
  close(): void {
    this.closed = true;
    clearTimeout(this.debounce);
    clearInterval(this.heartbeat);
    clearInterval(this.watch);
    for (const res of [...this.clients]) res.end();
    this.clients.clear();
  }

  private event(version = this.lastVersion): string {
    return `event: mesh\ndata: ${JSON.stringify({ version: version ?? '', seq: this.seq })}\n\n`;
  }

  private broadcast(): void {
    this.debounce = this.firstChangeAt = this.lastChangeAt = undefined;
    this.lastVersion = this.options.version();
    const text = this.event();
    for (const res of [...this.clients]) this.write(res, text);
  }

  /** Writes to one client; a client that reads too slowly is dropped. */
  private write(res: http.ServerResponse, text: string): void {
    if (res.writableLength > this.maxBufferedBytes) {
      res.destroy();
      this.drop(res);
      return;
    }
    res.write(text);
  }

  private drop(res: http.ServerResponse): void {
    this.clients.delete(res);
    if (this.clients.size > 0) return;
    clearInterval(this.heartbeat);
    clearInterval(this.watch);
    clearTimeout(this.debounce);
    this.heartbeat = this.watch = this.debounce = this.firstChangeAt = this.lastChangeAt = undefined;
  }

  /** Starts the heartbeat and the version watch while clients are connected. */
  private arm(): void {
    this.heartbeat ??= setInterval(() => {
      for (const res of [...this.clients]) this.write(res, ': heartbeat\n\n');
    }, this.heartbeatMs).unref();
    this.watch ??= setInterval(() => {
      if (this.options.version() !== this.lastVersion) this.changed();
    }, this.watchMs).unref();
  }
}

/**
 * `hooks` with {@link MeshEvents.changed} (`changed`) called after each: a proxy's stream opened
 * (once it is registered) or closed, an ACK, a NACK.
 */
export function observedHooks(hooks: AdsHooks, changed: () => void): AdsHooks {
  return {
    ...hooks,
    onStreamOpen: async (proxy, streamId, node) => {
      try {
        await hooks.onStreamOpen?.(proxy, streamId, node);
      } finally {
        changed();
      }
    },
    onStreamClose: (proxy, streamId) => {
      hooks.onStreamClose?.(proxy, streamId);
      changed();
    },
    onAck: (proxy, typeUrl, versionInfo) => {
      hooks.onAck?.(proxy, typeUrl, versionInfo);
      changed();
    },
    onNack: (proxy, typeUrl, versionInfo, detail) => {
      hooks.onNack?.(proxy, typeUrl, versionInfo, detail);
      changed();
    },
  };
}
