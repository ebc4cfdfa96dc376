import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, it } from 'node:test';
import pino from 'pino';
import { namespaceList } from '../src/cli/kube-commands.js';
import { loadOrCreateCaSecret, secretApiFor } from '../src/certificate/secret-store.js';
import { runController, type RunningController } from '../src/main.js';
import { loadKubeConfig } from '../src/sources/kubernetes/kubernetes-source.js';
import { bookstoreMesh } from './fixtures/mesh.js';
import { spawn, type ChildProcess } from 'node:child_process';
import { FakeKubeApiServer } from './helpers/fake-kube-apiserver.js';
import { describeOn, RealKubeApiServer } from './helpers/kube-real-apiserver.js';
import { findKubectl } from './helpers/kubectl.js';
import { eventually } from './helpers/wait.js';

/** Starts `kubectl proxy` (Debian's kubectl) on a free loopback port; resolves with its port once it serves. */
async function kubectlProxy(binary: string, kubeconfig: string): Promise<{ child: ChildProcess; port: number }> {
  const child = spawn(binary, ['--kubeconfig', kubeconfig, 'proxy', '--port=0', '--address=127.0.0.1'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`kubectl proxy did not start: ${output}`)), 30_000);
    const read = (d: Buffer) => {
      output += d.toString();
      const m = /Starting to serve on 127\.0\.0\.1:(\d+)/.exec(output);
      if (!m) return;
      clearTimeout(timer);
      resolve(Number(m[1]));
    };
    child.stdout.on('data', read);
    child.stderr.on('data', read);
    child.once('exit', (code) => (clearTimeout(timer), reject(new Error(`kubectl proxy exited ${code}: ${output}`))));
  });
  return { child, port };
}

// `kubectl proxy` serves the API over plain http:// and its kubeconfig has no
// insecure-skip-tls-verify: list, watch, the CA Secret, the Lease and the CLI must all work there.
// Against a fake serving http://, and a real `kubectl proxy` in front of a real kube-apiserver.
const kubectl = findKubectl();
for (const target of ['fake', 'real'] as const) describeOn(target, `a --kubeconfig whose server is http:// (kubectl proxy), ${target} API server`, () => {
  const fake = target === 'fake' ? new FakeKubeApiServer({ bookmarkIntervalMs: 200 }) : undefined;
  let server: FakeKubeApiServer | RealKubeApiServer;
  let proxy: ChildProcess | undefined;
  let dir: string;
  let kubeconfig: string;
  let running: RunningController | undefined;

  before(async () => {
    if (target === 'real' && kubectl.skip) return;
    dir = await mkdtemp(path.join(tmpdir(), 'trellis-http-kubeconfig-'));
    kubeconfig = path.join(dir, 'proxy-kubeconfig');
    if (fake) {
      server = await fake.start();
      const file = await server.writeKubeconfig(dir);
      const text = await readFile(file, 'utf8');
      assert.match(text, /server: http:\/\//);
      await writeFile(kubeconfig, text.replace(/^\s*insecure-skip-tls-verify: true\n/m, ''));
    } else {
      server = await RealKubeApiServer.start({ name: 'http-kubeconfig' });
      const started = await kubectlProxy(kubectl.path!, await server.writeKubeconfig(path.join(dir, 'admin')));
      proxy = started.child;
      await writeFile(
        kubeconfig,
        ['apiVersion: v1', 'kind: Config', 'clusters:', '- name: proxy', '  cluster:', `    server: http://127.0.0.1:${started.port}`, 'users:', '- name: proxy', '  user: {}',
          'contexts:', '- name: proxy', '  context: {cluster: proxy, user: proxy}', 'current-context: proxy', ''].join('\n'),
      );
    }
    await server.apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'osm-system' } });
    if (fake) for (const object of bookstoreMesh()) fake.apply(object);
    else await (server as RealKubeApiServer).applyAll(bookstoreMesh());
  });

  after(async () => {
    await running?.stop();
    if (proxy && proxy.exitCode === null) {
      const exited = new Promise((resolve) => proxy!.once('exit', resolve));
      proxy.kill('SIGTERM');
      await exited;
    }
    await (server instanceof RealKubeApiServer ? server.shutdown() : server?.stop());
    if (dir) await rm(dir, { recursive: true, force: true });
  });
  const skip = target === 'real' && kubectl.skip;

  it('reads and creates the CA Secret through client-node', { skip }, async () => {
    const result = await loadOrCreateCaSecret({ api: secretApiFor(loadKubeConfig(kubeconfig)), namespace: 'osm-system', name: 'http-ca' });
    assert.equal(result.created, true);
    const again = await loadOrCreateCaSecret({ api: secretApiFor(loadKubeConfig(kubeconfig)), namespace: 'osm-system', name: 'http-ca' });
    assert.equal(again.created, false);
    assert.equal(again.ca.caPem, result.ca.caPem);
  });

  // The controller retries an unreadable CA Secret for ever: bound the wait.
  it('reads and creates the CA Secret, holds the Lease and gets ready', { timeout: 60_000, skip }, async () => {
    running = await runController({
      kubernetes: { kubeconfig, backoff: { initialMs: 50, maxMs: 500 } },
      meshName: 'osm',
      stateDir: path.join(dir, 'unused'),
      xdsAddress: '127.0.0.1:0',
      httpAddress: '127.0.0.1:0',
      resyncIntervalMs: 0,
      controllerNamespace: 'osm-system',
      replicaIdentity: 'http-replica',
      logger: pino({ level: process.env.TEST_LOG ?? 'silent' }),
    });
    const port = running.httpPort;
    await eventually(async () => (await fetch(`http://127.0.0.1:${port}/readyz`)).status === 200, 'readyz', 20_000, 50);
    assert.ok((await server.objects('Secret', 'osm-system')).some((o) => o.metadata.name === 'trellis-ca'), 'the CA Secret was created');
    await eventually(async () => (await server.objects('Lease', 'osm-system')).length === 1, 'the Lease', 20_000, 50);
  });

  it('serves the CLI (trellis namespace list) too', { skip }, async () => {
    let text = '';
    await namespaceList(loadKubeConfig(kubeconfig), 'osm', { write: (t) => void (text += t) });
    assert.match(text, /bookstore/);
  });
});
