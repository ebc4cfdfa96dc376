/**
 * `trellis proxies` and `trellis proxy config UUID|POD` (src/cli/proxies-command.ts) against a real
 * `trellis controller --manifests` process, with real mTLS gRPC clients: a sidecar that ACKs
 * everything, one that NACKs LDS and leaves EDS unanswered, and refused ones (a certificate of
 * another CA, a duplicate UUID of another identity) that show in the log and in
 * `trellis_xds_connections_refused_total{reason}`. No kubeconfig anywhere.
 */
import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, cpSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { TypeUrl } from '../src/api/type-urls.js';
import { CertificateAuthority } from '../src/certificate/authority.js';
import { CertificateManager } from '../src/certificate/manager.js';
import { AdsTestClient, type AdsTestStream } from './helpers/ads-client.js';
import { watchController, type WatchedController } from './helpers/controller-process.js';
import { SimulatedSidecar } from './helpers/sidecar.js';
import { eventually } from './helpers/wait.js';

type Decoded = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const CLI = path.resolve(import.meta.dirname, 'helpers/cli-main.ts');
const XDS_PORT = 19640;
const HTTP_PORT = 19641;
const CONTROLLER = `http://127.0.0.1:${HTTP_PORT}`;
const BUYER_UUID = '5a5a5a5a-0000-4000-8000-000000000001';
const STORE_UUID = '5a5a5a5a-0000-4000-8000-000000000002';
const LABELLED_UUID = '5a5a5a5a-0000-4000-8000-000000000003';
const NACK_MESSAGE = 'Error adding/updating listener(s) inbound-listener: the\nlistener was rejected on purpose by this test, with a long explanation of why it was rejected';

describe('trellis proxies and trellis proxy config against a controller process', () => {
  const work = mkdtempSync(path.join(tmpdir(), 's9v-proxies-'));
  const manifests = path.join(work, 'manifests');
  const stateDir = path.join(work, 'state');
  // No kubeconfig reachable: $HOME without .kube, $KUBECONFIG pointing nowhere.
  const env = { ...process.env, HOME: path.join(work, 'home'), KUBECONFIG: path.join(work, 'no-kubeconfig') };
  let child: ChildProcess;
  let watched: WatchedController;
  let certificates: CertificateManager;
  const clients: AdsTestClient[] = [];
  let buyer: SimulatedSidecar;
  let store: AdsTestStream;

  /** Runs `trellis ARGS…` from the sources without a kubeconfig; resolves with its exit code and output. */
  const trellis = (args: readonly string[]): Promise<{ code: number; stdout: string; stderr: string }> =>
    new Promise((resolve) => {
      execFile(process.execPath, ['--import', 'tsx', CLI, ...args], { encoding: 'utf8', timeout: 120_000, env, maxBuffer: 64 * 1024 * 1024 }, (error, stdout, stderr) => {
        resolve({ code: error ? (typeof error.code === 'number' ? error.code : -1) : 0, stdout, stderr });
      });
    });
  const client = (credentials: grpc.ChannelCredentials): AdsTestClient => {
    const c = new AdsTestClient(`127.0.0.1:${XDS_PORT}`, credentials);
    clients.push(c);
    return c;
  };
  const mtls = async (uuid: string, namespace: string, serviceAccount: string) => {
    const cert = await certificates.issueProxyCertificate(uuid, namespace, serviceAccount, 3600);
    return { stream: client(grpc.credentials.createSsl(Buffer.from(certificates.caPem), Buffer.from(cert.keyPem), Buffer.from(cert.certPem))).openStream(cert.commonName), cn: cert.commonName };
  };
  const proxiesJson = async (): Promise<Decoded[]> => (await (await fetch(`${CONTROLLER}/debug/proxies`)).json()) as Decoded[];
  const refused = async (reason: string): Promise<number> => {
    const text = await (await fetch(`${CONTROLLER}/metrics`)).text();
    return Number(new RegExp(`trellis_xds_connections_refused_total\\{reason="${reason}"\\} (\\d+)`).exec(text)?.[1] ?? 0);
  };
  const logLines = (): Decoded[] => watched.output().split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Decoded);

  before(async () => {
    mkdirSync(env.HOME);
    cpSync('examples/bookstore', manifests, { recursive: true });
    // A pod whose proxy is named by its label, as the sidecar injector labels pods.
    appendFileSync(path.join(manifests, 'bookstore.yaml'), `---
apiVersion: v1
kind: Pod
metadata:
  name: bookstore-labelled
  namespace: bookstore
  labels: {app: bookstore, version: v1, osm-proxy-uuid: ${LABELLED_UUID}}
spec:
  serviceAccountName: bookstore
  containers: [{name: bookstore, image: bookstore, ports: [{containerPort: 14001}]}]
status: {phase: Running, podIP: 10.244.1.99}
`);
    child = spawn(process.execPath, ['--import', 'tsx', CLI, 'controller', '--manifests', manifests, '--state-dir', stateDir, '--xds-address', `127.0.0.1:${XDS_PORT}`, '--http-address', `127.0.0.1:${HTTP_PORT}`, '--warm-up-config', '0', '--resync-interval', '0'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    watched = watchController(child, 90_000);
    await watched.httpPort;
    certificates = new CertificateManager({ ca: await CertificateAuthority.loadOrCreate(stateDir), validitySeconds: 3600 });

    buyer = new SimulatedSidecar((await mtls(BUYER_UUID, 'bookbuyer', 'bookbuyer')).stream).start();
    // bookstore's proxy: ACKs CDS, NACKs LDS, leaves its EDS response unanswered.
    store = (await mtls(STORE_UUID, 'bookstore', 'bookstore')).stream;
    store.request(TypeUrl.Cluster);
    const cds = await store.waitFor((r) => r.type_url === TypeUrl.Cluster, 30_000);
    store.ack(cds);
    store.request(TypeUrl.Listener);
    store.nack(await store.waitFor((r) => r.type_url === TypeUrl.Listener, 30_000), NACK_MESSAGE);
    store.request(TypeUrl.ClusterLoadAssignment, ['bookwarehouse/bookwarehouse|14001']);
    await store.waitFor((r) => r.type_url === TypeUrl.ClusterLoadAssignment, 30_000);
    await eventually(async () => {
      const proxies = await proxiesJson();
      const types = (uuid: string) => proxies.find((p) => p.uuid === uuid)?.streams[0]?.types ?? {};
      return ['CDS', 'EDS', 'LDS', 'RDS', 'SDS'].every((t) => types(BUYER_UUID)[t]?.state === 'synced') && types(STORE_UUID).LDS?.state === 'nacked';
    }, 'the buyer synced and the store\'s NACK recorded', 60_000);
  });
  after(async () => {
    buyer?.stop();
    for (const c of clients) c.close();
    certificates?.stop();
    if (child && child.exitCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      await exited;
    }
    rmSync(work, { recursive: true, force: true });
  });

  it('trellis proxies: a table with per-type synced / stale / NACKed and the NACK reason, cut', async () => {
    const { code, stdout, stderr } = await trellis(['proxies', '--controller', CONTROLLER]);
    assert.equal(code, 0, stderr);
    const [header, ...rows] = stdout.trimEnd().split('\n');
    assert.match(header, /^UUID\s+IDENTITY\s+CLIENT\s+CONNECTED SINCE\s+CDS\s+EDS\s+LDS\s+RDS\s+SDS\s+LAST NACK$/);
    assert.equal(rows.length, 2, stdout);
    const cells = (uuid: string) => rows.find((r) => r.startsWith(uuid))!.split(/\s{3,}/);
    const buyerRow = cells(BUYER_UUID);
    assert.deepEqual(buyerRow.slice(1, 3), ['bookbuyer/bookbuyer', 'envoy']);
    assert.match(buyerRow[3], /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    assert.deepEqual(buyerRow.slice(4), ['synced', 'synced', 'synced', 'synced', 'synced']);
    const storeRow = cells(STORE_UUID);
    assert.deepEqual(storeRow.slice(1, 3), ['bookstore/bookstore', 'envoy']);
    assert.deepEqual(storeRow.slice(4, 9), ['synced', 'stale', 'NACKed', '-', '-']);
    const nack = storeRow[9];
    assert.ok(nack.startsWith('LDS: Error adding/updating listener(s) inbound-listener: the listener was rejected'), nack);
    assert.ok(nack.endsWith('…') && nack.length <= 'LDS: '.length + 80, nack);
  });

  it('trellis proxies --output json: the controller\'s view, with the latest snapshot version per type', async () => {
    const { code, stdout } = await trellis(['proxies', '--controller', CONTROLLER, '--output', 'json']);
    assert.equal(code, 0);
    const proxies = JSON.parse(stdout) as Decoded[];
    const lds = proxies.find((p) => p.uuid === STORE_UUID)!.streams[0].types.LDS;
    assert.equal(lds.state, 'nacked');
    assert.equal(lds.lastNack.message, NACK_MESSAGE);
    assert.equal(lds.lastNack.version, lds.latestVersion);
    const cds = proxies.find((p) => p.uuid === BUYER_UUID)!.streams[0].types.CDS;
    assert.equal(cds.versionAcked, cds.latestVersion);
  });

  it('trellis proxy config: by UUID, and by pod name resolved by the controller (identity, label), no kubeconfig', async () => {
    const byUuid = await trellis(['proxy', 'config', BUYER_UUID, '--controller', CONTROLLER]);
    assert.equal(byUuid.code, 0, byUuid.stderr);
    assert.equal(JSON.parse(byUuid.stdout).proxy, BUYER_UUID);
    const byPod = await trellis(['proxy', 'config', 'bookbuyer-5d8c7f9b6-k2x4p', '-n', 'bookbuyer', '--controller', CONTROLLER]);
    assert.equal(byPod.code, 0, byPod.stderr);
    assert.equal(JSON.parse(byPod.stdout).proxy, BUYER_UUID);
    // The labelled pod names a proxy that is not connected: said so, not another proxy of its identity.
    const labelled = await trellis(['proxy', 'config', 'bookstore-labelled', '-n', 'bookstore', '--controller', CONTROLLER]);
    assert.equal(labelled.code, 1);
    assert.equal(labelled.stderr, `trellis proxy config: proxy ${LABELLED_UUID} of pod bookstore/bookstore-labelled is not connected to the controller at ${CONTROLLER}\n`);
    const thief = await trellis(['proxy', 'config', 'bookthief-7c9d6b5f4-q8w2n', '-n', 'bookthief', '--controller', CONTROLLER]);
    assert.equal(thief.code, 1);
    assert.match(thief.stderr, /pod bookthief\/bookthief-7c9d6b5f4-q8w2n has no osm-proxy-uuid label and no proxy of its identity bookthief\/bookthief is connected/);
    const unknown = await trellis(['proxy', 'config', 'nope', '-n', 'bookbuyer', '--controller', CONTROLLER]);
    assert.match(unknown.stderr, /pod bookbuyer\/nope is not in the controller's store/);
    const gone = await trellis(['proxy', 'config', '5a5a5a5a-0000-4000-8000-0000000000ff', '--controller', CONTROLLER]);
    assert.match(gone.stderr, /proxy 5a5a5a5a-0000-4000-8000-0000000000ff is not connected/);
  });

  it('a proxy with a certificate of another CA: refused, logged, counted as untrusted_certificate', async () => {
    const before = await refused('untrusted_certificate');
    const other = await CertificateAuthority.generate();
    const foreign = await other.issue({ commonName: `5a5a5a5a-0000-4000-8000-000000000009.sidecar.bookbuyer.bookbuyer.cluster.local`, validitySeconds: 3600, usage: 'client' });
    const stream = client(grpc.credentials.createSsl(Buffer.from(certificates.caPem), Buffer.from(foreign.keyPem), Buffer.from(foreign.certPem))).openStream();
    stream.request(TypeUrl.Cluster);
    await stream.ended(30_000);
    assert.notEqual(stream.status?.code, grpc.status.OK);
    await eventually(async () => (await refused('untrusted_certificate')) === before + 1, 'the refusal counted', 30_000);
    await eventually(() => logLines().some((l) => l.reason === 'untrusted_certificate' && /^ADS connection refused: client certificate refused: /.test(String(l.msg))), 'the refusal logged', 30_000);
    assert.equal((await proxiesJson()).length, 2, 'not listed');
  });

  it('a proxy with the UUID of a connected proxy of another identity: refused, logged, counted as uuid_conflict', async () => {
    const before = await refused('uuid_conflict');
    const { stream } = await mtls(BUYER_UUID, 'bookthief', 'bookthief');
    stream.request(TypeUrl.Cluster);
    await stream.ended(30_000);
    assert.equal(stream.status?.code, grpc.status.PERMISSION_DENIED);
    await eventually(async () => (await refused('uuid_conflict')) === before + 1, 'the refusal counted', 30_000);
    await eventually(
      () => logLines().some((l) => l.reason === 'uuid_conflict' && l.identity === 'bookthief/bookthief' && String(l.msg) === `ADS connection refused: proxy UUID ${BUYER_UUID} is in use by a stream of bookbuyer/bookbuyer; refusing bookthief/bookthief`),
      'the refusal logged',
      30_000,
    );
    const listed = (await proxiesJson()).find((p) => p.uuid === BUYER_UUID);
    assert.equal(listed?.identity, 'bookbuyer/bookbuyer', 'the first proxy keeps its UUID');
  });

  it('trellis proxy config POD: two connected proxies of the pod\'s identity are named, not guessed', async () => {
    const second = new SimulatedSidecar((await mtls('5a5a5a5a-0000-4000-8000-000000000004', 'bookbuyer', 'bookbuyer')).stream).start();
    try {
      await eventually(async () => (await proxiesJson()).length === 3, 'the second buyer connected', 30_000);
      const { code, stderr } = await trellis(['proxy', 'config', 'bookbuyer-5d8c7f9b6-k2x4p', '-n', 'bookbuyer', '--controller', CONTROLLER]);
      assert.equal(code, 1);
      assert.match(stderr, new RegExp(`2 proxies of its identity bookbuyer/bookbuyer are connected \\(${BUYER_UUID}, 5a5a5a5a-0000-4000-8000-000000000004\\): give a UUID`));
    } finally {
      second.stop();
    }
  });

  it('trellis proxies: a controller that does not answer exits 1 naming it', async () => {
    const { code, stderr } = await trellis(['proxies', '--controller', 'http://127.0.0.1:19642']);
    assert.equal(code, 1);
    assert.match(stderr, /^trellis proxies: cannot reach the controller at http:\/\/127\.0\.0\.1:19642: .*ECONNREFUSED/);
  });
});
