/**
 * A bookstore pod through the sidecar injector for real, and the lab running what the patched
 * spec says: an AdmissionReview over HTTPS to the running injector (its namespace, MeshConfig and
 * bootstrap Secret on the loopback fake API server; the CA is the running controller's), the
 * returned patch applied; then, in a lab network namespace, the init container's args run through
 * `trellis iptables-init`, real Envoy starts from the bootstrap Secret's files as uid 1500 and
 * connects to the controller, and from the host (as the kubelet would): the rewritten readiness
 * probe succeeds through 15902, the app's own port is captured (no plain HTTP reaches it), an
 * inbound port excluded by the MeshConfig bypasses Envoy, and 15010 answers with Envoy's metrics.
 * Then, with SMI enforced (examples/bookstore's TrafficTargets), two more injected pods: bookbuyer
 * reaches bookstore-v1 through both Envoys (mTLS, the bookstore Envoy's RBAC allowed it, the app
 * saw it), bookthief is refused (the app and bookstore's Envoy never see it), and bookbuyer's
 * `openservicemesh.io/outbound-port-exclusion-list` sends its port-14099 traffic past its Envoy.
 *
 * Lab adaptation: the Secret is written to a directory instead of mounted at /etc/envoy (the lab
 * has no mount namespace per pod), so the bootstrap's `/etc/envoy/` paths are that directory.
 * Needs root, `ip`, `iptables-restore`, `setpriv`, python3 and Envoy; run under the lab lock.
 */
import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { chmod, chown, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import type { V1Pod } from '@kubernetes/client-node';
import { pino } from 'pino';
import { runInjector, type RunningInjector } from '../src/injector/run.js';
import { ENVOY_UID, startEnvoy, type EnvoyProcess } from '../src/lab/envoy.js';
import { createLabNetwork, createPodNetwork, removeLabNetwork, type LabNetwork, type PodNetwork } from '../src/lab/network.js';
import { runController, type RunningController } from '../src/main.js';
import { loadKubeConfig } from '../src/sources/kubernetes/kubernetes-source.js';
import { admitPod } from './helpers/admission.js';
import { envoyTestSkip } from './helpers/envoy.js';
import { FakeKubeApiServer } from './helpers/fake-kube-apiserver.js';
import { eventually } from './helpers/wait.js';

const run = promisify(execFile);
const requirement = envoyTestSkip(['ip', 'setpriv', 'iptables-restore', 'python3']);
const PREFIX = 's8j';
const SUBNET = '10.219.5.0/26';
const XDS_PORT = 19470;
const HTTP_PORT = 19471;
const POD_LAB_ADDRESS = '10.219.5.10';
/** The bookstore v1 pod's IP in examples/bookstore: the controller's endpoint of bookstore-v1. */
const POD_IP = '10.244.3.10';
const APP_PORT = 14001;
const EXCLUDED_PORT = 14099;
/** bookstore-v1's ClusterIP in examples/bookstore (one backend: the lab has no bookstore-v2 pod). */
const BOOKSTORE_V1_IP = '10.96.10.2';
/** The client pods, at their examples/bookstore pod IPs. */
const CLIENTS = {
  bookbuyer: { podIp: '10.244.1.10', labAddress: '10.219.5.11' },
  bookthief: { podIp: '10.244.2.10', labAddress: '10.219.5.12' },
} as const;

/**
 * The bookstore app: answers `GET /ready` with "ready <port>" and any other path with
 * "bookstore <port> <path>" on every port given, and prints "seen <port> <path>" for each request.
 */
const APP = `
import http.server, socketserver, sys, threading
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        port = self.server.server_address[1]
        print('seen %d %s' % (port, self.path), flush=True)
        body = (('ready %d' % port) if self.path == '/ready' else ('bookstore %d %s' % (port, self.path))).encode()
        self.send_response(200)
        self.send_header('content-length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
servers = [socketserver.ThreadingTCPServer(('0.0.0.0', int(p)), H) for p in sys.argv[1:]]
for s in servers:
    threading.Thread(target=s.serve_forever, daemon=True).start()
print('ready', flush=True)
threading.Event().wait()
`;

function get(url: string, socketPath?: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const options: http.RequestOptions = socketPath ? { socketPath, path: url } : { host: new URL(url).hostname, port: new URL(url).port, path: new URL(url).pathname };
    const req = http.get({ ...options, timeout: 5000 }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
  });
}

describe('a bookstore pod injected for real, run in the lab (real Envoy)', { skip: requirement.skip }, () => {
  let lab: LabNetwork;
  let work: string;
  let controller: RunningController | undefined;
  let api: FakeKubeApiServer | undefined;
  let injector: RunningInjector | undefined;
  let pod: PodNetwork;
  let app: ChildProcess | undefined;
  /** What the bookstore app printed ("seen <port> <path>" lines). */
  let appOutput = '';
  const envoys: EnvoyProcess[] = [];
  let patched: V1Pod;
  let podDir: string;

  /** Writes the pod's bootstrap Secret (as its volume names it) to `dir`, owned by Envoy's uid: the lab's "mount" of /etc/envoy. */
  async function writeSecretFiles(of: V1Pod, dir: string): Promise<void> {
    const volume = of.spec!.volumes!.find((v) => v.name === 'envoy-bootstrap-config-volume')!;
    const secret = api!.get('Secret', of.metadata!.namespace, volume.secret!.secretName!) as unknown as { data: Record<string, string> };
    await mkdir(dir, { recursive: true });
    for (const [file, value] of Object.entries(secret.data)) {
      const text = Buffer.from(value, 'base64').toString('utf8');
      // Each pod's admin socket in its own directory (the injector's setting names the bookstore pod's).
      const bootstrap = () => text.replaceAll('/etc/envoy/', `${dir}/`).replaceAll(path.join(podDir, 'admin.sock'), path.join(dir, 'admin.sock'));
      await writeFile(path.join(dir, file), file === 'bootstrap.yaml' ? bootstrap() : text, { mode: 0o600 });
    }
    for (const f of ['', ...Object.keys(secret.data)]) await chown(path.join(dir, f), ENVOY_UID, ENVOY_UID);
  }

  /**
   * Runs what the patched pod spec says after its app: the osm-init container's args (through the
   * trellis CLI) in the pod's netns, then the sidecar container's Envoy (as its runAsUser) from the
   * Secret's files in `dir`, and waits until it is connected to the controller.
   */
  async function startSidecar(of: V1Pod, net: PodNetwork, dir: string): Promise<EnvoyProcess> {
    const init = of.spec!.initContainers!.find((c) => c.name === 'osm-init')!;
    await run('ip', ['netns', 'exec', net.netns, process.execPath, '--import', 'tsx', 'test/helpers/cli-main.ts', ...init.args!]);
    const sidecar = of.spec!.containers.find((c) => c.name === 'envoy')!;
    assert.equal(sidecar.securityContext?.runAsUser, ENVOY_UID);
    const started = await startEnvoy({
      envoyPath: requirement.envoyPath!,
      netns: net.netns,
      bootstrapPath: path.join(dir, 'bootstrap.yaml'),
      adminSocket: path.join(dir, 'admin.sock'),
      logFile: path.join(dir, '..', `${path.basename(dir)}-envoy.log`),
      uid: sidecar.securityContext!.runAsUser!,
    });
    envoys.push(started);
    await eventually(async () => /control_plane\.connected_state: 1/.test((await get('/stats?filter=control_plane.connected_state', started.adminSocket)).body), `${net.netns}'s Envoy connected to the controller`, 30_000, 200);
    return started;
  }

  before(async () => {
    await removeLabNetwork(PREFIX); // a crashed earlier run
    lab = await createLabNetwork(PREFIX, SUBNET);
    work = await mkdtemp(path.join(os.tmpdir(), `${PREFIX}-injector-lab-`));
    await chmod(work, 0o755);
    podDir = path.join(work, 'bookstore-pod');
    controller = await runController({
      manifests: 'examples/bookstore',
      meshName: 'osm',
      stateDir: path.join(work, 'state'),
      xdsAddress: `${lab.bridgeAddress}:${XDS_PORT}`,
      httpAddress: `127.0.0.1:${HTTP_PORT}`,
      resyncIntervalMs: 600_000,
      warmUpConfigurationBytes: 0,
      logger: pino({ level: 'silent' }),
    });
    api = await new FakeKubeApiServer().start();
    api.apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'bookstore', labels: { 'openservicemesh.io/monitored-by': 'osm' }, annotations: { 'openservicemesh.io/sidecar-injection': 'enabled', 'openservicemesh.io/metrics': 'enabled' } } });
    api.apply({ apiVersion: 'config.openservicemesh.io/v1alpha2', kind: 'MeshConfig', metadata: { name: 'osm-mesh-config', namespace: 'osm-system' }, spec: { traffic: { inboundPortExclusionList: [EXCLUDED_PORT] } } });
    injector = await runInjector({
      kubeConfig: loadKubeConfig(await api.writeKubeconfig(work)),
      namespace: 'osm-system',
      ca: { stateDir: path.join(work, 'state') },
      meshConfig: { namespace: 'osm-system', name: 'osm-mesh-config' },
      host: '127.0.0.1',
      port: 0,
      settings: {
        meshName: 'osm',
        xdsAddress: `${lab.bridgeAddress}:${XDS_PORT}`,
        envoyImage: 'envoyproxy/envoy:v1.40.0',
        trellisImage: 'trellis:latest',
        trellisCommand: ['trellis'],
        adminSocketPath: path.join(podDir, 'admin.sock'),
      },
    });
    pod = await createPodNetwork(lab, { name: 'bookstore.bookstore', podIp: POD_IP, labAddress: POD_LAB_ADDRESS, onLinkRoutes: Object.values(CLIENTS).map((c) => `${c.podIp}/32`) });
  });

  after(async () => {
    for (const e of envoys) await e.stop();
    if (app?.exitCode === null) {
      const exited = new Promise((r) => app!.once('exit', r));
      app.kill('SIGKILL');
      await exited;
    }
    await injector?.stop();
    await api?.stop();
    await controller?.stop();
    await removeLabNetwork(PREFIX);
    if (work) await rm(work, { recursive: true, force: true });
  });

  it('admits the pod with a sidecar, runs osm-init and Envoy from the Secret, and the probe, exclusions and metrics work', async () => {
    const original: V1Pod = {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { generateName: 'bookstore-', namespace: 'bookstore', labels: { app: 'bookstore', version: 'v1' } },
      spec: {
        serviceAccountName: 'bookstore',
        containers: [{ name: 'bookstore', image: 'openservicemesh/bookstore:latest-main', ports: [{ name: 'http', containerPort: APP_PORT }], readinessProbe: { httpGet: { path: '/ready', port: 'http' } } }],
      },
    };
    const admitted = await admitPod({ port: injector!.port, caBundle: injector!.caPem }, original);
    assert.equal(admitted.answer.allowed, true);
    patched = admitted.patched;
    const uuid = patched.metadata!.labels!['osm-proxy-uuid'];

    // The Secret, as the pod's volume names it, written where the lab's "mount" is.
    await writeSecretFiles(patched, podDir);

    // The app, then the init container (its args, through the trellis CLI), then the sidecar.
    app = spawn('ip', ['netns', 'exec', pod.netns, 'python3', '-c', APP, String(APP_PORT), String(EXCLUDED_PORT)], { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise<void>((resolve, reject) => {
      app!.stdout!.on('data', (d: Buffer) => {
        if (appOutput.length < 1_000_000) appOutput += d.toString();
        if (appOutput.includes('ready')) resolve();
      });
      app!.once('exit', (code) => reject(new Error(`app exited ${code}`)));
    });
    // Envoy reached the controller with the Secret's certificate (CN with the UUID).
    const envoy = await startSidecar(patched, pod, podDir);
    const { stdout: nat } = await run('ip', ['netns', 'exec', pod.netns, 'iptables-save', '-t', 'nat']);
    assert.match(nat, /-A OSM_PROXY_INBOUND -p tcp -m multiport --dports 14099 -j RETURN/);
    const node = await get('/server_info', envoy.adminSocket);
    assert.match(node.body, new RegExp(`${uuid}\\.sidecar\\.bookstore\\.bookstore\\.cluster\\.local`));

    // The kubelet's readiness probe, as rewritten: through Envoy's 15902 to the app's /ready.
    const probe = patched.spec!.containers[0].readinessProbe!.httpGet!;
    assert.deepEqual([probe.port, probe.path], [15902, '/osm-readiness-probe/bookstore']);
    let ready = { status: 0, body: '' };
    await eventually(async () => {
      ready = await get(`http://${POD_LAB_ADDRESS}:${probe.port}${probe.path}`).catch(() => ({ status: 0, body: '' }));
      return ready.status === 200;
    }, 'the readiness probe succeeds through 15902', 30_000, 200);
    assert.equal(ready.body, `ready ${APP_PORT}`);
    // The app's own port is captured: plain HTTP from outside goes to Envoy's mTLS inbound listener, not the app.
    const direct = await get(`http://${POD_LAB_ADDRESS}:${APP_PORT}/ready`).catch((err: Error) => ({ status: 0, body: err.message }));
    assert.notEqual(direct.body, `ready ${APP_PORT}`, 'the original probe would not reach the app');
    // The MeshConfig's inbound exclusion bypasses Envoy.
    assert.deepEqual(await get(`http://${POD_LAB_ADDRESS}:${EXCLUDED_PORT}/ready`), { status: 200, body: `ready ${EXCLUDED_PORT}` });
    // Metrics: 15010 serves Envoy's Prometheus stats, as the pod's scrape annotations say.
    assert.equal(patched.metadata!.annotations!['prometheus.io/port'], '15010');
    const metrics = await get(`http://${POD_LAB_ADDRESS}:15010/stats/prometheus`);
    assert.equal(metrics.status, 200);
    assert.match(metrics.body, /^envoy_server_live\{\} 1$/m);
  });

  it('with SMI enforced, an injected bookbuyer reaches bookstore through both Envoys, an injected bookthief is refused, and an outbound port exclusion bypasses Envoy', async () => {
    assert.ok(app?.exitCode === null, 'the bookstore pod of the first test runs');
    /** Admits a client pod of examples/bookstore's, creates its netns and starts its sidecar (no app: the test's curl is the app). */
    async function clientPod(name: keyof typeof CLIENTS, annotations: Record<string, string> = {}): Promise<{ net: PodNetwork; envoy: EnvoyProcess }> {
      const { answer, patched: injected } = await admitPod({ port: injector!.port, caBundle: injector!.caPem }, {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { generateName: `${name}-`, namespace: name, labels: { app: name, version: 'v1' }, annotations },
        spec: { serviceAccountName: name, containers: [{ name, image: `openservicemesh/${name}:latest-main` }] },
      });
      assert.equal(answer.allowed, true);
      const dir = path.join(work, `${name}-pod`);
      await writeSecretFiles(injected, dir);
      const net = await createPodNetwork(lab, {
        name: `${name}.${name}`,
        ...CLIENTS[name],
        onLinkRoutes: [`${BOOKSTORE_V1_IP}/32`, `${POD_IP}/32`],
        hosts: `${BOOKSTORE_V1_IP}\tbookstore-v1.bookstore\n`,
      });
      return { net, envoy: await startSidecar(injected, net, dir) };
    }
    for (const ns of Object.keys(CLIENTS)) {
      api!.apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns, labels: { 'openservicemesh.io/monitored-by': 'osm' }, annotations: { 'openservicemesh.io/sidecar-injection': 'enabled' } } });
    }
    // bookbuyer's own annotation excludes the bookstore pod's plain port (14099, inbound-excluded there) from its outbound capture.
    const buyer = await clientPod('bookbuyer', { 'openservicemesh.io/outbound-port-exclusion-list': String(EXCLUDED_PORT) });
    const thief = await clientPod('bookthief');
    const { stdout: buyerNat } = await run('ip', ['netns', 'exec', buyer.net.netns, 'iptables-save', '-t', 'nat']);
    assert.match(buyerNat, new RegExp(`-A OSM_PROXY_OUTBOUND -p tcp -m multiport --dports ${EXCLUDED_PORT} -j RETURN`));

    /** curl run in a pod's netns as root (not Envoy's uid: captured): its status and body, or curl's exit code. */
    async function curl(net: PodNetwork, url: string): Promise<{ status: number; body: string } | { exit: number }> {
      try {
        const { stdout } = await run('ip', ['netns', 'exec', net.netns, 'curl', '-sS', '--max-time', '5', '-H', 'client-app: bookbuyer', '-H', 'user-agent: bookbuyer-http-client/1.0', '-w', '\n%{http_code}', url]);
        const cut = stdout.lastIndexOf('\n');
        return { status: Number(stdout.slice(cut + 1)), body: stdout.slice(0, cut) };
      } catch (error) {
        return { exit: (error as { code?: number }).code ?? -1 };
      }
    }
    const seen = (port: number, what: string) => appOutput.split('\n').filter((line) => line === `seen ${port} ${what}`).length;
    /** A counter of a pod's Envoy statistics (0 when Envoy has not made it yet). */
    async function stat(envoy: EnvoyProcess, name: string): Promise<number> {
      const { body } = await get(`/stats?filter=^${name.replaceAll('.', '\\.')}$`, envoy.adminSocket);
      return Number(/: (\d+)$/m.exec(body)?.[1] ?? 0);
    }
    const OUTBOUND_CX = 'listener.0.0.0.0_15001.downstream_cx_total';
    /** bookstore's Envoy: its inbound (mTLS) listener's TLS handshakes. */
    const INBOUND_TLS = 'listener.0.0.0.0_15003.ssl.handshake';
    const bookstoreEnvoy = envoys[0];
    const inboundBefore = await stat(bookstoreEnvoy, INBOUND_TLS);

    // bookbuyer → bookstore-v1: bookbuyer's Envoy (outbound, mTLS) → bookstore's Envoy (inbound, SMI route allowed) → the app.
    const started = Date.now();
    let bought: Awaited<ReturnType<typeof curl>> = { exit: -1 };
    await eventually(async () => {
      bought = await curl(buyer.net, `http://bookstore-v1.bookstore:${APP_PORT}/buy-a-book/new`);
      return 'status' in bought && bought.status === 200;
    }, `bookbuyer reaches bookstore-v1 (last: ${JSON.stringify(bought)})`, 60_000, 500);
    console.log(`bookbuyer → bookstore-v1 answered after ${Date.now() - started} ms:`, JSON.stringify(bought));
    assert.deepEqual(bought, { status: 200, body: `bookstore ${APP_PORT} /buy-a-book/new` });
    assert.ok(seen(APP_PORT, '/buy-a-book/new') >= 1, 'the bookstore pod\'s app saw the request');
    const buyerOutbound = await stat(buyer.envoy, OUTBOUND_CX);
    assert.ok(buyerOutbound >= 1, `bookbuyer's Envoy took the connection on 15001 (${buyerOutbound})`);
    const inboundAfter = await stat(bookstoreEnvoy, INBOUND_TLS);
    assert.ok(inboundAfter > inboundBefore, `bookstore's Envoy terminated bookbuyer's mTLS on 15003 (${inboundBefore} → ${inboundAfter})`);
    const rbac = (await get('/stats?filter=rbac\\.allowed$', bookstoreEnvoy.adminSocket)).body.trim();
    console.log(`bookstore's Envoy: ${INBOUND_TLS} ${inboundBefore} → ${inboundAfter}; ${rbac.replaceAll('\n', '; ')}`);

    // bookthief → bookstore-v1, the same request: no TrafficTarget names bookthief, the bookstore app never sees it.
    const seenBefore = seen(APP_PORT, '/buy-a-book/new');
    const stolen = await curl(thief.net, `http://bookstore-v1.bookstore:${APP_PORT}/buy-a-book/new`);
    const stolenDirect = await curl(thief.net, `http://${POD_IP}:${APP_PORT}/buy-a-book/new`);
    console.log('bookthief → bookstore-v1:', JSON.stringify(stolen), 'to the pod IP:', JSON.stringify(stolenDirect));
    for (const answer of [stolen, stolenDirect]) {
      assert.ok('exit' in answer ? [7, 52, 56].includes(answer.exit) : answer.status === 403, `bookthief refused: ${JSON.stringify(answer)}`);
    }
    assert.equal(seen(APP_PORT, '/buy-a-book/new'), seenBefore, 'the bookstore app never saw bookthief');
    assert.equal(await stat(bookstoreEnvoy, INBOUND_TLS), inboundAfter, 'bookthief got no connection to bookstore\'s Envoy either');

    // The outbound exclusion: bookbuyer → the bookstore pod's plain port 14099 bypasses bookbuyer's Envoy
    // (its 15001 counter unchanged); bookthief, without the annotation, goes to its own Envoy and is refused.
    const outboundBefore = await stat(buyer.envoy, OUTBOUND_CX);
    const plain = await curl(buyer.net, `http://${POD_IP}:${EXCLUDED_PORT}/plain`);
    console.log('bookbuyer → bookstore pod :14099 (excluded):', JSON.stringify(plain));
    assert.deepEqual(plain, { status: 200, body: `bookstore ${EXCLUDED_PORT} /plain` });
    assert.equal(await stat(buyer.envoy, OUTBOUND_CX), outboundBefore, 'bookbuyer\'s Envoy did not take the excluded connection');
    assert.equal(seen(EXCLUDED_PORT, '/plain'), 1);
    const thiefPlain = await curl(thief.net, `http://${POD_IP}:${EXCLUDED_PORT}/plain`);
    console.log('bookthief → bookstore pod :14099 (not excluded for it):', JSON.stringify(thiefPlain));
    assert.ok('exit' in thiefPlain, `bookthief's port 14099 traffic went to its Envoy and was refused: ${JSON.stringify(thiefPlain)}`);
    assert.equal(seen(EXCLUDED_PORT, '/plain'), 1, 'the app did not see bookthief on 14099');
    // And bookbuyer's other outbound traffic still goes through its Envoy.
    assert.deepEqual(await curl(buyer.net, `http://bookstore-v1.bookstore:${APP_PORT}/buy-a-book/new`), bought);
    assert.ok((await stat(buyer.envoy, OUTBOUND_CX)) > outboundBefore, 'the next bookstore request went through bookbuyer\'s Envoy');
  });

  it("Envoy accepts the bootstrap of every probe kind (HTTP, HTTPS, gRPC, TCP) and metrics (--mode validate)", async () => {
    const probes: V1Pod = {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { generateName: 'probes-', namespace: 'bookstore' },
      spec: {
        serviceAccountName: 'bookstore',
        containers: [
          { name: 'web', image: 'web', ports: [{ name: 'https', containerPort: 8443 }], livenessProbe: { httpGet: { path: '/live', port: 'https', scheme: 'HTTPS' } }, startupProbe: { httpGet: { path: '/started', port: 8080 }, timeoutSeconds: 3 } },
          { name: 'api', image: 'api', readinessProbe: { grpc: { port: 9000 } }, livenessProbe: { tcpSocket: { port: 9001 } } },
          { name: 'worker', image: 'worker', livenessProbe: { httpGet: { path: '/healthz', port: 7000 } }, readinessProbe: { httpGet: { path: '/ready', port: 7000 } } },
        ],
      },
    };
    const { patched: injected } = await admitPod({ port: injector!.port, caBundle: injector!.caPem }, probes);
    const dir = path.join(work, 'probes-pod');
    await writeSecretFiles(injected, dir);
    const { stdout, stderr } = await run(requirement.envoyPath!, ['--mode', 'validate', '-c', path.join(dir, 'bootstrap.yaml'), '-l', 'error'], { maxBuffer: 1024 * 1024 });
    assert.match(stdout + stderr, /configuration '.*bootstrap\.yaml' OK/);
  });
});
