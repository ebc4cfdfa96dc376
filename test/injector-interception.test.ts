/**
 * The interception rules of src/injector/iptables.ts applied for real: two network namespaces
 * (a "pod" and an "outside" host joined by a veth pair, nothing on the host), Python listeners
 * that read SO_ORIGINAL_DST, and connections made as root (the app) and as uid 1500 (Envoy).
 * Needs root, `ip`, `iptables-restore` and python3; skipped without them (fails under CI=true).
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { PROXY_UID, applyInterception, interceptionOptions } from '../src/injector/iptables.js';
import type { MeshConfig, Pod } from '../src/store/objects.js';
import { labTestSkip } from './helpers/lab-prerequisites.js';

const PYTHON = '/usr/bin/python3';

const skip = labTestSkip(['ip', 'iptables-restore', 'setpriv'], existsSync(PYTHON) ? [] : [{ what: PYTHON, howToGet: 'install python3 (apt-get install python3)' }]);

/**
 * Listens on every port given (0.0.0.0) and answers each connection with one line
 * `<label> orig=<ip:port> peer=<ip>`, then closes it: `orig` is SO_ORIGINAL_DST (the destination
 * before a REDIRECT), or the socket's own address where the namespace has no conntrack (outside).
 * Prints `ready` once bound.
 */
const LISTENER = `
import selectors, socket, struct, sys
sel = selectors.DefaultSelector()
for spec in sys.argv[1:]:
    label, port = spec.split('=')
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(('0.0.0.0', int(port)))
    s.listen(64)
    sel.register(s, selectors.EVENT_READ, label)
print('ready', flush=True)
while True:
    for key, _ in sel.select():
        conn, peer = key.fileobj.accept()
        try:
            raw = conn.getsockopt(socket.SOL_IP, 80, 16)
            port, = struct.unpack('!H', raw[2:4])
            orig = '%s:%d' % (socket.inet_ntoa(raw[4:8]), port)
        except OSError:
            orig = '%s:%d' % conn.getsockname()
        conn.sendall(('%s orig=%s peer=%s\\n' % (key.data, orig, peer[0])).encode())
        conn.close()
`;

const CLIENT = `
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
print(s.makefile().readline().strip())
`;

function run(argv: string[]): string {
  return execFileSync(argv[0], argv.slice(1), { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

/** A pod namespace and an outside namespace joined by a veth pair; listeners in both. */
class InterceptionLab {
  readonly pod: string;
  readonly outside: string;
  private readonly listeners: ChildProcess[] = [];

  constructor(tag: string) {
    const id = randomBytes(3).toString('hex');
    this.pod = `tli-${tag}p-${id}`;
    this.outside = `tli-${tag}o-${id}`;
  }

  static readonly POD_IP = '10.253.0.2';
  static readonly OUTSIDE_IP = '10.253.0.3';

  async create(): Promise<void> {
    run(['ip', 'netns', 'add', this.pod]);
    run(['ip', 'netns', 'add', this.outside]);
    // Both ends are created inside the namespaces: nothing appears on the host.
    run(['ip', 'netns', 'exec', this.pod, 'ip', 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', this.outside]);
    for (const [ns, addresses] of [
      [this.pod, [`${InterceptionLab.POD_IP}/24`]],
      [this.outside, [`${InterceptionLab.OUTSIDE_IP}/24`, '203.0.113.7/32', '203.0.113.200/32']],
    ] as const) {
      run(['ip', '-n', ns, 'link', 'set', 'lo', 'up']);
      for (const a of addresses) run(['ip', '-n', ns, 'address', 'add', a, 'dev', 'eth0']);
      run(['ip', '-n', ns, 'link', 'set', 'eth0', 'up']);
    }
    // "Outside-looking" addresses, reached on the veth (the outside namespace holds them).
    run(['ip', '-n', this.pod, 'route', 'add', '203.0.113.0/24', 'dev', 'eth0']);
    await this.listen(this.pod, ['outbound-listener=15001', 'inbound-listener=15003', 'app-8080=8080', 'app-9999=9999', 'envoy-prometheus=15010']);
    await this.listen(this.outside, ['outside-80=80', 'outside-81=81', 'outside-8080=8080']);
  }

  private async listen(netns: string, specs: string[]): Promise<void> {
    const child = spawn('ip', ['netns', 'exec', netns, PYTHON, '-c', LISTENER, ...specs], { stdio: ['ignore', 'pipe', 'pipe'] });
    this.listeners.push(child);
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    await new Promise<void>((resolve, reject) => {
      child.stdout!.on('data', (d: Buffer) => d.toString().includes('ready') && resolve());
      child.once('exit', (code) => reject(new Error(`listener in ${netns} exited (${code}): ${stderr}`)));
    });
  }

  /** The line a listener answers to a connection from `netns` to host:port, as root or as `uid`. */
  connect(netns: string, host: string, port: number, uid?: number): string {
    const user = uid === undefined ? [] : ['setpriv', `--reuid=${uid}`, `--regid=${uid}`, '--clear-groups'];
    const argv = ['ip', 'netns', 'exec', netns, ...user, PYTHON, '-c', CLIENT, host, String(port)];
    const r = spawnSync(argv[0], argv.slice(1), { encoding: 'utf8', timeout: 15_000 });
    if (r.status !== 0) return `failed: ${r.stderr.trim().split('\n').pop()}`;
    return r.stdout.trim();
  }

  async remove(): Promise<void> {
    for (const child of this.listeners) {
      if (child.exitCode === null && child.pid !== undefined) {
        const exited = new Promise((r) => child.once('exit', r));
        child.kill('SIGKILL');
        await exited;
      }
    }
    for (const ns of [this.pod, this.outside]) spawnSync('ip', ['netns', 'del', ns], { stdio: 'ignore' });
  }
}

const meshConfig = (traffic: Record<string, unknown>): MeshConfig =>
  ({ apiVersion: 'config.openservicemesh.io/v1alpha2', kind: 'MeshConfig', metadata: { name: 'osm-mesh-config', namespace: 'osm-system' }, spec: { traffic } }) as MeshConfig;
const pod = (annotations: Record<string, string>): Pod => ({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'app-0', namespace: 'app', annotations } });

describe('traffic interception in a network namespace (iptables-restore, SO_ORIGINAL_DST)', { skip }, () => {
  const lab = new InterceptionLab('ic');
  const { POD_IP, OUTSIDE_IP } = InterceptionLab;

  before(async () => {
    await lab.create();
    await applyInterception(
      lab.pod,
      interceptionOptions(
        meshConfig({ outboundPortExclusionList: [81], outboundIPRangeExclusionList: ['203.0.113.128/25'] }),
        pod({ 'openservicemesh.io/inbound-port-exclusion-list': '9999' }),
      ),
    );
  });
  after(() => lab.remove());

  it("redirects the app's outbound connection to an outside address to 15001, which reads the original destination", () => {
    assert.equal(lab.connect(lab.pod, '203.0.113.7', 80), `outbound-listener orig=203.0.113.7:80 peer=${POD_IP}`);
    assert.equal(lab.connect(lab.pod, OUTSIDE_IP, 8080), `outbound-listener orig=${OUTSIDE_IP}:8080 peer=${POD_IP}`);
  });

  it("does not redirect Envoy's (uid 1500) outbound connections", () => {
    assert.equal(lab.connect(lab.pod, '203.0.113.7', 80, PROXY_UID), `outside-80 orig=203.0.113.7:80 peer=${POD_IP}`);
  });

  it('does not redirect an excluded port (MeshConfig outboundPortExclusionList) or an excluded range (outboundIPRangeExclusionList)', () => {
    assert.equal(lab.connect(lab.pod, '203.0.113.7', 81), `outside-81 orig=203.0.113.7:81 peer=${POD_IP}`);
    assert.equal(lab.connect(lab.pod, '203.0.113.200', 80), `outside-80 orig=203.0.113.200:80 peer=${POD_IP}`);
  });

  it("keeps loopback and the app's calls to its own pod IP local; Envoy's calls to the pod IP go to the inbound listener", () => {
    assert.equal(lab.connect(lab.pod, '127.0.0.1', 8080), 'app-8080 orig=127.0.0.1:8080 peer=127.0.0.1');
    assert.equal(lab.connect(lab.pod, POD_IP, 8080), `app-8080 orig=${POD_IP}:8080 peer=${POD_IP}`);
    assert.equal(lab.connect(lab.pod, '127.0.0.1', 8080, PROXY_UID), 'app-8080 orig=127.0.0.1:8080 peer=127.0.0.1');
    assert.equal(lab.connect(lab.pod, POD_IP, 8080, PROXY_UID), `inbound-listener orig=${POD_IP}:8080 peer=${POD_IP}`);
  });

  it('redirects inbound connections to 15003, except an excluded port (pod annotation) and Envoy\'s own ports', () => {
    assert.equal(lab.connect(lab.outside, POD_IP, 8080), `inbound-listener orig=${POD_IP}:8080 peer=${OUTSIDE_IP}`);
    assert.equal(lab.connect(lab.outside, POD_IP, 9999), `app-9999 orig=${POD_IP}:9999 peer=${OUTSIDE_IP}`);
    assert.equal(lab.connect(lab.outside, POD_IP, 15010), `envoy-prometheus orig=${POD_IP}:15010 peer=${OUTSIDE_IP}`);
  });

  it('refuses to set the rules up twice in one namespace', async () => {
    await assert.rejects(applyInterception(lab.pod, interceptionOptions(undefined, pod({}))), /traffic interception is already set up \(nat chains OSM_PROXY_INBOUND/);
  });
});

describe('traffic interception with an inclusion list', { skip }, () => {
  const lab = new InterceptionLab('in');

  before(async () => {
    await lab.create();
    await applyInterception(lab.pod, interceptionOptions(undefined, pod({ 'openservicemesh.io/outbound-ip-range-inclusion-list': '203.0.113.0/25' })));
  });
  after(() => lab.remove());

  it('redirects only the included range', () => {
    assert.equal(lab.connect(lab.pod, '203.0.113.7', 80), `outbound-listener orig=203.0.113.7:80 peer=${InterceptionLab.POD_IP}`);
    assert.equal(lab.connect(lab.pod, '203.0.113.200', 80), `outside-80 orig=203.0.113.200:80 peer=${InterceptionLab.POD_IP}`);
    assert.equal(lab.connect(lab.pod, InterceptionLab.OUTSIDE_IP, 8080), `outside-8080 orig=${InterceptionLab.OUTSIDE_IP}:8080 peer=${InterceptionLab.POD_IP}`);
  });
});

describe('traffic interception fails closed', { skip }, () => {
  it('sets up nothing when an entry is invalid', async () => {
    const ns = `tli-fc-${randomBytes(3).toString('hex')}`;
    run(['ip', 'netns', 'add', ns]);
    try {
      assert.throws(
        () => interceptionOptions(meshConfig({ outboundIPRangeExclusionList: ['10.0.0.0/33'] }), pod({})),
        /spec\.traffic\.outboundIPRangeExclusionList\[0\]: "10\.0\.0\.0\/33" is not an IP range/,
      );
      await assert.rejects(
        applyInterception(ns, { ...interceptionOptions(undefined, pod({})), outboundPortExclusions: [0] }),
        /InterceptionOptions\.outboundPortExclusions\[0\]: "0" is not a port/,
      );
      assert.doesNotMatch(run(['ip', 'netns', 'exec', ns, 'iptables-save', '-t', 'nat']), /OSM_PROXY/);
    } finally {
      spawnSync('ip', ['netns', 'del', ns], { stdio: 'ignore' });
    }
  });
});
