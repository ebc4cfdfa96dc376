/**
 * MeshConfig telemetry through real Envoy sidecars (issue 15 item 2): the bookstore lab of
 * examples/bookstore (prefix `tte`), its MeshConfig edited to turn on access logs and Zipkin
 * tracing towards a Zipkin collector this test runs on the lab bridge (a Node HTTP server taking
 * `POST /api/v2/spans`). Envoy ACKs the configuration, a request from bookbuyer to bookstore
 * leaves a line in Envoy's default access-log format on both sidecars' stdout, and the spans of
 * that request reach the collector. Needs root, iproute2, iptables and Envoy; skipped without
 * them, failing under CI=true.
 */
import assert from 'node:assert/strict';
import { readFile, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startLab, type Lab } from '../src/lab/lab.js';
import { ackedVersions, BOOKBUYER, BOOKBUYER_HEADERS, BOOKS_BOUGHT, bookstoreManifests, newConfigurationAcked, traffic } from './helpers/lab.js';
import { envoyTestSkip } from './helpers/envoy.js';
import { LAB_SUITE_PORTS } from './helpers/lab-ports.js';

const PREFIX = 'tte';
const SUBNET = '10.229.9.0/24';
const COLLECTOR_PORT = 19901;
const { skip } = envoyTestSkip(['ip', 'setpriv', 'iptables-restore']);

/** A Zipkin span as Envoy's `HTTP_JSON` (v2) collector endpoint receives it (the fields read here). */
interface ZipkinSpan {
  traceId: string;
  name?: string;
  kind?: string;
  localEndpoint?: { serviceName?: string };
  tags?: Record<string, string>;
}

/** Retries `check` (assertions) every 250 ms until it passes; rethrows its last failure after `timeoutMs`. */
async function untilPasses(check: () => void | Promise<void>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      await check();
      return;
    } catch (error) {
      if (Date.now() > deadline) throw error;
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}

describe('access logs and Zipkin tracing from MeshConfig on the bookstore lab', { skip, timeout: 600_000 }, () => {
  let lab: Lab;
  let manifests: string;
  let collector: http.Server | undefined;
  const spans: ZipkinSpan[] = [];
  const posts: string[] = [];

  before(async () => {
    manifests = await bookstoreManifests(PREFIX);
    lab = await startLab({ manifestsDir: manifests, prefix: PREFIX, subnet: SUBNET, httpAddress: `127.0.0.1:${LAB_SUITE_PORTS.labTelemetry.http}`, xdsPort: LAB_SUITE_PORTS.labTelemetry.xds, stateDir: path.join('/tmp', `${PREFIX}-lab-${process.pid}`) });
    await lab.waitForAllAcked(120_000);
    // The collector on the bridge address: the sidecars reach it (Envoy's own traffic is not intercepted), nothing else does.
    collector = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      let size = 0;
      req.on('data', (c: Buffer) => {
        size += c.length;
        if (size <= 4 << 20) chunks.push(c);
      });
      req.on('end', () => {
        posts.push(`${req.method} ${req.url} ${req.headers['content-type'] ?? ''}`);
        if (req.method === 'POST' && req.url === '/api/v2/spans') {
          try {
            spans.push(...(JSON.parse(Buffer.concat(chunks).toString('utf8')) as ZipkinSpan[]));
          } catch {
            posts.push('unparsable body');
          }
        }
        res.writeHead(202).end();
      });
    });
    await new Promise<void>((resolve, reject) => {
      collector!.once('error', reject);
      collector!.listen(COLLECTOR_PORT, lab.network.bridgeAddress, () => resolve());
    });
  });

  after(async () => {
    await new Promise((r) => (collector ? collector.close(r) : r(undefined)));
    await lab?.stop();
    if (manifests) await rm(manifests, { recursive: true, force: true });
  });

  const envoyLog = (name: string): Promise<string> => {
    const pod = lab.state().pods.find((p) => p.name === name);
    assert.ok(pod, `pod ${name} runs`);
    return readFile(path.join(lab.stateDir, 'pods', pod.netns, 'envoy.log'), 'utf8');
  };
  /** Envoy's default access-log format for `GET /books-bought` answered 200. */
  const ACCESS_LINE = /^\[\d{4}-\d\d-\d\dT[\d:.]+Z\] "GET \/books-bought HTTP\/1\.1" 200 /m;

  it('sends no access log and no tracing while the MeshConfig does not ask', async () => {
    // No traffic here: the client sidecar's pooled connections would stay on the inbound listener's old chains (drained, not cut).
    const proxies = (await (await fetch(`http://${lab.controllerHttp}/debug/proxies`)).json()) as { uuid: string }[];
    assert.ok(proxies.length > 0);
    for (const { uuid } of proxies) {
      const dump = await (await fetch(`http://${lab.controllerHttp}/debug/config_dump?proxy=${uuid}`)).text();
      assert.doesNotMatch(dump, /access_log"|envoy\.tracers\.zipkin|envoy-tracing-cluster/, uuid);
    }
  });

  it('turned on: Envoy ACKs, a request is logged on both sidecars and its spans reach the collector', async () => {
    const before = (await ackedVersions(lab, 'bookbuyer/bookbuyer')).acked;
    const edited = Date.now();
    // The example's MeshConfig (spec.traffic last) with spec.observability added.
    const file = path.join(manifests, 'meshconfig.yaml');
    const observability = [
      '  observability:',
      '    enableAccessLog: true',
      '    tracing:',
      '      enable: true',
      `      address: ${lab.network.bridgeAddress}`,
      `      port: ${COLLECTOR_PORT}`,
      '      endpoint: /api/v2/spans',
      '      sampledFraction: 1',
    ];
    await writeFile(file, `${(await readFile(file, 'utf8')).trimEnd()}\n${observability.join('\n')}\n`);
    await newConfigurationAcked(lab, 'bookbuyer/bookbuyer', before, edited);
    await lab.waitForAllAcked(60_000);
    const s = await traffic(lab, BOOKBUYER, ['--url', BOOKS_BOUGHT, '--requests', '5', ...BOOKBUYER_HEADERS]);
    assert.equal(s.statuses?.['200'] ?? 0, 5, JSON.stringify(s));
    const pods = lab.state().pods;
    const buyer = pods.find((p) => p.namespace === 'bookbuyer')!.name;
    const stores = pods.filter((p) => p.namespace === 'bookstore').map((p) => p.name);
    await untilPasses(async () => assert.match(await envoyLog(buyer), ACCESS_LINE, 'the client sidecar logs the request'), 30_000);
    await untilPasses(async () => {
      const logs = await Promise.all(stores.map(envoyLog));
      const lines = logs.flatMap((l) => l.split('\n').filter((x) => x.includes('books') || x.startsWith('['))).slice(-10);
      assert.ok(logs.some((l) => ACCESS_LINE.test(l)), `a bookstore sidecar logs the request: ${lines.join('\n')}`);
    }, 30_000);
    // Envoy's Zipkin tracer flushes every 5 s: wait for spans of both sides.
    await untilPasses(() => {
      assert.ok(posts.some((p) => p.startsWith('POST /api/v2/spans application/json')), `collector saw ${JSON.stringify(posts)}`);
      const bought = spans.filter((sp) => JSON.stringify(sp).includes('/books-bought'));
      assert.ok(bought.some((sp) => sp.kind === 'CLIENT'), `a client span: ${JSON.stringify(bought.slice(0, 2))}`);
      assert.ok(bought.some((sp) => sp.kind === 'SERVER'), `a server span: ${JSON.stringify(bought.slice(0, 2))}`);
      // One request's client and server spans share a trace.
      const clientTraces = new Set(bought.filter((sp) => sp.kind === 'CLIENT').map((sp) => sp.traceId));
      assert.ok(bought.some((sp) => sp.kind === 'SERVER' && clientTraces.has(sp.traceId)), 'client and server spans of one trace');
    }, 60_000);
    for (const name of [buyer, ...stores]) assert.doesNotMatch(await envoyLog(name), /Deprecated field|deprecated option/, name);
  });
});
