import assert from 'node:assert/strict';
import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import {
  endpointChange,
  meshConfigChange,
  newService,
  planMesh,
  planProxies,
  splitChange,
  writeMesh,
  type MeshPlan,
} from '../bench/mesh-generator.js';
import { parseManifests } from '../src/sources/manifests/parse.js';
import type { KubeObject } from '../src/store/objects.js';

async function filesUnder(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true });
  return entries.filter((e) => e.isFile()).map((e) => path.join(e.parentPath, e.name)).sort();
}

describe('bench mesh generator', () => {
  let dir: string;
  let plan: MeshPlan;
  const objects: KubeObject[] = [];

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'trellis-bench-mesh-'));
    plan = planMesh({ services: 12, endpoints: 3, reach: 4, mode: 'smi', namespaces: 3, splits: 2 });
    await writeMesh(dir, plan);
    for (const file of await filesUnder(dir)) {
      const parsed = parseManifests(file, await readFile(file, 'utf8'));
      assert.deepEqual(parsed.errors, [], `${file}: ${JSON.stringify(parsed.errors)}`);
      assert.deepEqual(parsed.ignored, [], file);
      objects.push(...parsed.objects);
    }
  });

  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  const count = (kind: string): number => objects.filter((o) => o.kind === kind).length;

  it('writes S services with one identity each, E pods each, and two backends per split', () => {
    assert.equal(count('Namespace'), 3);
    assert.equal(count('ServiceAccount'), 12);
    assert.equal(count('Service'), 12 + 2 * 2);
    assert.equal(count('Pod'), 12 * 3);
    assert.equal(count('MeshConfig'), 1);
    const pods = objects.filter((o) => o.kind === 'Pod' && o.metadata.name.startsWith('svc-0005-'));
    assert.equal(pods.length, 3);
    for (const pod of pods) assert.equal((pod.spec as { serviceAccountName: string }).serviceAccountName, 'svc-0005');
    const ips = objects.filter((o) => o.kind === 'Pod').map((o) => (o.status as { podIP: string }).podIP);
    assert.equal(new Set(ips).size, ips.length, 'pod IPs are unique');
  });

  it('gives each identity K destinations and each destination K sources, through TrafficTargets', () => {
    assert.equal(count('HTTPRouteGroup'), 3);
    assert.equal(count('TrafficTarget'), 12);
    for (let i = 0; i < 12; i++) {
      assert.equal(plan.reachOf[i].length, 4);
      assert.equal(new Set(plan.reachOf[i]).size, 4);
      assert.ok(!plan.reachOf[i].includes(i), 'no identity reaches itself');
      assert.equal(plan.sourcesOf[i].length, 4);
    }
    const tt = objects.find((o) => o.kind === 'TrafficTarget' && o.metadata.name === 'tt-svc-0003')!;
    const spec = tt.spec as { destination: { name: string }; sources: { name: string }[] };
    assert.equal(spec.destination.name, 'svc-0003');
    assert.deepEqual(spec.sources.map((s) => s.name).sort(), plan.sourcesOf[3].map((i) => plan.services[i].serviceAccount).sort());
  });

  it('writes TrafficSplits of an apex and two backends, and permissive mode off in smi mode', () => {
    const splits = objects.filter((o) => o.kind === 'TrafficSplit');
    assert.equal(splits.length, 2);
    const spec = splits[0].spec as { service: string; backends: { service: string; weight: number }[] };
    const apex = plan.services[plan.splits[0].apex];
    assert.equal(spec.service, `${apex.name}.${apex.namespace}`);
    assert.deepEqual(spec.backends, [
      { service: `${apex.name}-v1`, weight: 50 },
      { service: `${apex.name}-v2`, weight: 50 },
    ]);
    const mc = objects.find((o) => o.kind === 'MeshConfig')!;
    assert.equal((mc.spec as { traffic: { enablePermissiveTrafficPolicyMode: boolean } }).traffic.enablePermissiveTrafficPolicyMode, false);
  });

  it('produces valid scenario edits', () => {
    const proxies = planProxies(plan, 6);
    assert.deepEqual(proxies.map((p) => p.identity), [0, 2, 4, 6, 8, 10]);
    assert.equal(new Set(proxies.map((p) => p.uuid)).size, 6);
    const edits = [endpointChange(plan, 3), splitChange(plan, 1), newService(plan, [0, 2]), meshConfigChange(plan)];
    for (const edit of edits) {
      const parsed = parseManifests(path.join(dir, edit.file), edit.text);
      assert.deepEqual(parsed.errors, [], edit.description);
      assert.ok(parsed.objects.length > 0);
    }
    assert.match(endpointChange(plan, 3).text, /podIP: 10\.200\./);
    assert.match(splitChange(plan, 1).text, /weight: 80/);
    assert.match(meshConfigChange(plan).text, /cipherSuites/);
    assert.deepEqual(endpointChange(plan, 3).affectedIdentities, plan.sourcesOf[3]);
  });

  it('turns permissive mode on in the permissive variant', () => {
    const permissive = planMesh({ services: 3, endpoints: 1, reach: 10, mode: 'permissive' });
    assert.equal(permissive.options.reach, 2, 'reach is clamped to S − 1');
    assert.match(meshConfigChange(permissive).text, /enablePermissiveTrafficPolicyMode: true/);
  });
});
