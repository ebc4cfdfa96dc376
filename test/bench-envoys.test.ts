import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { EnvoyFleet } from '../bench/envoy-fleet.js';
import { EnvoyRun, envoyProxies } from '../bench/envoy-run.js';
import { nowMs } from '../bench/lean-sidecar.js';
import { endpointChange, planMesh, planProxies, splitChange, writeMesh } from '../bench/mesh-generator.js';
import { ControllerProcess } from '../bench/processes.js';
import { removeLabNetwork } from '../src/lab/network.js';
import { envoyTestSkip } from './helpers/envoy.js';

const REPO_DIR = path.resolve(import.meta.dirname, '..');
const PREFIX = 'tlb';
const SUBNET = '10.254.0.0/24';

describe('bench --envoys: choosing the real Envoys', () => {
  const plan = planMesh({ services: 12, endpoints: 2, reach: 3, mode: 'smi', namespaces: 3, splits: 2 });
  const proxies = planProxies(plan, 12);

  it('takes the identities the scenarios affect first, in turn, each Envoy with a UUID of its own', () => {
    const endpoint = endpointChange(plan, 5);
    const split = splitChange(plan, 0);
    const envoys = envoyProxies(proxies, [endpoint, split], 4);
    assert.equal(envoys.length, 4);
    assert.ok(endpoint.affectedIdentities.includes(envoys[0].identity), 'the first Envoy is one the endpoint change affects');
    assert.ok(split.affectedIdentities.includes(envoys[1].identity), 'the second is one the split change affects');
    const uuids = new Set([...envoys.map((e) => e.uuid), ...proxies.map((p) => p.uuid)]);
    assert.equal(uuids.size, envoys.length + proxies.length, 'no Envoy shares a UUID with a simulated proxy or another Envoy');
    for (const e of envoys) {
      const planned = proxies.find((p) => p.identity === e.identity)!;
      assert.deepEqual([e.namespace, e.serviceAccount], [planned.namespace, planned.serviceAccount]);
    }
  });

  it('cycles through every planned identity when there are more Envoys than identities', () => {
    const envoys = envoyProxies(proxies, [], 30);
    assert.equal(new Set(envoys.map((e) => e.identity)).size, 12);
    assert.equal(new Set(envoys.map((e) => e.uuid)).size, 30);
  });
});

const { envoyPath, skip } = envoyTestSkip();

describe('bench --envoys: real Envoys in lab pods', { skip }, () => {
  let work: string | undefined;
  let controller: ControllerProcess | undefined;
  let fleet: EnvoyFleet | undefined;

  after(async () => {
    await fleet?.stop().catch(() => undefined);
    await controller?.stop();
    await removeLabNetwork(PREFIX);
    if (work) await rm(work, { recursive: true, force: true });
  });

  it('times the initial sync and a change on the Envoys it affects, sees no NACK, and leaves nothing behind', async () => {
    work = await mkdtemp(path.join(os.tmpdir(), 'trellis-bench-envoys-test-'));
    const plan = planMesh({ services: 6, endpoints: 2, reach: 2, mode: 'smi', namespaces: 2, splits: 1 });
    const manifests = path.join(work, 'manifests');
    const stateDir = path.join(work, 'state');
    await writeMesh(manifests, plan);
    const edit = endpointChange(plan, 3);
    const proxies = envoyProxies(planProxies(plan, 6), [edit], 3);
    const affected = proxies.filter((p) => edit.affectedIdentities.includes(p.identity)).length;
    assert.ok(affected > 0 && affected < 3, `some Envoys are affected and some not (${affected})`);

    fleet = await EnvoyFleet.create({ prefix: PREFIX, subnet: SUBNET, envoyPath: envoyPath!, workDir: await mkdtemp(path.join(os.tmpdir(), 'trellis-bench-envoys-test-pods-')) });
    controller = await ControllerProcess.start({
      repoDir: REPO_DIR, manifests, stateDir, logFile: path.join(work, 'controller.log'), readyTimeoutMs: 60_000,
      xdsHost: fleet.lab.bridgeAddress, ports: [19410, 19411, 19412],
    });
    await fleet.preparePods({ stateDir, xdsPort: 19410, pods: proxies.map((proxy) => ({ proxy, podIp: plan.services[proxy.identity].podIps[0] })) });
    const run = new EnvoyRun(fleet, `http://127.0.0.1:${controller.httpPort}`);

    await run.initialSync(nowMs(), Promise.resolve(), 60_000);
    assert.deepEqual(run.details.start_failures, []);
    assert.equal(run.result.initial_sync.updated, 3, 'every Envoy synced');
    assert.equal(run.result.initial_sync_after_admin_up?.updated, 3);

    const baseline = await run.baseline();
    assert.ok(baseline.every((v) => v.includes('|')), `every Envoy answers its versions: ${baseline.join(' / ')}`);
    const t0 = nowMs();
    const file = path.join(manifests, edit.file);
    await mkdir(path.dirname(file), { recursive: true });
    await writeFile(file, edit.text);
    await run.scenario('endpoint_change', edit, baseline, t0, Promise.resolve(), 60_000);
    const timing = run.result.scenarios.endpoint_change!;
    assert.deepEqual([timing.updated, timing.expected], [affected, affected], 'every affected Envoy showed the endpoint change');
    assert.ok(timing.max_ms! > 0);
    assert.equal(run.details.scenarios.endpoint_change!.unaffected_changed, 0, 'no Envoy the change does not affect changed');
    assert.equal(run.details.scenarios.endpoint_change!.timed_out, false);

    await run.finish();
    assert.equal(run.result.update_rejected, 0, 'no NACK');
    assert.equal(run.details.in_sync_at_end, 3, run.details.differences.join('\n'));
    assert.ok(run.result.rss_max_mb! > 0);

    await fleet.stop();
    fleet = undefined;
    assert.deepEqual(await removeLabNetwork(PREFIX), [], 'stop removed every netns, link and /etc/netns dir of the prefix');
    const netns = execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' });
    assert.ok(!netns.split('\n').some((l) => l.startsWith(`${PREFIX}-`)), netns);
  });
});
