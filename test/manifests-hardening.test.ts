import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { cp, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import pino from 'pino';
import { TypeUrl } from '../src/api/type-urls.js';
import { runController } from '../src/main.js';
import { AdsTestClient, TEST_NODE_ID } from './helpers/ads-client.js';
import { watchController } from './helpers/controller-process.js';
import { SimulatedSidecar } from './helpers/sidecar.js';

type Decoded = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const REPO = path.resolve(import.meta.dirname, '..');
const EXAMPLE = path.join(REPO, 'examples/bookstore');

/** Objects whose names (or references by name) are not Kubernetes names, beside valid ones. */
const BAD_NAMES = `apiVersion: v1
kind: Service
metadata:
  name: "book\\0store"
  namespace: bookstore
spec:
  clusterIP: 10.96.10.9
  selector: {app: bookstore}
  ports: [{name: bookstore-port, port: 14001}]
---
apiVersion: v1
kind: Service
metadata: {name: "bookstore\\u202e", namespace: bookstore}
spec:
  clusterIP: 10.96.10.10
  selector: {app: bookstore}
  ports: [{name: bookstore-port, port: 14001}]
---
apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata: {name: bookstore-nul, namespace: bookstore}
spec:
  destination: {kind: ServiceAccount, name: bookstore, namespace: bookstore}
  sources:
  - {kind: ServiceAccount, name: "book\\0buyer", namespace: bookbuyer}
  rules: [{kind: HTTPRouteGroup, name: bookstore-service-routes, matches: [buy-a-book]}]
`;

describe('manifests with names that are not Kubernetes names', () => {
  it('are reported with file and line and skipped; a new bookbuyer proxy gets its full, valid configuration', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'trellis-names-'));
    const manifests = path.join(dir, 'manifests');
    await cp(EXAMPLE, manifests, { recursive: true });
    await writeFile(path.join(manifests, 'names.yaml'), BAD_NAMES);
    const running = await runController({
      manifests, meshName: 'osm', stateDir: path.join(dir, 'state'), resyncIntervalMs: 0, logger: pino({ level: 'silent' }),
      xdsAddress: '127.0.0.1:0', xdsPlaintextAddress: '127.0.0.1:0', httpAddress: '127.0.0.1:0',
    });
    // The plaintext listener takes the identity from node.id (here bookbuyer/bookbuyer).
    const client = new AdsTestClient(`127.0.0.1:${running.xdsPlaintextPort}`);
    const buyer = new SimulatedSidecar(client.openStream(TEST_NODE_ID)).start();
    try {
      await buyer.until((s) => s.get(TypeUrl.RouteConfiguration, 'rds-outbound.14001') !== undefined, 'RDS rds-outbound.14001', 10_000);
      assert.deepEqual(buyer.names(TypeUrl.Listener), ['outbound-listener']);
      assert.ok(buyer.get(TypeUrl.Cluster, 'bookstore/bookstore-v1|14001'));
      assert.ok(!buyer.names(TypeUrl.Cluster).some((n) => /[\u0000\u202e]/.test(n)), buyer.names(TypeUrl.Cluster).join(', '));
      const policies = (await (await fetch(`http://127.0.0.1:${running.httpPort}/debug/policies`)).json()) as Decoded;
      assert.deepEqual(policies.configValidationFailures, []);
      const file = path.join(manifests, 'names.yaml');
      assert.deepEqual(policies.manifestErrors.map((e: Decoded) => (e.text as string).replace(/ is not .*| holds .*/, '')), [
        `${file}:4: Service bookstore/"book\\u0000store": metadata.name: "book\\u0000store"`,
        `${file}:13: Service bookstore/"bookstore\\u202e": metadata.name: "bookstore\\u202e"`,
        `${file}:25: TrafficTarget bookstore/bookstore-nul: spec.sources[0].name: "book\\u0000buyer"`,
      ]);
    } finally {
      buyer.stop();
      client.close();
      await running.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('trellis controller --max-manifest-size --max-manifests-total-size', () => {
  it('refuses a file over the limit, and one past the total bound, with manifest errors naming them, and a restart with the files in place becomes ready', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'trellis-max-size-'));
    try {
      const manifests = path.join(dir, 'manifests');
      await cp(EXAMPLE, manifests, { recursive: true });
      const big = path.join(manifests, 'big.yaml');
      // 2 MiB in one double-quoted annotation: 50 MB of it took today's main 2 GB and 8 s.
      const serviceAccount = (name: string, mebibytes: number): string => `apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: ${name}\n  namespace: bookbuyer\n  annotations:\n    big: "${'lorem ipsum '.repeat(Math.floor((mebibytes * 1024 * 1024) / 12))}"\n`;
      await writeFile(big, serviceAccount('big', 2));
      // 0.6 MiB each: the first (in path order) fits in the total of 1 MiB, the second does not.
      await writeFile(path.join(manifests, 'pad-1.yaml'), serviceAccount('pad-1', 0.6));
      await writeFile(path.join(manifests, 'pad-2.yaml'), serviceAccount('pad-2', 0.6));
      for (let start = 0; start < 2; start++) {
        const child = spawn(process.execPath, [
          'bin/trellis.js', 'controller', '--manifests', manifests, '--state-dir', path.join(dir, 'state'),
          '--xds-address', '127.0.0.1:0', '--http-address', '127.0.0.1:0', '--max-manifest-size', '1', '--max-manifests-total-size', '1', '--log-level', 'info',
        ], { cwd: REPO, stdio: ['ignore', 'pipe', 'pipe'] });
        const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
        const controller = watchController(child);
        try {
          const httpPort = await controller.httpPort;
          assert.equal((await fetch(`http://127.0.0.1:${httpPort}/readyz`)).status, 200);
          const policies = (await (await fetch(`http://127.0.0.1:${httpPort}/debug/policies`)).json()) as Decoded;
          assert.deepEqual(policies.manifestErrors.map((e: Decoded) => (e.text as string).replace(/to [\d.]+ MiB/, 'to N MiB')), [
            `${big}:1: is 2.0 MiB, larger than the limit of 1 MiB (--max-manifest-size): not read`,
            `${path.join(manifests, 'pad-2.yaml')}:1: is 614.5 KiB: loading it would bring the manifests loaded to N MiB, more than the limit of 1 MiB for all files (--max-manifests-total-size): not loaded`,
          ]);
          assert.ok(controller.output().includes(`invalid manifest: ${big}:1: is 2.0 MiB`), 'logged');
        } finally {
          child.kill('SIGTERM');
        }
        assert.equal(await exited, 0, 'exits cleanly on SIGTERM');
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
