/**
 * "Programmed" means the proxy holds what its Listeners and Clusters name: a client that takes
 * LDS and CDS in and never asks for the route configurations, ClusterLoadAssignments and secrets
 * they name (a real Envoy would keep those listeners and clusters warming) is not programmed.
 * The controller on a copy of examples/bookstore, real gRPC clients over mTLS.
 */
import assert from 'node:assert/strict';
import { cp, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import pino from 'pino';
import { TypeUrl } from '../src/api/type-urls.js';
import { waitProgrammed, type StatusOutput } from '../src/cli/status-command.js';
import { runController, type RunningController } from '../src/main.js';
import type { PolicyStatusDetail } from '../src/status/policy-status.js';
import type { AdsTestClient } from './helpers/ads-client.js';
import type { SimulatedSidecar } from './helpers/sidecar.js';
import { connectMeshSidecar, openMeshStream } from './helpers/status-mesh.js';
import { eventually } from './helpers/wait.js';

const EXAMPLE = path.resolve(import.meta.dirname, '../examples/bookstore');

describe('policy status: programmed only once what LDS and CDS name is held', () => {
  let dir: string;
  let stateDir: string;
  let running: RunningController;
  let controllerUrl: string;
  const clients: AdsTestClient[] = [];
  const sidecars: SimulatedSidecar[] = [];

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'trellis-s10s-references-'));
    stateDir = path.join(dir, 'state');
    await cp(EXAMPLE, path.join(dir, 'manifests'), { recursive: true });
    running = await runController({
      manifests: path.join(dir, 'manifests'),
      meshName: 'osm',
      stateDir,
      xdsAddress: '127.0.0.1:0',
      httpAddress: '127.0.0.1:0',
      resyncIntervalMs: 0,
      debounceQuietMs: 20,
      logger: pino({ level: 'silent' }),
    });
    controllerUrl = `http://127.0.0.1:${running.httpPort}`;
  });

  after(async () => {
    for (const s of sidecars) s.stop();
    for (const c of clients) c.close();
    await running.stop();
    await rm(dir, { recursive: true, force: true });
  });

  async function statusOf(kind: string, namespace: string, name: string): Promise<PolicyStatusDetail> {
    const res = await fetch(`${controllerUrl}/debug/policy-status?kind=${kind}&namespace=${namespace}&name=${name}`);
    assert.equal(res.status, 200);
    return (await res.json()) as PolicyStatusDetail;
  }

  it('a client that ACKs LDS and CDS and never subscribes RDS, EDS or SDS is not programmed; a sidecar that fetches them is', { timeout: 60_000 }, async () => {
    const raw = await openMeshStream({ stateDir, xdsAddress: `127.0.0.1:${running.xdsPort}`, out: path.join(dir, 'raw'), namespace: 'bookbuyer', serviceAccount: 'bookbuyer' });
    clients.push(raw.client);
    raw.stream.request(TypeUrl.Cluster);
    raw.stream.request(TypeUrl.Listener);
    const cds = await raw.stream.waitFor((r) => r.type_url === TypeUrl.Cluster);
    const lds = await raw.stream.waitFor((r) => r.type_url === TypeUrl.Listener);
    raw.stream.ack(cds);
    raw.stream.ack(lds);
    const sidecar = await connectMeshSidecar({ stateDir, xdsAddress: `127.0.0.1:${running.xdsPort}`, out: path.join(dir, 'sidecar'), namespace: 'bookbuyer', serviceAccount: 'bookbuyer' });
    clients.push(sidecar.client);
    sidecars.push(sidecar.sidecar);
    let routes: PolicyStatusDetail | undefined;
    await eventually(async () => {
      routes = await statusOf('HTTPRouteGroup', 'bookstore', 'bookstore-service-routes');
      return routes.waiting.some((w) => w.proxy === raw.uuid) && !routes.waiting.some((w) => w.proxy === sidecar.uuid) && routes.programmed >= 1;
    }, 'the sidecar programmed', 20_000).catch((err: unknown) => {
      throw new Error(`${String(err)}: ${JSON.stringify(routes)}`);
    });
    assert.deepEqual(routes!.waiting.find((w) => w.proxy === raw.uuid)?.reason, 'not ACKed yet');
    const io = { stdout: '', stderr: '' };
    const output: StatusOutput = { out: (t) => void (io.stdout += t), err: (t) => void (io.stderr += t) };
    const code = await waitProgrammed({ controller: controllerUrl, kind: 'HTTPRouteGroup', namespace: 'bookstore', name: 'bookstore-service-routes', timeoutSeconds: 1 }, output);
    assert.equal(code, 1, io.stdout);
    assert.match(io.stderr, new RegExp(`bookbuyer/bookbuyer ${raw.uuid}: not ACKed yet`));
  });
});
