/**
 * A bookstore pod through the sidecar injector for real, and the lab running what the patched
 * spec says: an AdmissionReview over HTTPS to the running injector (its namespace, MeshConfig and
 * bootstrap Secret on the loopback fake API server; the CA is the running controller's), the
 * returned patch applied; then, in a lab network namespace, the init container's args run through
 * `trellis iptables-init`, real Envoy starts from the bootstrap Secret's files as uid 1500 and
 * connects to the controller, and from the host (as the kubelet would): the rewritten readiness
 * probe succeeds through 15902, the app's own port is captured (no plain HTTP reaches it), an
 * inbound port excluded by the MeshConfig bypasses Envoy, and 15010 answers with Envoy's metrics.
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
const PREFIX = 's8i';
const SUBNET = '10.219.4.0/26';
const XDS_PORT = 19460;
const HTTP_PORT = 19461;
const POD_LAB_ADDRESS = '10.219.4.10';
const POD_IP = '10.244.219.10';
const APP_PORT = 14001;
const EXCLUDED_PORT = 14099;

/** The bookstore app: answers `GET /ready` with "ready <port>" on both ports. */
const APP = `
import http.server, socketserver, sys, threading
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ('ready %d' % self.server.server_address[1]).encode() if self.path == '/ready' else b'no'
        self.send_response(200 if self.path == '/ready' else 404)
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
  let envoy: EnvoyProcess | undefined;
  let patched: V1Pod;
  let podDir: string;

  /** Writes the pod's bootstrap Secret (as its volume names it) to `dir`, owned by Envoy's uid: the lab's "mount" of /etc/envoy. */
  async function writeSecretFiles(of: V1Pod, dir: string): Promise<void> {
    const volume = of.spec!.volumes!.find((v) => v.name === 'envoy-bootstrap-config-volume')!;
    const secret = api!.get('Secret', of.metadata!.namespace, volume.secret!.secretName!) as unknown as { data: Record<string, string> };
    await mkdir(dir, { recursive: true });
    for (const [file, value] of Object.entries(secret.data)) {
      const text = Buffer.from(value, 'base64').toString('utf8');
      await writeFile(path.join(dir, file), file === 'bootstrap.yaml' ? text.replaceAll('/etc/envoy/', `${dir}/`) : text, { mode: 0o600 });
    }
    for (const f of ['', ...Object.keys(secret.data)]) await chown(path.join(dir, f), ENVOY_UID, ENVOY_UID);
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
    pod = await createPodNetwork(lab, { name: 'bookstore.bookstore', podIp: POD_IP, labAddress: POD_LAB_ADDRESS, onLinkRoutes: [] });
  });

  after(async () => {
    await envoy?.stop();
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
      app!.stdout!.on('data', (d: Buffer) => d.toString().includes('ready') && resolve());
      app!.once('exit', (code) => reject(new Error(`app exited ${code}`)));
    });
    const init = patched.spec!.initContainers!.find((c) => c.name === 'osm-init')!;
    await run('ip', ['netns', 'exec', pod.netns, process.execPath, '--import', 'tsx', 'test/helpers/cli-main.ts', ...init.args!]);
    const { stdout: nat } = await run('ip', ['netns', 'exec', pod.netns, 'iptables-save', '-t', 'nat']);
    assert.match(nat, /-A OSM_PROXY_INBOUND -p tcp -m multiport --dports 14099 -j RETURN/);
    const sidecar = patched.spec!.containers.find((c) => c.name === 'envoy')!;
    assert.equal(sidecar.securityContext?.runAsUser, ENVOY_UID);
    envoy = await startEnvoy({
      envoyPath: requirement.envoyPath!,
      netns: pod.netns,
      bootstrapPath: path.join(podDir, 'bootstrap.yaml'),
      adminSocket: path.join(podDir, 'admin.sock'),
      logFile: path.join(work, 'envoy.log'),
      uid: sidecar.securityContext!.runAsUser!,
    });
    // Envoy reached the controller with the Secret's certificate (CN with the UUID).
    await eventually(async () => /control_plane\.connected_state: 1/.test((await get('/stats?filter=control_plane.connected_state', envoy!.adminSocket)).body), 'Envoy connected to the controller', 30_000, 200);
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
