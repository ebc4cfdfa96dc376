/**
 * The slow-reader attack (issue 12): a mesh proxy that stops reading its ADS stream and keeps
 * sending requests of 2 000 resource names each. Starts a controller (`--repo`, default this
 * checkout) on the bookstore example, forks an attacker with a valid mesh identity (an mTLS
 * client certificate from the controller's CA, or `node.id` on the plaintext listener) that
 * never reads (a raw HTTP/2 stream kept paused, the default, or grpc-js with `call.pause()`) and writes requests as fast as its stream takes them
 * (reconnecting whenever the controller ends the stream), and meanwhile samples the
 * controller's RSS (`/proc/PID/status` VmRSS) and `/healthz` latency. Stops at `--seconds`, at
 * `--max-rss-mb`, or when the controller dies; always kills the controller it started.
 *
 * ```sh
 * node --import tsx bench/slow-reader.ts [--repo DIR] [--mode sotw|delta] [--transport mtls|plaintext] [--client http2|grpc]
 *      [--seconds 30] [--max-rss-mb 2048] [--names 2000] [--port-base P] [--controller-arg=--xds-unread-timeout=10s ...]
 * ```
 * Prints a JSON summary (and a sample every 2 s on stderr). Figures are benchmark output.
 */
import 'reflect-metadata';
import { fork } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import http2 from 'node:http2';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { PROTO_LOADER_OPTIONS, encodeMessage } from '../src/api/codec.js';
import { PUSH_ORDER } from '../src/api/type-urls.js';
import { CertificateAuthority } from '../src/certificate/authority.js';
import { CertificateManager } from '../src/certificate/manager.js';
import { proxyCommonName } from '../src/proxy/types.js';
import { grpcFrame } from '../test/helpers/raw-ads-stream.js';
import { ControllerProcess, killAllChildren, sampleProcess } from './processes.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const UUID = '5c1e0a1d-7e57-4bad-a77a-c0ffee000001';
const NAMESPACE = 'bookbuyer';
const SERVICE_ACCOUNT = 'bookbuyer';
const ADS_SERVICE = 'envoy.service.discovery.v3.AggregatedDiscoveryService';

interface Args {
  repo: string;
  mode: 'sotw' | 'delta';
  transport: 'mtls' | 'plaintext';
  client: 'grpc' | 'http2';
  seconds: number;
  maxRssMb: number;
  names: number;
  /** First of the three consecutive ports the controller listens on (mTLS, plaintext, HTTP); 0: free ones. */
  portBase: number;
  controllerArgs: string[];
}

function parseArgs(argv: readonly string[]): Args {
  const args: Args = { repo: path.resolve(HERE, '..'), mode: 'sotw', transport: 'mtls', client: 'http2', seconds: 30, maxRssMb: 2048, names: 2000, portBase: 0, controllerArgs: [] };
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i].split(/=(.*)/s, 2);
    const value = (): string => inline ?? argv[++i];
    if (flag === '--repo') args.repo = path.resolve(value());
    else if (flag === '--mode') args.mode = value() === 'delta' ? 'delta' : 'sotw';
    else if (flag === '--transport') args.transport = value() === 'plaintext' ? 'plaintext' : 'mtls';
    else if (flag === '--client') args.client = value() === 'grpc' ? 'grpc' : 'http2';
    else if (flag === '--seconds') args.seconds = Number(value());
    else if (flag === '--max-rss-mb') args.maxRssMb = Number(value());
    else if (flag === '--names') args.names = Number(value());
    else if (flag === '--port-base') args.portBase = Number(value());
    else if (flag === '--controller-arg') args.controllerArgs.push(value());
    else throw new Error(`unknown argument ${argv[i]}`);
  }
  return args;
}

/** What the attacker child is told over IPC. */
interface AttackOrder {
  address: string;
  mode: 'sotw' | 'delta';
  client: 'grpc' | 'http2';
  names: number;
  /** PEMs for mTLS, or undefined for plaintext. */
  tls?: { ca: string; key: string; cert: string };
}

/** One attacker stream: writes requests, never reads; `ended` once the controller (or the connection) ends it. */
interface AttackStream {
  /** Writes one request; resolves once the stream takes more (HTTP/2 flow control), or it ended. */
  write(request: object): Promise<void>;
  readonly ended: boolean;
  close(): void;
}

/** Opens streams on one connection: grpc-js with `call.pause()`, or raw HTTP/2 that never reads. */
type AttackConnection = (method: string) => AttackStream;

function grpcConnection(order: AttackOrder): AttackConnection {
  const def = protoLoader.loadSync('envoy/service/discovery/v3/ads.proto', { ...PROTO_LOADER_OPTIONS, includeDirs: [...PROTO_LOADER_OPTIONS.includeDirs] });
  const Client = grpc.makeGenericClientConstructor(def[ADS_SERVICE] as grpc.ServiceDefinition, 'ADS');
  const credentials = order.tls
    ? grpc.credentials.createSsl(Buffer.from(order.tls.ca), Buffer.from(order.tls.key), Buffer.from(order.tls.cert))
    : grpc.credentials.createInsecure();
  const client = new Client(order.address, credentials, order.tls ? { 'grpc.ssl_target_name_override': 'localhost', 'grpc.default_authority': 'localhost' } : {});
  return (method) => {
    const call = (client as unknown as Record<string, () => grpc.ClientDuplexStream<object, unknown>>)[method]();
    call.pause(); // stop reading: grpc-js stops pulling from its HTTP/2 stream once 16 messages wait
    const s = { ended: false, write: (req: object) => writeWithBackpressure(call, call.write(req), s), close: () => call.cancel() };
    for (const event of ['error', 'status', 'close']) call.on(event, () => (s.ended = true));
    return s;
  };
}

function http2Connection(order: AttackOrder): AttackConnection {
  const session = http2.connect(
    `${order.tls ? 'https' : 'http'}://${order.address}`,
    order.tls ? { ca: order.tls.ca, key: order.tls.key, cert: order.tls.cert, servername: 'localhost', ALPNProtocols: ['h2'] } : {},
  );
  session.on('error', () => undefined);
  return (method) => {
    const stream = session.request({ ':method': 'POST', ':path': `/${ADS_SERVICE}/${method}`, 'content-type': 'application/grpc', te: 'trailers' });
    stream.pause(); // never read: the controller's writes stop once the stream's window is used up
    const messageType = method === 'DeltaAggregatedResources' ? 'envoy.service.discovery.v3.DeltaDiscoveryRequest' : 'envoy.service.discovery.v3.DiscoveryRequest';
    const s = {
      ended: false,
      write: (req: object) => {
        return writeWithBackpressure(stream, stream.write(grpcFrame(encodeMessage(messageType, req))), s);
      },
      close: () => stream.close(),
    };
    for (const event of ['error', 'close']) stream.on(event, () => (s.ended = true));
    return s;
  };
}

async function writeWithBackpressure(w: NodeJS.EventEmitter, accepted: boolean, s: { ended: boolean }): Promise<void> {
  if (accepted || s.ended) return;
  await new Promise<void>((resolve) => {
    const done = (): void => {
      w.off('drain', done);
      w.off('close', done);
      resolve();
    };
    w.on('drain', done);
    w.on('close', done);
  });
}

/** The attacker: one stream at a time, never read, requests written as fast as the stream takes them. */
async function attack(order: AttackOrder): Promise<void> {
  const connect = order.client === 'http2' ? http2Connection(order) : grpcConnection(order);
  const nodeId = proxyCommonName(UUID, 'sidecar', NAMESPACE, SERVICE_ACCOUNT);
  let sent = 0;
  let streams = 0;
  let serial = 0;
  setInterval(() => process.send?.({ sent, streams }), 500).unref();
  for (;;) {
    streams++;
    const stream = connect(order.mode === 'delta' ? 'DeltaAggregatedResources' : 'StreamAggregatedResources');
    let first = true;
    while (!stream.ended) {
      const type = PUSH_ORDER[sent % PUSH_ORDER.length];
      const names = Array.from({ length: order.names }, (_, j) => `attack-${serial}-${j}.bookstore.svc.cluster.local`);
      serial++;
      const node = first ? { node: { id: nodeId } } : {};
      first = false;
      sent++;
      await stream.write(order.mode === 'delta' ? { type_url: type, resource_names_subscribe: names, ...node } : { type_url: type, resource_names: names, ...node });
      if (sent % 50 === 0) await new Promise((r) => setImmediate(r));
    }
    stream.close();
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** One sample of the controller under attack. */
interface Sample {
  t: number;
  rssMb: number;
  /** `/healthz` round trip in ms; null when it did not answer within 5 s. */
  healthzMs: number | null;
}

/** The value of one Prometheus sample (`name{labels}` as printed) from `/metrics`, or NaN. */
async function sampleOf(httpPort: number, sample: string): Promise<number> {
  try {
    const text = await (await fetch(`http://127.0.0.1:${httpPort}/metrics`, { signal: AbortSignal.timeout(10_000) })).text();
    const line = text.split('\n').find((l) => l.startsWith(`${sample} `));
    return line ? Number(line.slice(sample.length + 1)) : Number.NaN;
  } catch {
    return Number.NaN;
  }
}

function percentile(values: number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

async function run(args: Args): Promise<void> {
  const work = mkdtempSync(path.join(os.tmpdir(), 'trellis-slow-reader-'));
  const controller = await ControllerProcess.start({
    repoDir: args.repo,
    manifests: path.join(args.repo, 'examples/bookstore'),
    stateDir: path.join(work, 'state'),
    logFile: path.join(work, 'controller.log'),
    logLevel: 'warn',
    ...(args.portBase > 0 ? { ports: [args.portBase, args.portBase + 1, args.portBase + 2] as const } : {}),
    extraArgs: args.controllerArgs,
    readyTimeoutMs: 60_000,
  });
  let tls: AttackOrder['tls'];
  if (args.transport === 'mtls') {
    const manager = new CertificateManager({ ca: await CertificateAuthority.loadOrCreate(path.join(work, 'state')) });
    const cert = await manager.issueProxyCertificate(UUID, NAMESPACE, SERVICE_ACCOUNT, 3600);
    tls = { ca: manager.caPem, key: cert.keyPem, cert: cert.certPem };
    manager.stop();
  }
  const address = `127.0.0.1:${args.transport === 'mtls' ? controller.xdsPort : controller.plaintextPort}`;
  const attacker = fork(fileURLToPath(import.meta.url), ['--attacker'], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  let attackerState = { sent: 0, streams: 0 };
  attacker.on('message', (m: { sent: number; streams: number }) => (attackerState = m));
  const idle = sampleProcess(controller.pid).rssMb;
  attacker.send({ address, mode: args.mode, client: args.client, names: args.names, tls } satisfies AttackOrder);

  const samples: Sample[] = [];
  const started = Date.now();
  let stopReason = `${args.seconds} s elapsed`;
  try {
    while (Date.now() - started < args.seconds * 1000) {
      if (!controller.running) {
        stopReason = 'the controller died';
        break;
      }
      const t0 = performance.now();
      let healthzMs: number | null = null;
      try {
        const res = await fetch(`http://127.0.0.1:${controller.httpPort}/healthz`, { signal: AbortSignal.timeout(5000) });
        await res.text();
        healthzMs = performance.now() - t0;
      } catch {
        // no answer within 5 s (or the controller is gone)
      }
      let rssMb: number;
      try {
        rssMb = sampleProcess(controller.pid).rssMb;
      } catch {
        stopReason = 'the controller died';
        break;
      }
      const sample = { t: (Date.now() - started) / 1000, rssMb: Math.round(rssMb), healthzMs: healthzMs === null ? null : Math.round(healthzMs * 10) / 10 };
      samples.push(sample);
      if (samples.length % 8 === 1) process.stderr.write(`${JSON.stringify({ ...sample, ...attackerState })}\n`);
      if (rssMb >= args.maxRssMb) {
        stopReason = `RSS reached ${args.maxRssMb} MB`;
        break;
      }
      await new Promise((r) => setTimeout(r, 250));
    }
  } finally {
    attacker.kill('SIGKILL');
  }
  const closedUnread = controller.running ? await sampleOf(controller.httpPort, 'trellis_xds_streams_closed_total{reason="unread"}') : Number.NaN;
  const responses = controller.running ? await controller.metric('trellis_xds_responses_total') : Number.NaN;
  await controller.stop(3000);
  const latencies = samples.flatMap((s) => (s.healthzMs === null ? [] : [s.healthzMs]));
  const summary = {
    repo: args.repo,
    mode: args.mode,
    transport: args.transport,
    client: args.client,
    namesPerRequest: args.names,
    controllerArgs: args.controllerArgs,
    stopReason,
    seconds: samples.at(-1)?.t ?? 0,
    requestsSent: attackerState.sent,
    streamsOpened: attackerState.streams,
    streamsClosedUnread: Number.isNaN(closedUnread) ? null : closedUnread,
    responsesWritten: Number.isNaN(responses) ? null : responses,
    rssMb: { idle: Math.round(idle), max: Math.max(...samples.map((s) => s.rssMb)), last: samples.at(-1)?.rssMb },
    healthzMs: {
      p50: percentile(latencies, 50),
      p99: percentile(latencies, 99),
      max: Math.max(...latencies),
      unanswered: samples.length - latencies.length,
      samples: samples.length,
    },
    controllerLog: path.join(work, 'controller.log'),
  };
  process.stdout.write(`${JSON.stringify(summary, null, 2)}\n`);
  rmSync(path.join(work, 'state'), { recursive: true, force: true });
}

if (process.argv.includes('--attacker')) {
  process.once('message', (order: AttackOrder) => void attack(order));
} else {
  process.on('exit', killAllChildren);
  run(parseArgs(process.argv.slice(2))).catch((err: unknown) => {
    process.stderr.write(`slow-reader: ${err instanceof Error ? err.stack : String(err)}\n`);
    killAllChildren();
    process.exit(1);
  });
}
