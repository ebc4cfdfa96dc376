import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { splitHostPort } from '../util/address.js';

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
  /**
   * The status of one policy object (`/debug/policy-status?kind=K&namespace=N&name=X`), or
   * undefined when there is no such object.
   */
  policyStatus(kind: string, namespace: string, name: string): unknown;
}

/**
 * The operations HTTP server: `/healthz` (200 while the process runs), `/readyz` (200 once
 * the sources synced, else 503), `/metrics` (Prometheus text format), `/debug/proxies`,
 * `/debug/config_dump?proxy=<uuid>`, `/debug/policies` and
 * `/debug/policy-status?kind=K&namespace=N&name=X` (JSON). Anything else is 404.
 */
export class OpsServer {
  private server: http.Server | undefined;

  constructor(
    private readonly sources: OpsSources,
    private readonly logger: Logger,
  ) {}

  /**
   * Listens on `host:port` (port 0 picks a free one).
   * @returns the port it listens on.
   * @throws Error when the address cannot be bound.
   */
  async start(address: string): Promise<number> {
    const { host, port } = splitHostPort(address);
    const server = http.createServer((req, res) => {
      this.handle(req, res).catch((err: unknown) => {
        this.logger.error({ err }, 'ops request failed');
        if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' });
        res.end('internal error\n');
      });
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => resolve());
    });
    this.server = server;
    return (server.address() as AddressInfo).port;
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://localhost');
    const json = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(`${JSON.stringify(body, null, 2)}\n`);
    };
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
        return json(200, this.sources.policies());
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

  /** Stops listening and closes open connections. */
  async stop(): Promise<void> {
    const server = this.server;
    if (!server) return;
    this.server = undefined;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
