/**
 * `trellis lab traffic`: a load client for lab tests. It sends HTTP requests (`--url`), TCP
 * connections (`--tcp`) or gRPC unary calls (`--grpc`) and counts who answered (the `pod`
 * named by `trellis lab app`'s JSON, TCP greeting line or gRPC answer), the statuses and the
 * errors, in one {@link TrafficSummary}.
 *
 * HTTP keeps connections alive by default (one per worker): Envoy's HTTP connection manager
 * picks the route, the weighted cluster and the endpoint per request, so a split measured over
 * kept-alive connections is a split per request. `newConnectionPerRequest` opens one connection
 * a request (`Connection: close`) for what is decided per connection: a TCP split, or faults
 * that must hit new connections. TCP mode always opens one connection per request.
 */
import http from 'node:http';
import net from 'node:net';
import * as grpc from '@grpc/grpc-js';
import { splitHostPort } from '../util/address.js';
import { ECHO_SERVICE, type EchoMessage } from './app.js';

/** What to send, how much and how fast. Exactly one of `url`, `tcp`, `grpc`. */
export interface TrafficOptions {
  /** `http://host:port/path` for HTTP requests. */
  readonly url?: string;
  /** `host:port` for TCP connections (greeting line, then one echoed line). */
  readonly tcp?: string;
  /** `host:port` for gRPC unary calls to `trellis.lab.Echo/Echo` (plaintext). */
  readonly grpc?: string;
  /** How many requests to complete; ignored (may be undefined) when `signal` ends the run. */
  readonly requests?: number;
  /** HTTP method (default GET). */
  readonly method?: string;
  /** HTTP request headers (name, value), in order. */
  readonly headers?: readonly (readonly [string, string])[];
  /** Requests in flight at once (default 1). */
  readonly concurrency?: number;
  /** Pause of each worker after each request, ms (default 0). */
  readonly intervalMs?: number;
  /** HTTP: a new connection for every request instead of kept-alive ones. */
  readonly newConnectionPerRequest?: boolean;
  /** A request not answered within this many ms counts as error `timeout` (default 5000). */
  readonly timeoutMs?: number;
}

/** The counts of a run, printed as JSON by `trellis lab traffic`. */
export interface TrafficSummary {
  /** Requests completed (answered or failed); requests cut short by the end of the run are not counted. */
  requests: number;
  /** HTTP status codes (`"200"`), gRPC status names (`"OK"`), `"ok"` for TCP echoes that came back intact. */
  statuses: Record<string, number>;
  /** Answers per pod that answered (the `pod` the lab app names). */
  answeredBy: Record<string, number>;
  /** Failures by kind: a socket error code (`ECONNREFUSED`, `ECONNRESET`), `timeout`, `closed`, `bad-greeting`, `echo-mismatch`, `body-too-large`. */
  errors: Record<string, number>;
  /** Wall time of the run in ms. */
  durationMs: number;
}

/** Bounds of the client. */
export const TRAFFIC_LIMITS = {
  /** The most of an answer read (HTTP body, TCP lines). */
  maxAnswerBytes: 64 * 1024,
  /** The most distinct keys of each count; further keys are counted under `(other)`. */
  maxKeys: 256,
  /** The most requests in flight. */
  maxConcurrency: 256,
} as const;

type Outcome = { status?: string; pod?: string; error?: string } | undefined;

function count(map: Record<string, number>, key: string): void {
  const k = key in map || Object.keys(map).length < TRAFFIC_LIMITS.maxKeys ? key : '(other)';
  map[k] = (map[k] ?? 0) + 1;
}

function errorKind(err: unknown): string {
  const code = (err as { code?: unknown })?.code;
  return typeof code === 'string' && /^[A-Z0-9_]{1,40}$/.test(code) ? code : 'error';
}

function podOfJson(body: string): string | undefined {
  try {
    const pod = (JSON.parse(body) as { pod?: unknown }).pod;
    return typeof pod === 'string' ? pod : undefined;
  } catch {
    return undefined;
  }
}

function httpRequest(url: URL, options: TrafficOptions, agent: http.Agent | false, signal: AbortSignal): Promise<Outcome> {
  const headers: http.OutgoingHttpHeaders = {};
  for (const [name, value] of options.headers ?? []) headers[name] = value;
  if (options.newConnectionPerRequest) headers.connection = 'close';
  return new Promise((resolve) => {
    const req = http.request(url, { method: options.method ?? 'GET', headers, agent, signal, timeout: options.timeoutMs ?? 5000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        body += chunk;
        if (body.length > TRAFFIC_LIMITS.maxAnswerBytes) {
          res.destroy();
          resolve({ status: String(res.statusCode), error: 'body-too-large' });
        }
      });
      res.on('end', () => resolve({ status: String(res.statusCode), pod: podOfJson(body) }));
      res.on('error', (err) => resolve(signal.aborted ? undefined : { error: errorKind(err) }));
    });
    req.on('timeout', () => {
      req.destroy();
      resolve({ error: 'timeout' });
    });
    req.on('error', (err) => resolve(signal.aborted ? undefined : { error: errorKind(err) }));
    req.end();
  });
}

function tcpRequest(host: string, port: number, n: number, options: TrafficOptions, signal: AbortSignal): Promise<Outcome> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port });
    const ping = `trellis-lab-traffic ${n}\n`;
    let received = '';
    let pod: string | undefined;
    const finish = (outcome: Outcome) => {
      signal.removeEventListener('abort', onAbort);
      socket.destroy();
      resolve(outcome);
    };
    const onAbort = () => finish(undefined);
    signal.addEventListener('abort', onAbort, { once: true });
    socket.setTimeout(options.timeoutMs ?? 5000, () => finish({ error: 'timeout' }));
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      received += chunk;
      if (received.length > TRAFFIC_LIMITS.maxAnswerBytes) return finish({ error: 'body-too-large' });
      if (pod === undefined) {
        const end = received.indexOf('\n');
        if (end < 0) return;
        const m = /^pod=(\S+) namespace=\S+$/.exec(received.slice(0, end));
        if (!m) return finish({ error: 'bad-greeting' });
        pod = m[1];
        received = received.slice(end + 1);
        socket.write(ping);
      }
      if (received.length >= ping.length) finish(received.startsWith(ping) ? { status: 'ok', pod } : { pod, error: 'echo-mismatch' });
    });
    socket.on('end', () => finish({ pod, error: 'closed' }));
    socket.on('error', (err) => finish({ pod, error: errorKind(err) }));
  });
}

type EchoClient = grpc.Client & { Echo(req: EchoMessage, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null, res?: EchoMessage) => void): grpc.ClientUnaryCall };

function grpcRequest(client: EchoClient, n: number, options: TrafficOptions, signal: AbortSignal): Promise<Outcome> {
  return new Promise((resolve) => {
    const call = client.Echo({ message: `trellis-lab-traffic ${n}` }, { deadline: Date.now() + (options.timeoutMs ?? 5000) }, (err, res) => {
      signal.removeEventListener('abort', onAbort);
      if (signal.aborted) return resolve(undefined);
      if (err) return resolve({ status: grpc.status[err.code] ?? String(err.code) });
      resolve({ status: 'OK', pod: res?.pod || undefined });
    });
    const onAbort = () => call.cancel();
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  if (ms <= 0 || signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}

/**
 * Runs the traffic of `options` until `requests` are complete or `signal` aborts (what is in
 * flight then is cancelled and not counted).
 * @throws Error when the options name no target or several, a URL that is not http://, or
 *   neither a request count nor a signal.
 */
export async function runTraffic(options: TrafficOptions, signal?: AbortSignal): Promise<TrafficSummary> {
  const targets = [options.url, options.tcp, options.grpc].filter((t) => t !== undefined);
  if (targets.length !== 1) throw new Error('give exactly one of --url, --tcp and --grpc');
  if (options.requests === undefined && !signal) throw new Error('give --requests or --until-signal');
  const concurrency = Math.min(Math.max(1, Math.floor(options.concurrency ?? 1)), TRAFFIC_LIMITS.maxConcurrency);
  const stop = new AbortController();
  const onAbort = () => stop.abort();
  signal?.addEventListener('abort', onAbort, { once: true });
  if (signal?.aborted) stop.abort();

  let send: (n: number) => Promise<Outcome>;
  let close = () => {};
  if (options.url !== undefined) {
    const url = new URL(options.url);
    if (url.protocol !== 'http:') throw new Error(`--url ${options.url}: only http:// URLs are sent (the sidecar originates TLS)`);
    const agent = options.newConnectionPerRequest ? false : new http.Agent({ keepAlive: true, maxSockets: concurrency });
    send = () => httpRequest(url, options, agent, stop.signal);
    close = () => agent && agent.destroy();
  } else {
    const target = (options.tcp ?? options.grpc) as string;
    const { host, port } = splitHostPort(target);
    if (host === '' || !Number.isInteger(port) || port < 1 || port > 65535) throw new Error(`"${target}" is not HOST:PORT`);
    if (options.tcp !== undefined) {
      send = (n) => tcpRequest(host, port, n, options, stop.signal);
    } else {
      const Client = grpc.makeGenericClientConstructor(ECHO_SERVICE, 'Echo');
      const client = new Client(target, grpc.credentials.createInsecure()) as unknown as EchoClient;
      send = (n) => grpcRequest(client, n, options, stop.signal);
      close = () => client.close();
    }
  }

  const summary: TrafficSummary = { requests: 0, statuses: {}, answeredBy: {}, errors: {}, durationMs: 0 };
  const started = Date.now();
  let issued = 0;
  const worker = async () => {
    while (!stop.signal.aborted && (options.requests === undefined || issued < options.requests)) {
      const outcome = await send(issued++);
      if (outcome === undefined) break;
      summary.requests++;
      if (outcome.status !== undefined) count(summary.statuses, outcome.status);
      if (outcome.pod !== undefined && outcome.error === undefined) count(summary.answeredBy, outcome.pod);
      if (outcome.error !== undefined) count(summary.errors, outcome.error);
      await sleep(options.intervalMs ?? 0, stop.signal);
    }
  };
  try {
    await Promise.all(Array.from({ length: concurrency }, worker));
  } finally {
    signal?.removeEventListener('abort', onAbort);
    close();
  }
  summary.durationMs = Date.now() - started;
  return summary;
}
