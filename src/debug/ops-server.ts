import { readFile } from 'node:fs/promises';
import http from 'node:http';
import { isIP, type AddressInfo, type Socket } from 'node:net';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { PodProxy, PodProxyError } from './pod-proxy.js';
import { splitHostPort } from '../util/address.js';
import { MeshEvents, type MeshEventsOptions } from './mesh-events.js';
import { TimeBudget, type TimeBudgetOptions } from './time-budget.js';

/** What the operations server reads; each function is called per request. */
export interface OpsSources {
  /** True once every source has synced (`/readyz`). */
  ready(): boolean;
  /** Prometheus registry (`/metrics`). */
  readonly metrics: Registry;
  /** Connected proxies (`/debug/proxies`). */
  proxies(): unknown;
  /** A proxy's config dump (`/debug/config_dump?proxy=<uuid>`), or undefined for an unknown proxy. */
  configDump(uuid: string): unknown;
  /** Policy and manifest problems (`/debug/policies`). */
  policies(): unknown;
  /** The mesh as the page draws it (`/debug/mesh`, a `MeshView`). */
  mesh(): unknown;
  /** A cheap token that changes with what `/debug/mesh` shows and no hook tells (see {@link MeshEventsOptions.version}). */
  meshVersion(): string;
  /** `/debug/explain?from=NS/SA&to=SVC.NS:PORT&…`: whether a request is allowed and why, with the HTTP status (`explain/http.ts`). */
  explain(params: URLSearchParams): { status: number; body: unknown };
  /** The proxy of a pod in the controller's store (`/debug/pod-proxy?namespace=<ns>&pod=<name>`, see `podProxy`). */
  podProxy(namespace: string, pod: string): PodProxy | PodProxyError;
  /**
   * The status of one policy object (`/debug/policy-status?kind=K&namespace=N&name=X`), or
   * undefined when there is no such object.
   */
  policyStatus(kind: string, namespace: string, name: string): unknown;
}

/**
 * The mesh page's files (`src/debug/page/`, copied into `dist/debug/page/` by scripts/build.sh),
 * by request path.
 */
const PAGE_FILES: Readonly<Record<string, { readonly file: string; readonly type: string }>> = {
  '/': { file: 'index.html', type: 'text/html; charset=utf-8' },
  '/mesh.js': { file: 'mesh.js', type: 'text/javascript; charset=utf-8' },
  '/mesh.css': { file: 'mesh.css', type: 'text/css; charset=utf-8' },
};

/**
 * Headers of the page's files: a Content-Security-Policy that lets the page load only its own
 * script, style and JSON (no inline script or style, no other origin, no frames).
 */
export const PAGE_SECURITY_HEADERS: Readonly<Record<string, string>> = {
  'content-security-policy': "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-cache',
};

/** Bounds of the operations server's connections (Node's `http.Server` settings); durations in ms. */
export interface OpsServerLimits {
  /**
   * Most open connections (default {@link DEFAULT_MAX_OPS_CONNECTIONS}). A new one past it takes
   * the place of the oldest connection with no request in progress (one whose headers never end,
   * or an idle kept-alive one), which is closed; when every one has a request in progress (event
   * streams), the new one is closed at once. So connections that send nothing cannot keep a
   * probe of `/healthz` out.
   */
  readonly maxConnections?: number;
  /** Time to receive a request's headers (`headersTimeout`, default 10 000). */
  readonly headersTimeoutMs?: number;
  /** Time to receive a whole request (`requestTimeout`, default 30 000; an event stream's response is not bounded by it). */
  readonly requestTimeoutMs?: number;
  /** An idle kept-alive connection is closed after this long (`keepAliveTimeout`, default 5000). */
  readonly keepAliveTimeoutMs?: number;
  /** How often the two timeouts above are checked (`connectionsCheckingInterval`, default 1000). */
  readonly connectionsCheckingIntervalMs?: number;
  /** Host names besides IP addresses, `localhost` and Kubernetes service names that requests may name (see {@link isServedHost}). */
  readonly allowedHosts?: readonly string[];
  /** Event-loop time `/debug/mesh` and `/debug/policies` may take together (default: 250 ms a second); past it, 429 with `Retry-After`. */
  readonly viewBudget?: TimeBudgetOptions;
}

/**
 * Whether a request's `Host` header names this server as its clients do: an IP address (a probe,
 * a scraper, the CLI), `localhost` or a name under it, a Kubernetes service name (`*.svc`,
 * `*.svc.cluster.local`), or one of `allowed`; a request without one (HTTP/1.0) too. Any other
 * name is what a page reaching the server through DNS rebinding sends (its own domain, resolved to
 * 127.0.0.1), and is refused. Names compare without case, port or trailing dot.
 */
export function isServedHost(host: string | undefined, allowed: readonly string[] = []): boolean {
  if (host === undefined || host === '') return true;
  let name = host.trim().toLowerCase();
  if (name.startsWith('[')) return name.indexOf(']') > 0 && isIP(name.slice(1, name.indexOf(']'))) === 6;
  const colon = name.lastIndexOf(':');
  if (colon >= 0 && /^\d*$/.test(name.slice(colon + 1))) name = name.slice(0, colon);
  if (name.endsWith('.')) name = name.slice(0, -1);
  if (isIP(name) !== 0 || name === 'localhost' || name.endsWith('.localhost')) return true;
  if (name.endsWith('.svc') || name.endsWith('.svc.cluster.local')) return true;
  return allowed.some((a) => a.toLowerCase().replace(/\.$/, '') === name);
}

/**
 * The open connections of an HTTP server, at most `max`: see {@link OpsServerLimits.maxConnections}.
 * Connections are kept in arrival order with the number of their requests in progress.
 */
class ConnectionAdmission {
  private readonly open = new Map<Socket, { inProgress: number }>();

  constructor(private readonly max: number) {}

  /** A connection was accepted: admit it, closing another (or it) when there are `max` already. */
  add(socket: Socket): void {
    if (this.open.size >= this.max) {
      let idle: Socket | undefined;
      for (const [open, state] of this.open) {
        if (state.inProgress === 0) {
          idle = open;
          break;
        }
      }
      if (!idle) {
        socket.destroy();
        return;
      }
      this.open.delete(idle);
      idle.destroy();
    }
    this.open.set(socket, { inProgress: 0 });
    socket.once('close', () => this.open.delete(socket));
  }

  /** A request's headers arrived on `socket`: in progress until its response finishes or closes. */
  requestStarted(socket: Socket, res: http.ServerResponse): void {
    const state = this.open.get(socket);
    if (!state) return;
    state.inProgress++;
    let done = false;
    const finished = (): void => {
      if (done) return;
      done = true;
      state.inProgress--;
    };
    res.once('finish', finished);
    res.once('close', finished);
  }
}

/** Default of {@link OpsServerLimits.maxConnections}: the page's 32 event streams, and room for scrapers, probes and the CLI. */
export const DEFAULT_MAX_OPS_CONNECTIONS = 256;

/** How long a computed `/debug/mesh` answer is served again while nothing reported a change, in ms (what no hook reports, such as a Kubernetes source's state, shows this late at most). */
export const MESH_VIEW_CACHE_MS = 1000;

/**
 * The operations HTTP server: `/healthz` (200 while the process runs), `/readyz` (200 once
 * the sources synced, else 503), `/metrics` (Prometheus text format), `/debug/proxies`,
 * `/debug/config_dump?proxy=<uuid>`, `/debug/policies`, `/debug/policy-status?kind=K&namespace=N&name=X`,
 * `/debug/explain?…` (429 past its time budget, see {@link TimeBudget}; `/debug/mesh` and
 * `/debug/policies` share another) and `/debug/pod-proxy?namespace=<ns>&pod=<name>` (JSON); the mesh page: `/`
 * (with `/mesh.js` and `/mesh.css`), `/debug/mesh` (JSON it reads) and `/debug/events` (server-sent
 * events, {@link MeshEvents}). Anything else is 404. `/debug/mesh` is computed once per change
 * (the sources' version and the changes reported to {@link events}; at most {@link MESH_VIEW_CACHE_MS}
 * old): the pages that refetch it on an event share one computation. Connections are bounded
 * ({@link OpsServerLimits}).
 */
export class OpsServer {
  private server: http.Server | undefined;
  /** The page's live updates; the controller calls `events.changed()` when proxies change. */
  readonly events: MeshEvents;
  /** The page's files, read once each. */
  private readonly page = new Map<string, Promise<Buffer>>();
  /** The event-loop time `/debug/explain` may take (it generates configuration per call). */
  private readonly explainBudget: TimeBudget;
  /** The event-loop time `/debug/mesh` and `/debug/policies` may take (each computes a view of the whole mesh). */
  private readonly viewBudget: TimeBudget;
  /** The last `/debug/mesh` answer: what it was computed for, when, and its JSON. */
  private meshAnswer: { readonly key: string; readonly at: number; readonly json: string } | undefined;

  /**
   * @param events options of the page's event streams (tests shorten the heartbeat).
   * @param explainBudget bound on the time `/debug/explain` takes (default: 250 ms a second); past it, 429 with `Retry-After`.
   * @param limits bounds of the connections and of the views' time.
   */
  constructor(
    private readonly sources: OpsSources,
    private readonly logger: Logger,
    events: Omit<MeshEventsOptions, 'version'> = {},
    explainBudget: TimeBudgetOptions = {},
    private readonly limits: OpsServerLimits = {},
  ) {
    this.events = new MeshEvents({ ...events, version: () => sources.meshVersion() });
    this.explainBudget = new TimeBudget(explainBudget);
    this.viewBudget = new TimeBudget(limits.viewBudget);
  }

  /**
   * Listens on `host:port` (port 0 picks a free one).
   * @returns the port it listens on.
   * @throws Error when the address cannot be bound.
   */
  async start(address: string): Promise<number> {
    const { host, port } = splitHostPort(address);
    const limits = this.limits;
    const options: http.ServerOptions = {
      headersTimeout: limits.headersTimeoutMs ?? 10_000,
      requestTimeout: limits.requestTimeoutMs ?? 30_000,
      keepAliveTimeout: limits.keepAliveTimeoutMs ?? 5000,
      connectionsCheckingInterval: limits.connectionsCheckingIntervalMs ?? 1000,
    };
    const server = http.createServer(options, (req, res) => {
      this.handle(req, res).catch((err: unknown) => {
        this.logger.error({ err }, 'ops request failed');
        if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' });
        res.end('internal error\n');
      });
    });
    const admission = new ConnectionAdmission(limits.maxConnections ?? DEFAULT_MAX_OPS_CONNECTIONS);
    server.on('connection', (socket: Socket) => admission.add(socket));
    server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => admission.requestStarted(req.socket, res));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => resolve());
    });
    this.server = server;
    return (server.address() as AddressInfo).port;
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    if (!isServedHost(req.headers.host, this.limits.allowedHosts)) {
      const shown = JSON.stringify(String(req.headers.host).slice(0, 100));
      res.writeHead(421, { 'content-type': 'text/plain' });
      res.end(`Host ${shown} is not a name of this server: use its IP address or localhost, or start it with --http-allowed-host (a guard against DNS rebinding)\n`);
      return;
    }
    const url = new URL(req.url ?? '/', 'http://localhost');
    const json = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(`${JSON.stringify(body, null, 2)}\n`);
    };
    const page = PAGE_FILES[url.pathname];
    if (page) {
      let body = this.page.get(page.file);
      if (!body) {
        this.page.set(page.file, (body = readFile(new URL(`./page/${page.file}`, import.meta.url))));
        body.catch(() => this.page.delete(page.file));
      }
      const bytes = await body;
      res.writeHead(200, { 'content-type': page.type, ...PAGE_SECURITY_HEADERS });
      res.end(page.file === 'index.html' ? withMeshData(bytes, this.meshJson()) : bytes);
      return;
    }
    switch (url.pathname) {
      case '/healthz':
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.end('ok\n');
        return;
      case '/readyz': {
        const ready = this.sources.ready();
        res.writeHead(ready ? 200 : 503, { 'content-type': 'text/plain' });
        res.end(ready ? 'ready\n' : 'not ready: sources have not synced\n');
        return;
      }
      case '/metrics': {
        const text = await this.sources.metrics.metrics();
        res.writeHead(200, { 'content-type': this.sources.metrics.contentType });
        res.end(text);
        return;
      }
      case '/debug/proxies':
        return json(200, this.sources.proxies());
      case '/debug/config_dump': {
        const uuid = url.searchParams.get('proxy');
        if (!uuid) return json(400, { error: 'query parameter "proxy" (a proxy UUID) is required' });
        const dump = this.sources.configDump(uuid);
        return dump === undefined ? json(404, { error: `no connected proxy with UUID ${uuid}` }) : json(200, dump);
      }
      case '/debug/policies':
        if (!this.viewBudget.available()) return tooMany(res, this.viewBudget, VIEW_REFUSED('policies'));
        return json(200, this.viewBudget.run(() => this.sources.policies()));
      case '/debug/mesh': {
        const answer = this.meshJson();
        if (answer === undefined) return tooMany(res, this.viewBudget, VIEW_REFUSED('mesh'));
        res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-store' });
        res.end(answer);
        return;
      }
      case '/debug/events':
        return this.events.connect(req, res);
      case '/debug/explain': {
        if (!this.explainBudget.available()) return tooMany(res, this.explainBudget, 'too many explain requests: each one generates configuration on the controller; try again shortly');
        const { status, body } = this.explainBudget.run(() => this.sources.explain(url.searchParams));
        return json(status, body);
      }
      case '/debug/pod-proxy': {
        const namespace = url.searchParams.get('namespace');
        const pod = url.searchParams.get('pod');
        if (!namespace || !pod) return json(400, { error: 'query parameters "namespace" and "pod" are required' });
        const found = this.sources.podProxy(namespace, pod);
        return 'error' in found ? json(found.status, { error: found.error }) : json(200, found);
      }
      case '/debug/policy-status': {
        const [kind, namespace, name] = ['kind', 'namespace', 'name'].map((p) => url.searchParams.get(p) ?? '');
        if (!kind || !name) return json(400, { error: 'query parameters "kind" and "name" are required ("namespace" defaults to "default")' });
        const status = this.sources.policyStatus(kind, namespace || 'default', name);
        return status === undefined ? json(404, { error: `no ${kind} ${namespace || 'default'}/${name}` }) : json(200, status);
      }
      default:
        res.writeHead(404, { 'content-type': 'text/plain' });
        res.end('not found\n');
    }
  }

  /** The `/debug/mesh` answer: the cached one while nothing changed, else computed within the views' budget; undefined when the budget is spent. */
  private meshJson(): string | undefined {
    const key = `${this.sources.meshVersion()}|${this.events.changes}`;
    const cached = this.meshAnswer;
    if (cached && cached.key === key && performance.now() - cached.at < MESH_VIEW_CACHE_MS) return cached.json;
    if (!this.viewBudget.available()) return undefined;
    const json = this.viewBudget.run(() => JSON.stringify(this.sources.mesh()));
    this.meshAnswer = { key, at: performance.now(), json };
    return json;
  }

  /** Stops listening and closes open connections (the page's event streams first). */
  async stop(): Promise<void> {
    this.events.close();
    const server = this.server;
    if (!server) return;
    this.server = undefined;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

/** The error text of a `/debug/mesh` or `/debug/policies` call refused past the views' budget. */
const VIEW_REFUSED = (view: 'mesh' | 'policies'): string => `too many /debug/${view} requests: each one computes a view of the whole mesh on the controller; try again shortly`;

/** 429 with `Retry-After` (the window of `budget`) and `error`: a time budget is spent. */
function tooMany(res: http.ServerResponse, budget: TimeBudget, error: string): void {
  res.writeHead(429, { 'content-type': 'application/json', 'retry-after': String(budget.retryAfterSeconds) });
  res.end(`${JSON.stringify({ error })}\n`);
}

/** The page's empty JSON data block, which {@link withMeshData} fills. */
const MESH_DATA_BLOCK = '<script type="application/json" id="mesh-data"></script>';

/**
 * `html` (the page) with `json` (the `/debug/mesh` answer) in its JSON data block, so the page
 * draws the mesh before its first fetch. `<`, `>`, `&` and the line separators are written as
 * `\u` escapes (the same JSON): no name can end the block or open markup. Without `json` (the
 * views' budget is spent), the page as it is.
 */
function withMeshData(html: Buffer, json: string | undefined): Buffer | string {
  if (json === undefined) return html;
  const text = html.toString('utf8');
  const at = text.indexOf(MESH_DATA_BLOCK);
  if (at < 0) return html;
  const safe = json.replace(/[<>&\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
  const open = MESH_DATA_BLOCK.slice(0, MESH_DATA_BLOCK.length - '</script>'.length);
  return `${text.slice(0, at)}${open}${safe}</script>${text.slice(at + MESH_DATA_BLOCK.length)}`;
}
