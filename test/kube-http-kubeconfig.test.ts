import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import pino from 'pino';
import { namespaceList } from '../src/cli/kube-commands.js';
import { loadOrCreateCaSecret, secretApiFor } from '../src/certificate/secret-store.js';
import { runController, type RunningController } from '../src/main.js';
import { loadKubeConfig } from '../src/sources/kubernetes/kubernetes-source.js';
import { bookstoreMesh } from './fixtures/mesh.js';
import { FakeKubeApiServer } from './helpers/fake-kube-apiserver.js';
import { eventually } from './helpers/wait.js';

// `kubectl proxy` serves the API over plain http:// and its kubeconfig has no
// insecure-skip-tls-verify: list, watch, the CA Secret, the Lease and the CLI must all work there.
describe('a --kubeconfig whose server is http:// (kubectl proxy)', () => {
  const server = new FakeKubeApiServer({ bookmarkIntervalMs: 200 });
  let dir: string;
  let kubeconfig: string;
  let running: RunningController | undefined;

  before(async () => {
    await server.start();
    dir = await mkdtemp(path.join(tmpdir(), 'trellis-http-kubeconfig-'));
    const file = await server.writeKubeconfig(dir);
    const text = await readFile(file, 'utf8');
    assert.match(text, /server: http:\/\//);
    kubeconfig = path.join(dir, 'proxy-kubeconfig');
    await writeFile(kubeconfig, text.replace(/^\s*insecure-skip-tls-verify: true\n/m, ''));
    server.apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'osm-system' } });
    for (const object of bookstoreMesh()) server.apply(object);
  });

  after(async () => {
    await running?.stop();
    await server.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('reads and creates the CA Secret through client-node', async () => {
    const result = await loadOrCreateCaSecret({ api: secretApiFor(loadKubeConfig(kubeconfig)), namespace: 'osm-system', name: 'http-ca' });
    assert.equal(result.created, true);
    const again = await loadOrCreateCaSecret({ api: secretApiFor(loadKubeConfig(kubeconfig)), namespace: 'osm-system', name: 'http-ca' });
    assert.equal(again.created, false);
    assert.equal(again.ca.caPem, result.ca.caPem);
  });

  // The controller retries an unreadable CA Secret for ever: bound the wait.
  it('reads and creates the CA Secret, holds the Lease and gets ready', { timeout: 60_000 }, async () => {
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
    assert.ok(server.objects('Secret', 'osm-system').some((o) => o.metadata.name === 'trellis-ca'), 'the CA Secret was created');
    await eventually(() => server.objects('Lease', 'osm-system').length === 1, 'the Lease', 20_000, 50);
  });

  it('serves the CLI (trellis namespace list) too', async () => {
    let text = '';
    await namespaceList(loadKubeConfig(kubeconfig), 'osm', { write: (t) => void (text += t) });
    assert.match(text, /bookstore/);
  });
});
