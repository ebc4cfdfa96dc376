import * as grpc from '@grpc/grpc-js';
import { mkdir, mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import assert from 'node:assert/strict';
import os from 'node:os';
import path from 'node:path';
import type { TestContext } from 'node:test';
import pino from 'pino';
import { stringify } from 'yaml';
import { runController, type RunningController } from '../../src/main.js';
import { proxyCommonName } from '../../src/proxy/types.js';

/** The generic unary method every backend serves: the reply is the backend's name (UTF-8 bytes). */
export const HELLO_METHOD = '/trellis.test.Greeter/Hello';
/** Service port of `hello` and its split backends, what clients dial: `xds:///hello.greet:50051`. */
export const SERVICE_PORT = 50051;
/** The target proxyless clients dial. */
export const HELLO_TARGET = `xds:///hello.greet:${SERVICE_PORT}`;

/** One real gRPC backend server: its name (the reply), the Service it backs, its loopback IP. */
export interface Backend {
  readonly name: string;
  readonly service: 'hello-v1' | 'hello-v2';
  readonly ip: string;
}

/** hello-v1 has two endpoints (v1-a, v1-b), hello-v2 one; distinct loopback IPs, one port. */
export const BACKENDS: readonly Backend[] = [
  { name: 'v1-a', service: 'hello-v1', ip: '127.0.0.2' },
  { name: 'v1-b', service: 'hello-v1', ip: '127.0.0.3' },
  { name: 'v2-a', service: 'hello-v2', ip: '127.0.0.4' },
];

const raw = (b: Buffer): Buffer => b;

function listen(server: grpc.Server, address: string): Promise<number> {
  return new Promise((resolve, reject) => server.bindAsync(address, grpc.ServerCredentials.createInsecure(), (err, port) => (err ? reject(err) : resolve(port))));
}

/** Starts one gRPC server per backend; all on the same port (chosen by the first bind). */
async function startBackends(): Promise<{ servers: grpc.Server[]; port: number }> {
  const servers: grpc.Server[] = [];
  let port = 0;
  for (const b of BACKENDS) {
    const server = new grpc.Server();
    server.addService(
      { Hello: { path: HELLO_METHOD, requestStream: false, responseStream: false, requestSerialize: raw, requestDeserialize: raw, responseSerialize: raw, responseDeserialize: raw } },
      { Hello: (_call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => cb(null, Buffer.from(b.name)) },
    );
    port = await listen(server, `${b.ip}:${port}`);
    servers.push(server);
  }
  return { servers, port };
}

type Doc = Record<string, unknown>;

function endpoints(service: string, ips: readonly string[], port: number): Doc {
  return {
    apiVersion: 'v1',
    kind: 'Endpoints',
    metadata: { name: service, namespace: 'greet' },
    subsets: ips.length > 0 ? [{ addresses: ips.map((ip) => ({ ip })), ports: [{ name: 'grpc', port }] }] : [],
  };
}

function split(v1: number, v2: number): Doc {
  return {
    apiVersion: 'split.smi-spec.io/v1alpha2',
    kind: 'TrafficSplit',
    metadata: { name: 'hello-split', namespace: 'greet' },
    spec: { service: 'hello.greet', backends: [{ service: 'hello-v1', weight: v1 }, { service: 'hello-v2', weight: v2 }] },
  };
}

/**
 * The mesh proxyless tests run: namespaces `greet` (services `hello` = the TrafficSplit apex,
 * `hello-v1`, `hello-v2`, gRPC on port {@link SERVICE_PORT}) and `client`; SMI mode, where
 * `client/greeter` may reach both versions and `client/stranger` has no TrafficTarget.
 */
function meshDocuments(port: number, weights: [number, number]): Map<string, Doc[]> {
  const ns = (name: string): Doc => ({ apiVersion: 'v1', kind: 'Namespace', metadata: { name, labels: { 'openservicemesh.io/monitored-by': 'osm' } } });
  const sa = (namespace: string, name: string): Doc => ({ apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name, namespace } });
  const service = (name: string, selector: Record<string, string>, clusterIP: string): Doc => ({
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace: 'greet' },
    spec: { clusterIP, selector, ports: [{ name: 'grpc', port: SERVICE_PORT, targetPort: port, appProtocol: 'grpc' }] },
  });
  const pod = (b: Backend): Doc => ({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: `hello-${b.name}`, namespace: 'greet', labels: { app: 'hello', version: b.service.slice('hello-'.length) } },
    spec: { serviceAccountName: b.service, containers: [{ name: 'hello', image: 'hello', ports: [{ name: 'grpc', containerPort: port }] }] },
    // No status.podIP: the backends listen on 127.0.0.x, which a Pod may not have (the manifests
    // refuse it); the Endpoints objects carry those addresses (a loopback endpoint is a warning).
    status: { phase: 'Running' },
  });
  const target = (destination: string): Doc => ({
    apiVersion: 'access.smi-spec.io/v1alpha3',
    kind: 'TrafficTarget',
    metadata: { name: destination, namespace: 'greet' },
    spec: {
      destination: { kind: 'ServiceAccount', name: destination, namespace: 'greet' },
      sources: [{ kind: 'ServiceAccount', name: 'greeter', namespace: 'client' }],
      rules: [{ kind: 'HTTPRouteGroup', name: 'hello-routes', matches: ['everything'] }],
    },
  });
  return new Map<string, Doc[]>([
    [
      'mesh.yaml',
      [
        ns('greet'),
        ns('client'),
        {
          apiVersion: 'config.openservicemesh.io/v1alpha2',
          kind: 'MeshConfig',
          metadata: { name: 'osm-mesh-config', namespace: 'osm-system' },
          spec: { traffic: { enablePermissiveTrafficPolicyMode: false, enableEgress: false }, featureFlags: { enableRetryPolicy: true } },
        },
        sa('client', 'greeter'),
        sa('client', 'stranger'),
        sa('greet', 'hello-v1'),
        sa('greet', 'hello-v2'),
        service('hello', { app: 'hello' }, '10.96.50.1'),
        service('hello-v1', { app: 'hello', version: 'v1' }, '10.96.50.2'),
        service('hello-v2', { app: 'hello', version: 'v2' }, '10.96.50.3'),
        ...BACKENDS.map(pod),
      ],
    ],
    [
      'access.yaml',
      [
        {
          apiVersion: 'specs.smi-spec.io/v1alpha4',
          kind: 'HTTPRouteGroup',
          metadata: { name: 'hello-routes', namespace: 'greet' },
          spec: { matches: [{ name: 'everything', pathRegex: '.*', methods: ['*'] }] },
        },
        target('hello-v1'),
        target('hello-v2'),
        // A retry policy on the apex route, so both clients are sent (and must accept) a retry_policy.
        {
          apiVersion: 'policy.openservicemesh.io/v1alpha1',
          kind: 'Retry',
          metadata: { name: 'greeter-retry', namespace: 'client' },
          spec: {
            source: { kind: 'ServiceAccount', name: 'greeter', namespace: 'client' },
            destinations: [{ kind: 'Service', name: 'hello', namespace: 'greet' }],
            retryPolicy: { retryOn: 'unavailable', perTryTimeout: '2s', numRetries: 2, retryBackoffBaseInterval: '25ms' },
          },
        },
      ],
    ],
    ['endpoints-v1.yaml', [endpoints('hello-v1', BACKENDS.filter((b) => b.service === 'hello-v1').map((b) => b.ip), port)]],
    ['endpoints-v2.yaml', [endpoints('hello-v2', BACKENDS.filter((b) => b.service === 'hello-v2').map((b) => b.ip), port)]],
    ['split.yaml', [split(...weights)]],
  ]);
}

async function writeDocs(file: string, docs: readonly Doc[]): Promise<void> {
  // Write a sibling then rename, so the watcher never reads a half-written file.
  const tmp = `${file}.tmp-${process.pid}`;
  await writeFile(tmp, docs.map((d) => stringify(d)).join('---\n'));
  await rename(tmp, file);
}

/** A JSON view of `/debug/proxies`, as much as the tests read. */
export interface ProxyView {
  uuid: string;
  identity: string;
  clientType: string;
  streams: { types: Record<string, { lastNack: { message: string; version: string } | null; versionAcked: string | null }> }[];
}

/** The controller on a temp manifests dir with the proxyless mesh, and its real backend servers. */
export class ProxylessMesh {
  private constructor(
    readonly dir: string,
    readonly running: RunningController,
    private readonly servers: grpc.Server[],
    readonly backendPort: number,
  ) {}

  /**
   * Starts the backends, writes the manifests (TrafficSplit v1/v2 = `weights`) and starts the
   * controller in-process with every listener on 127.0.0.1:0 (plaintext ADS included).
   */
  static async start(weights: [number, number]): Promise<ProxylessMesh> {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'trellis-proxyless-'));
    const manifests = path.join(dir, 'manifests');
    await mkdir(manifests);
    const { servers, port } = await startBackends();
    for (const [file, docs] of meshDocuments(port, weights)) await writeDocs(path.join(manifests, file), docs);
    const running = await runController({
      manifests,
      meshName: 'osm',
      stateDir: path.join(dir, 'state'),
      xdsAddress: '127.0.0.1:0',
      xdsPlaintextAddress: '127.0.0.1:0',
      httpAddress: '127.0.0.1:0',
      resyncIntervalMs: 60_000,
      debounceQuietMs: 20,
      logger: pino({ level: process.env.TRELLIS_TEST_LOG ?? 'silent' }),
    });
    return new ProxylessMesh(dir, running, servers, port);
  }

  /** `host:port` of the plaintext ADS listener. */
  get xdsAddress(): string {
    return `127.0.0.1:${this.running.xdsPlaintextPort}`;
  }

  /**
   * An xDS bootstrap (gRFC A27 "Bootstrap File") for a client of identity `<ns>/<sa>`:
   * the plaintext ADS listener, `node.id` = a fresh proxy CommonName, `xds_v3`.
   */
  bootstrap(namespace: string, serviceAccount: string, uuid: string): Record<string, unknown> {
    return {
      xds_servers: [{ server_uri: this.xdsAddress, channel_creds: [{ type: 'insecure' }], server_features: ['xds_v3'] }],
      node: { id: proxyCommonName(uuid, 'sidecar', namespace, serviceAccount), locality: { zone: 'test' } },
    };
  }

  /** Rewrites the TrafficSplit with new weights for hello-v1 and hello-v2. */
  async writeSplit(v1: number, v2: number): Promise<void> {
    await writeDocs(path.join(this.dir, 'manifests', 'split.yaml'), [split(v1, v2)]);
  }

  /** Rewrites the Endpoints of a backend's service without that backend's IP. */
  async removeEndpoint(backend: Backend): Promise<void> {
    const ips = BACKENDS.filter((b) => b.service === backend.service && b !== backend).map((b) => b.ip);
    await writeDocs(path.join(this.dir, 'manifests', `endpoints-${backend.service.slice('hello-'.length)}.yaml`), [endpoints(backend.service, ips, this.backendPort)]);
  }

  /** GETs a JSON document from the operations server. */
  async getJson<T>(urlPath: string): Promise<T> {
    const res = await fetch(`http://127.0.0.1:${this.running.httpPort}${urlPath}`);
    if (res.status !== 200) throw new Error(`${urlPath}: HTTP ${res.status}`);
    return (await res.json()) as T;
  }

  /** `/debug/proxies`. */
  proxies(): Promise<ProxyView[]> {
    return this.getJson<ProxyView[]>('/debug/proxies');
  }

  /** Every NACK the connected proxies' streams recorded, as `uuid TYPE: message`. */
  async nacks(): Promise<string[]> {
    const out: string[] = [];
    for (const p of await this.proxies()) {
      for (const s of p.streams) {
        for (const [type, t] of Object.entries(s.types)) if (t.lastNack) out.push(`${p.identity} ${type}: ${t.lastNack.message}`);
      }
    }
    return out;
  }

  /** Stops the controller and the backends and removes the temp dir. */
  async stop(): Promise<void> {
    await this.running.stop();
    for (const s of this.servers) s.forceShutdown();
    await rm(this.dir, { recursive: true, force: true });
  }
}

/** The share (0–100) of `counts` that went to backends of `service`. */
export function sharePercent(counts: Readonly<Record<string, number>>, service: Backend['service']): number {
  const total = Object.values(counts).reduce((a, b) => a + b, 0);
  const hits = BACKENDS.filter((b) => b.service === service).reduce((sum, b) => sum + (counts[b.name] ?? 0), 0);
  return total === 0 ? 0 : (100 * hits) / total;
}

/**
 * Polls `probe` until `done` holds for its result, for at most `timeoutMs` milliseconds.
 * @returns the first satisfying result, with the time it was seen (ms since the epoch).
 * @throws Error naming `what` and the last result when the time runs out.
 */
export async function pollUntil<T>(probe: () => Promise<T>, done: (v: T) => boolean, timeoutMs: number, what: string): Promise<{ value: T; at: number }> {
  const deadline = Date.now() + timeoutMs;
  let last: T | undefined;
  for (;;) {
    last = await probe();
    if (done(last)) return { value: last, at: Date.now() };
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; last: ${JSON.stringify(last)}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** What a batch of a proxyless client's RPCs came to: replies by backend name, errors by status name. */
export interface Outcome {
  counts: Record<string, number>;
  errors: Record<string, number>;
}

/** How far (in percentage points) a measured share may be from its TrafficSplit weight. */
export const SPLIT_TOLERANCE = 5;

/** Whether the share `actual` is within {@link SPLIT_TOLERANCE} of the weight `expected`. */
export function within(actual: number, expected: number): boolean {
  return Math.abs(actual - expected) <= SPLIT_TOLERANCE;
}

/** One proxyless client of identity `client/greeter`, as {@link assertSplitScenario} drives it. */
export interface SplitScenarioClient {
  /** Makes the first RPC, waiting for the client to be ready (xDS applied), with a 10 s deadline. */
  first(): Promise<Outcome>;
  /** Makes `n` RPCs with the client's default deadline. */
  run(n: number): Promise<Outcome>;
  /** Checks to make once the initial split is measured (before it changes). */
  afterInitialSplit?(): Promise<void>;
}

/**
 * What every proxyless client must do on a mesh started with the split 75/25: split RPCs by the
 * TrafficSplit, follow a new split after the file changes, and stop using a removed
 * endpoint.
 * @returns the outcome of 1000 RPCs after v1-b's endpoint was removed.
 */
export async function assertSplitScenario(mesh: ProxylessMesh, client: SplitScenarioClient, t: TestContext): Promise<Outcome> {
  const first = await client.first();
  assert.deepEqual(first.errors, {}, 'first RPC succeeds once xDS is applied');

  const initial = await client.run(1000);
  assert.deepEqual(initial.errors, {});
  const v1 = sharePercent(initial.counts, 'hello-v1');
  assert.ok(within(v1, 75), `hello-v1 share ${v1.toFixed(1)}% of 1000, want 75 ± ${SPLIT_TOLERANCE}: ${JSON.stringify(initial.counts)}`);
  assert.ok((initial.counts['v1-a'] ?? 0) > 0 && (initial.counts['v1-b'] ?? 0) > 0, 'both hello-v1 endpoints used');
  await client.afterInitialSplit?.();

  // New weights: they hold over a window of 200 RPCs (how soon is the benchmark's split_change, not a test's).
  const changedAt = Date.now();
  await mesh.writeSplit(20, 80);
  const seen = await pollUntil(() => client.run(200), (o) => Object.keys(o.errors).length === 0 && within(sharePercent(o.counts, 'hello-v1'), 20), 5000, 'the 20/80 split');
  t.diagnostic(`new split held ${seen.at - changedAt} ms after the file changed`);
  const after = await client.run(1000);
  assert.deepEqual(after.errors, {});
  const v1After = sharePercent(after.counts, 'hello-v1');
  assert.ok(within(v1After, 20), `hello-v1 share ${v1After.toFixed(1)}% after the change, want 20 ± ${SPLIT_TOLERANCE}`);

  // Remove v1-b's endpoint: once the client has the new assignment, nothing reaches it.
  const v1b = BACKENDS.find((b) => b.name === 'v1-b')!;
  await mesh.writeSplit(50, 50);
  await mesh.removeEndpoint(v1b);
  await pollUntil(() => client.run(200), (o) => Object.keys(o.errors).length === 0 && !o.counts['v1-b'] && within(sharePercent(o.counts, 'hello-v1'), 50), 5000, 'v1-b removed');
  const removed = await client.run(1000);
  assert.deepEqual(removed.errors, {});
  assert.equal(removed.counts['v1-b'] ?? 0, 0, `no RPC reaches the removed endpoint: ${JSON.stringify(removed.counts)}`);
  return removed;
}
