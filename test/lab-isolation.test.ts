import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFile, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startLab, type Lab } from '../src/lab/lab.js';
import { podNetnsName } from '../src/lab/network.js';
import { envoyTestSkip } from './helpers/envoy.js';
import { BOOKBUYER, bookstoreManifests, TRELLIS } from './helpers/lab.js';
import { LAB_SUITE_PORTS } from './helpers/lab-ports.js';

// h-isolate's prefix, subnet and ops port.
const PREFIX = 'tis';
const SUBNET = '10.242.0.0/24';
const { xds: XDS_PORT, http: HTTP_PORT } = LAB_SUITE_PORTS.labIsolation;
const HTTP_ADDRESS = `127.0.0.1:${HTTP_PORT}`;

const { envoyPath, skip } = envoyTestSkip(['ip', 'setpriv', 'iptables-restore', 'curl', 'nsenter']);

/**
 * Tries, from inside a pod, what a pod must not do; prints `denied NAME` or `ALLOWED NAME` per
 * attempt. Arguments: the CA key, another pod's xDS key, its admin socket, its netns file, the
 * supervisor's PID, a file to create beside the state dir.
 */
const ATTEMPTS = [
  'try() { name=$1; shift; if "$@" >/dev/null 2>&1; then echo "ALLOWED $name"; else echo "denied $name"; fi; }',
  'try read-ca-key cat "$1"',
  'try read-other-pod-key cat "$2"',
  'try other-admin-socket curl -sf --unix-socket "$3" http://envoy/certs',
  'try other-admin-quitquitquit curl -sf -X POST --unix-socket "$3" http://envoy/quitquitquit',
  'try nsenter-other-pod nsenter --net="$4" true',
  'try nsenter-host nsenter --net=/proc/$5/ns/net true',
  'try read-supervisor-environ cat /proc/$5/environ',
  'try supervisor-root ls /proc/$5/root/',
  'try iptables-flush iptables -t nat -F',
  'try write-host-file touch "$6"',
  'try mount mount -t tmpfs none /mnt',
].join('\n');

/** A pod command: HTTP on port 80; `GET /attempts` answers what {@link ATTEMPTS} printed, run by the app. */
const PORT_80_APP = [
  "const http=require('http'),cp=require('child_process');",
  'const args=process.argv.slice(1);',
  "http.createServer((q,r)=>{if(q.url==='/attempts'){r.end(cp.spawnSync('sh',['-c',...args],{encoding:'utf8'}).stdout);return}",
  "r.end(JSON.stringify({pod:process.env.POD_NAME}))}).listen(80);",
].join('');

/** A meshed pod `web/web` running {@link PORT_80_APP} on port 80, its Service and a TrafficTarget letting bookbuyer in. */
function webManifests(attemptArgs: readonly string[]): string {
  const command = JSON.stringify([process.execPath, '-e', PORT_80_APP, ATTEMPTS, 'sh', ...attemptArgs]);
  return `apiVersion: v1
kind: Namespace
metadata:
  name: web
  labels:
    openservicemesh.io/monitored-by: osm
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: web
  namespace: web
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: web
spec:
  clusterIP: 10.96.42.1
  selector:
    app: web
  ports:
    - name: http
      port: 80
---
apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: web
  labels:
    app: web
  annotations:
    lab.trellis.dev/command: ${JSON.stringify(command)}
spec:
  serviceAccountName: web
  containers:
    - name: web
      ports:
        - name: http
          containerPort: 80
status:
  phase: Running
  podIP: 10.244.42.10
---
apiVersion: specs.smi-spec.io/v1alpha4
kind: HTTPRouteGroup
metadata:
  name: web-all
  namespace: web
spec:
  matches:
    - name: all
      methods: ["*"]
---
apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata:
  name: web
  namespace: web
spec:
  destination:
    kind: ServiceAccount
    name: web
    namespace: web
  sources:
    - kind: ServiceAccount
      name: bookbuyer
      namespace: bookbuyer
  rules:
    - kind: HTTPRouteGroup
      name: web-all
      matches:
        - all
`;
}

/** The attempts {@link ATTEMPTS} made and what came of each. */
function outcomes(printed: string): Map<string, string> {
  return new Map(printed.trim().split('\n').map((line) => {
    const [outcome = '', name = ''] = line.split(' ');
    return [name, outcome];
  }));
}

describe('trellis lab: a pod cannot reach the lab\'s secrets, other pods or the host', { skip }, () => {
  let manifests: string;
  let lab: Lab;
  let attemptArgs: string[];
  const stateDir = `/tmp/${PREFIX}-isolation-state`;
  const probe = `/tmp/${PREFIX}-isolation-probe`;
  const buyerNetns = podNetnsName(PREFIX, `${BOOKBUYER.pod}.${BOOKBUYER.namespace}`);

  before(async () => {
    await rm(probe, { force: true });
    attemptArgs = [
      path.join(stateDir, 'controller', 'ca-key.pem'),
      path.join(stateDir, 'pods', buyerNetns, 'envoy', 'key.pem'),
      path.join(stateDir, 'pods', buyerNetns, 'admin.sock'),
      `/run/netns/${buyerNetns}`,
      String(process.pid),
      probe,
    ];
    manifests = await bookstoreManifests(PREFIX, (dir) => writeFile(path.join(dir, 'web.yaml'), webManifests(attemptArgs)));
    lab = await startLab({ manifestsDir: manifests, envoyPath, prefix: PREFIX, subnet: SUBNET, httpAddress: HTTP_ADDRESS, xdsPort: XDS_PORT, stateDir });
    await lab.waitForAllAcked(120_000);
  });

  after(async () => {
    await lab?.stop();
    await rm(manifests, { recursive: true, force: true });
    await rm(probe, { force: true });
  });

  it('every attempt exists to be made: the files are there and the host can use them', async () => {
    for (const file of attemptArgs.slice(0, 4)) await stat(file);
  });

  it('lab exec: no CA key, no other pod\'s key or admin socket, no nsenter, no iptables, no writes, no mount', async () => {
    const r = await lab.exec(BOOKBUYER.pod, BOOKBUYER.namespace, ['sh', '-c', ATTEMPTS, 'sh', ...attemptArgs]);
    const seen = outcomes(r.stdout);
    assert.equal(seen.size, 11, r.stdout + r.stderr);
    for (const [name, outcome] of seen) assert.equal(outcome, 'denied', `lab exec could ${name}`);
  });

  it('lab exec runs as uid 0 with CAP_NET_BIND_SERVICE only, no_new_privs, and the mesh still answers', async () => {
    const status = await lab.exec(BOOKBUYER.pod, BOOKBUYER.namespace, ['grep', '-E', '^(Uid|Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs):', '/proc/self/status']);
    const fields = new Map(status.stdout.trim().split('\n').map((l) => l.split(':\t') as [string, string]));
    assert.match(fields.get('Uid') ?? '', /^0\t0\t0\t0$/);
    for (const set of ['CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb']) assert.equal(fields.get(set), '0000000000000400', set);
    assert.equal(fields.get('NoNewPrivs'), '1');
    const books = await lab.exec(BOOKBUYER.pod, BOOKBUYER.namespace, ['curl', '-sS', '-m', '10', '-H', 'client-app: bookbuyer', '-A', 'bookbuyer-http-client/1.0', 'http://bookstore.bookstore:14001/books-bought']);
    assert.equal(books.code, 0, books.stderr);
    assert.match(JSON.parse(books.stdout).pod, /^bookstore-/);
  });

  it('trellis lab exec (the CLI) runs as confined as Lab.exec', async () => {
    const cli = (argv: readonly string[]) => new Promise<{ code: number; stdout: string }>((resolve) => {
      execFile(process.execPath, [TRELLIS, 'lab', 'exec', BOOKBUYER.pod, '-n', BOOKBUYER.namespace, '--prefix', PREFIX, '--state-dir', stateDir, '--', ...argv],
        { encoding: 'utf8', timeout: 60_000 }, (error, stdout) => resolve({ code: error ? Number(error.code ?? 1) : 0, stdout }));
    });
    const r = await cli(['sh', '-c', ATTEMPTS, 'sh', ...attemptArgs]);
    assert.equal(r.code, 0);
    const seen = outcomes(r.stdout);
    assert.equal(seen.size, 11, r.stdout);
    for (const [name, outcome] of seen) assert.equal(outcome, 'denied', `trellis lab exec could ${name}`);
    assert.match((await cli(['grep', 'CapEff', '/proc/self/status'])).stdout, /^CapEff:\t0000000000000400$/m);
  });

  it('a pod command listens on port 80, is reached through the mesh, and cannot do what lab exec cannot', async () => {
    const curl = (urlPath: string) => lab.exec(BOOKBUYER.pod, BOOKBUYER.namespace, ['curl', '-sS', '-m', '20', `http://web.web${urlPath}`]);
    const hello = await curl('/');
    assert.equal(hello.code, 0, hello.stderr);
    assert.deepEqual(JSON.parse(hello.stdout), { pod: 'web' });
    const r = await curl('/attempts');
    assert.equal(r.code, 0, r.stderr);
    const seen = outcomes(r.stdout);
    assert.equal(seen.size, 11, r.stdout);
    for (const [name, outcome] of seen) assert.equal(outcome, 'denied', `the pod command could ${name}`);
  });

  it('the host answers ARP on the bridge for the bridge address only; logs and state are 0600', async () => {
    const conf = `/proc/sys/net/ipv4/conf/${PREFIX}-br`;
    assert.equal((await readFile(`${conf}/arp_ignore`, 'utf8')).trim(), '1');
    assert.equal((await readFile(`${conf}/arp_announce`, 'utf8')).trim(), '2');
    const web = lab.state().pods.find((p) => p.name === 'web')!;
    for (const file of ['state.json', 'controller.log', `pods/${web.netns}/app.log`, `pods/${web.netns}/envoy.log`]) {
      assert.equal((await stat(path.join(stateDir, file))).mode & 0o777, 0o600, file);
    }
  });
});
