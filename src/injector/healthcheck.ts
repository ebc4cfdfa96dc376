/**
 * `trellis healthcheck`, the `osm-healthcheck` container of a pod whose `tcpSocket` probes the
 * injector rewrote: `GET /osm-healthcheck` with header `Original-Tcp-Port: <port>` answers 200
 * when a TCP connection to 127.0.0.1:<port> opens within the timeout, 503 when it does not,
 * 400 without a valid header (as OSM's osm-healthcheck).
 */
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { HEALTHCHECK_PATH, ORIGINAL_TCP_PORT_HEADER } from './probes.js';

/** How long a probed connection may take to open, in ms. */
export const HEALTHCHECK_CONNECT_TIMEOUT_MS = 1000;

function tcpOpens(port: number, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

/** Starts the healthcheck server on `host:port`; resolves once listening. */
export async function startHealthcheckServer(options: { host?: string; port: number }): Promise<{ port: number; close(): Promise<void> }> {
  const server = http.createServer((req, res) => {
    const reply = (status: number, text: string) => {
      res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8' });
      res.end(`${text}\n`);
    };
    if (new URL(req.url ?? '/', 'http://healthcheck').pathname !== HEALTHCHECK_PATH) return reply(404, 'not found');
    const header = req.headers[ORIGINAL_TCP_PORT_HEADER.toLowerCase()];
    const port = typeof header === 'string' && /^\d{1,5}$/.test(header) ? Number(header) : NaN;
    if (!(port >= 1 && port <= 65535)) return reply(400, `header ${ORIGINAL_TCP_PORT_HEADER} is not a port`);
    void tcpOpens(port, HEALTHCHECK_CONNECT_TIMEOUT_MS).then((ok) => reply(ok ? 200 : 503, ok ? `port ${port} accepts connections` : `port ${port} does not accept connections`));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host ?? '0.0.0.0', () => resolve());
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
