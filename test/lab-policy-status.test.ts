/**
 * `trellis wait --for programmed` against real Envoys (issue 16 item 1): the controller on a copy
 * of examples/bookstore, Envoy 1.40 sidecars of bookbuyer (SotW), bookstore (delta) and
 * bookstore-v2 (SotW) in network namespaces of the lab `s9s` (10.196.9.0/28, ADS on the bridge
 * at port 19174, operations on 127.0.0.1:19175: test/helpers/lab-ports.ts). A change to the TrafficSplit is programmed
 * (the command exits 0 and Envoy's own config dump has the new weights); with a proxy driven by a
 * real gRPC client that NACKs the next change, the command exits 1 and prints its reason.
 * Run under the lab lock: `flock /work/locks/lab.lock node --import tsx --test test/lab-policy-status.test.ts`.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { chmod, cp, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import pino from 'pino';
import { TypeUrl } from '../src/api/type-urls.js';
import { createLabNetwork, removeLabNetwork, type LabNetwork } from '../src/lab/network.js';
import { runController, type RunningController } from '../src/main.js';
import type { AdsTestClient } from './helpers/ads-client.js';
import { envoyTestSkip, startLabSidecar, waitForSidecarInSync, type LabSidecar } from './helpers/envoy.js';
import type { SimulatedSidecar } from './helpers/sidecar.js';
import { connectMeshSidecar, splitYaml } from './helpers/status-mesh.js';
import { LAB_SUITE_PORTS } from './helpers/lab-ports.js';

const PREFIX = 's9s';
const SUBNET = '10.196.9.0/28';
const { xds: XDS_PORT, http: HTTP_PORT } = LAB_SUITE_PORTS.labPolicyStatus;
const EXAMPLE = path.resolve(import.meta.dirname, '../examples/bookstore');
const CLI = path.resolve(import.meta.dirname, 'helpers/cli-main.ts');
const requirement = envoyTestSkip();

/** Runs `trellis ARGS…` from the sources: exit status and output. */
function trellis(args: readonly string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', CLI, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.once('error', reject);
    child.once('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

/** The weights of bookstore-v1 and -v2 in the route Envoy holds for bookstore (its admin config dump). */
async function envoyWeights(sidecar: LabSidecar): Promise<number[] | undefined> {
  const dump = (await sidecar.admin.configDump()) as { configs?: { dynamic_route_configs?: { route_config?: { virtual_hosts?: { name: string; routes?: { route?: { weighted_clusters?: { clusters: { weight: number }[] } } }[] }[] } }[] }[] };
  for (const config of dump.configs ?? []) {
    for (const rc of config.dynamic_route_configs ?? []) {
      const vh = rc.route_config?.virtual_hosts?.find((v) => v.name === 'outbound_virtual-host|bookstore.bookstore.svc.cluster.local');
      const clusters = vh?.routes?.[0]?.route?.weighted_clusters?.clusters;
      if (clusters) return clusters.map((c) => Number(c.weight));
    }
  }
  return undefined;
}

describe('trellis wait --for programmed with real Envoys (lab s9s)', { skip: requirement.skip }, () => {
  let lab: LabNetwork;
  let work: string;
  let manifests: string;
  let running: RunningController;
  const sidecars: LabSidecar[] = [];
  const clients: AdsTestClient[] = [];
  const simulated: SimulatedSidecar[] = [];
  const controller = `http://127.0.0.1:${HTTP_PORT}`;

  before(async () => {
    await removeLabNetwork(PREFIX); // a crashed earlier run
    lab = await createLabNetwork(PREFIX, SUBNET);
    work = await mkdtemp(path.join(os.tmpdir(), `${PREFIX}-status-`));
    await chmod(work, 0o755);
    manifests = path.join(work, 'manifests');
    await cp(EXAMPLE, manifests, { recursive: true });
    running = await runController({
      manifests,
      meshName: 'osm',
      stateDir: path.join(work, 'state'),
      xdsAddress: `${lab.bridgeAddress}:${XDS_PORT}`,
      httpAddress: `127.0.0.1:${HTTP_PORT}`,
      resyncIntervalMs: 0,
      debounceQuietMs: 20,
      warmUpConfigurationBytes: 0,
      logger: pino({ level: 'silent' }),
    });
    const pods = [
      { namespace: 'bookbuyer', serviceAccount: 'bookbuyer', delta: false, podIp: '10.244.1.10' },
      { namespace: 'bookstore', serviceAccount: 'bookstore', delta: true, podIp: '10.244.3.10' },
      { namespace: 'bookstore', serviceAccount: 'bookstore-v2', delta: false, podIp: '10.244.3.20' },
    ];
    for (const [i, pod] of pods.entries()) {
      sidecars.push(
        await startLabSidecar({
          lab,
          envoyPath: requirement.envoyPath!,
          stateDir: path.join(work, 'state'),
          xdsAddress: `${lab.bridgeAddress}:${XDS_PORT}`,
          ...pod,
          name: `${pod.serviceAccount}.${pod.namespace}`,
          labAddress: `10.196.9.${2 + i}`,
          workDir: work,
        }),
      );
    }
    await Promise.all(sidecars.map((s) => waitForSidecarInSync(s, controller, 60_000)));
  });

  after(async () => {
    for (const s of simulated) s.stop();
    for (const c of clients) c.close();
    await Promise.allSettled(sidecars.map((s) => s.stop()));
    await running?.stop();
    await removeLabNetwork(PREFIX);
    if (work) await rm(work, { recursive: true, force: true });
  });

  it('a TrafficSplit change reaches every affected Envoy: wait exits 0, and Envoy holds the new weights', async () => {
    assert.deepEqual(await envoyWeights(sidecars[0]), [50, 50]);
    await writeFile(path.join(manifests, 'split.yaml'), splitYaml(90, 10));
    const result = await trellis(['wait', '--for', 'programmed', 'trafficsplit/bookstore-split', '-n', 'bookstore', '--generation', '2', '--timeout', '60s', '--controller', controller]);
    assert.equal(result.code, 0, result.stderr);
    // bookbuyer reaches the apex; bookstore and bookstore-v2 serve it (its names on their inbound routes).
    assert.match(result.stdout, /^TrafficSplit bookstore\/bookstore-split generation 2 programmed: reached 3 of 3 affected proxies\n$/);
    assert.deepEqual(await envoyWeights(sidecars[0]), [90, 10]);
    const status = await trellis(['status', '--controller', controller, '-n', 'bookstore']);
    assert.equal(status.code, 0, status.stderr);
    assert.match(status.stdout, /^TrafficSplit +bookstore +bookstore-split +2 +True +3\/3 +0$/m);
  });

  it('a proxy that NACKs the next change (a real gRPC client) makes wait exit 1 with its reason', async () => {
    let nack = false;
    const { client, sidecar, uuid } = await connectMeshSidecar({
      stateDir: path.join(work, 'state'),
      xdsAddress: `${lab.bridgeAddress}:${XDS_PORT}`,
      out: path.join(work, 'nacker'),
      namespace: 'bookbuyer',
      serviceAccount: 'bookbuyer',
      reject: (r) => (nack && r.type_url === TypeUrl.RouteConfiguration ? 'Proto constraint validation failed: weighted cluster refused' : undefined),
    });
    clients.push(client);
    simulated.push(sidecar);
    // Connected and holding generation 2 like the Envoys.
    const deadline = Date.now() + 30_000;
    for (;;) {
      const status = (await (await fetch(`${controller}/debug/policy-status?kind=TrafficSplit&namespace=bookstore&name=bookstore-split`)).json()) as { affected: number; programmed: number };
      if (status.affected === 4 && status.programmed === 4) break;
      assert.ok(Date.now() < deadline, `the gRPC proxy did not get generation 2: ${JSON.stringify(status)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    nack = true;
    await writeFile(path.join(manifests, 'split.yaml'), splitYaml(30, 70));
    const waited = await trellis(['wait', '--for', 'programmed', 'trafficsplit/bookstore-split', '-n', 'bookstore', '--generation', '3', '--timeout', '60s', '--controller', controller]);
    assert.equal(waited.code, 1, waited.stdout);
    assert.match(waited.stderr, new RegExp(`^TrafficSplit bookstore/bookstore-split generation 3 was NACKed: reached 3 of 4 affected proxies, 1 NACKed \\(RDS from bookbuyer/bookbuyer ${uuid}: Proto constraint validation failed: weighted cluster refused\\)\\n$`));
    // The real Envoys took it.
    assert.deepEqual(await envoyWeights(sidecars[0]), [30, 70]);
  });
});
