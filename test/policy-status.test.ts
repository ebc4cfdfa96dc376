/**
 * Policy status that means "programmed" (issue 16 item 1), end to end in one process: the
 * controller on a copy of examples/bookstore, sidecars driven by real gRPC clients over mTLS
 * (ACKing, or NACKing what a test says), `/debug/policies`' `status`, `/debug/policy-status`
 * and the `trellis status` / `trellis wait` code against the running operations server.
 */
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { TypeUrl } from '../src/api/type-urls.js';
import { printStatus, waitProgrammed, type StatusOutput } from '../src/cli/status-command.js';
import type { RunningController } from '../src/main.js';
import type { PolicyStatus, PolicyStatusDetail } from '../src/status/policy-status.js';
import type { DiscoveryResponse__Output } from '../src/xds/server/discovery-types.js';
import { decodeResources, type AdsTestClient } from './helpers/ads-client.js';
import type { SimulatedSidecar } from './helpers/sidecar.js';
import { startExampleController, type ExampleController } from './helpers/example-controller.js';
import { openMeshStream, splitYaml } from './helpers/status-mesh.js';

/** Retries `check` (which throws until it holds) for up to `timeoutMs`; rethrows its last error after that. */
async function eventually(check: () => Promise<void>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await check();
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

/** A StatusOutput that keeps what was written. */
function captured(): StatusOutput & { stdout: string; stderr: string } {
  const io = { stdout: '', stderr: '', out: (t: string) => void (io.stdout += t), err: (t: string) => void (io.stderr += t) };
  return io;
}

/** The weights bookbuyer's RDS gives bookstore-v1 and -v2 in `response`, when it carries them. */
function bookstoreWeights(response: DiscoveryResponse__Output): number[] | undefined {
  if (response.type_url !== TypeUrl.RouteConfiguration) return undefined;
  for (const rc of decodeResources(response) as { virtual_hosts?: { name: string; routes?: { route?: { weighted_clusters?: { clusters: { weight: { value: number } }[] } } }[] }[] }[]) {
    const vh = rc.virtual_hosts?.find((v) => v.name === 'outbound_virtual-host|bookstore.bookstore.svc.cluster.local');
    const clusters = vh?.routes?.[0]?.route?.weighted_clusters?.clusters;
    if (clusters) return clusters.map((c) => c.weight.value);
  }
  return undefined;
}

describe('policy status on examples/bookstore (real gRPC sidecars)', () => {
  let controller: ExampleController;
  let dir: string;
  let manifests: string;
  let stateDir: string;
  let running: RunningController;
  let controllerUrl: string;
  let clients: AdsTestClient[];
  let sidecars: readonly SimulatedSidecar[];

  before(async () => {
    controller = await startExampleController('trellis-s9s-status-');
    ({ dir, manifests, stateDir, running, controllerUrl, clients, sidecars } = controller);
  });

  after(async () => {
    await controller?.stop();
  });

  /** Connects a sidecar of `namespace/serviceAccount` with a certificate of the mesh CA. */
  const connect = (namespace: string, serviceAccount: string, reject?: (r: DiscoveryResponse__Output) => string | undefined) => controller.connect(namespace, serviceAccount, reject);

  async function statuses(): Promise<PolicyStatus[]> {
    const res = await fetch(`${controllerUrl}/debug/policies`);
    assert.equal(res.status, 200);
    return ((await res.json()) as { status: PolicyStatus[] }).status;
  }

  async function statusOf(kind: string, namespace: string, name: string): Promise<PolicyStatusDetail> {
    const res = await fetch(`${controllerUrl}/debug/policy-status?kind=${kind}&namespace=${namespace}&name=${name}`);
    assert.equal(res.status, 200, `${kind} ${namespace}/${name}`);
    return (await res.json()) as PolicyStatusDetail;
  }

  function wait(kind: 'TrafficSplit' | 'TrafficTarget' | 'HTTPRouteGroup' | 'MeshConfig' | 'UpstreamTrafficSetting', namespace: string, name: string, generation?: number, timeoutSeconds = 20) {
    const io = captured();
    return waitProgrammed({ controller: controllerUrl, kind, namespace, name, timeoutSeconds, generation }, io).then((code) => ({ code, ...io }));
  }

  let nackRds = false;
  const uuids: Record<string, string> = {};

  it('lists every policy object of the example, accepted, none affected while no proxy is connected', async () => {
    const list = await statuses();
    const names = list.map((s) => `${s.kind} ${s.namespace}/${s.name}`);
    for (const expected of ['TrafficTarget bookstore/bookstore', 'HTTPRouteGroup bookstore/bookstore-service-routes', 'TrafficSplit bookstore/bookstore-split', 'MeshConfig osm-system/osm-mesh-config']) {
      assert.ok(names.includes(expected), `${expected} in ${names.join(', ')}`);
    }
    for (const s of list) {
      assert.equal(s.accepted, true, `${s.kind} ${s.name}: ${s.problems.join('; ')}`);
      assert.deepEqual([s.affected, s.programmed, s.nacked, s.firstNack], [0, 0, 0, null]);
      assert.equal(s.generation, 1);
    }
    const res = await fetch(`${controllerUrl}/debug/policy-status?kind=TrafficSplit&namespace=bookstore&name=nope`);
    assert.equal(res.status, 404);
  });

  it('counts the proxies each object affects and reaches programmed once they ACK', async () => {
    uuids.bookbuyer = (await connect('bookbuyer', 'bookbuyer')).uuid;
    uuids.bookstore = (await connect('bookstore', 'bookstore')).uuid;
    uuids.bookstoreV2 = (await connect('bookstore', 'bookstore-v2')).uuid;
    uuids.bookthief = (await connect('bookthief', 'bookthief')).uuid;
    uuids.nacker = (await connect('bookbuyer', 'bookbuyer', (r) => (nackRds && r.type_url === TypeUrl.RouteConfiguration ? 'route: weighted cluster refused by this proxy' : undefined))).uuid;
    await eventually(async () => {
      const split = await statusOf('TrafficSplit', 'bookstore', 'bookstore-split');
      // Both bookbuyers reach the apex; the backends' proxies serve the apex's names.
      assert.deepEqual([split.affected, split.programmed], [4, 4], JSON.stringify(split));
      const meshConfig = await statusOf('MeshConfig', 'osm-system', 'osm-mesh-config');
      assert.deepEqual([meshConfig.affected, meshConfig.programmed], [5, 5]);
    }, 20_000);
    const tt = await statusOf('TrafficTarget', 'bookstore', 'bookstore');
    assert.deepEqual([tt.affected, tt.programmed], [3, 3]); // bookstore and the two bookbuyers
    const routes = await statusOf('HTTPRouteGroup', 'bookstore', 'bookstore-service-routes');
    assert.deepEqual([routes.affected, routes.programmed], [4, 4]); // through both TrafficTargets
    const meshConfig = await statusOf('MeshConfig', 'osm-system', 'osm-mesh-config');
    assert.deepEqual([meshConfig.affected, meshConfig.programmed], [5, 5]);
    assert.deepEqual(meshConfig.waiting, []);
    const result = await wait('TrafficSplit', 'bookstore', 'bookstore-split');
    assert.equal(result.code, 0, result.stderr);
    assert.match(result.stdout, /TrafficSplit bookstore\/bookstore-split generation 1 programmed: reached 4 of 4 affected proxies/);
  });

  it('a change to the TrafficSplit is programmed once every affected proxy ACKed it (wait exits 0)', async () => {
    await writeFile(path.join(manifests, 'split.yaml'), splitYaml(80, 20));
    const result = await wait('TrafficSplit', 'bookstore', 'bookstore-split', 2);
    assert.equal(result.code, 0, result.stderr);
    assert.match(result.stdout, /generation 2 programmed: reached 4 of 4 affected proxies/);
    // Programmed means the proxy holds it: bookbuyer's last RDS carries the new weights.
    const bookbuyer = sidecars[0];
    const last = [...bookbuyer.log].reverse().map(bookstoreWeights).find((w) => w !== undefined);
    assert.deepEqual(last, [80, 20]);
    // Objects the change did not touch stay programmed (their proxies were confirmed unaffected or regenerated).
    const tt = await statusOf('TrafficTarget', 'bookstore', 'bookstore');
    assert.deepEqual([tt.generation, tt.affected, tt.programmed], [1, 3, 3]);
  });

  it('a proxy that NACKs the change makes wait exit 1 with the reason', async () => {
    nackRds = true;
    await writeFile(path.join(manifests, 'split.yaml'), splitYaml(10, 90));
    const result = await wait('TrafficSplit', 'bookstore', 'bookstore-split', 3);
    assert.equal(result.code, 1);
    assert.match(result.stderr, /generation 3 was NACKed: reached 3 of 4 affected proxies, 1 NACKed \(RDS from bookbuyer\/bookbuyer .*: route: weighted cluster refused by this proxy\)/);
    const split = await statusOf('TrafficSplit', 'bookstore', 'bookstore-split');
    assert.deepEqual(split.firstNack, { proxy: uuids.nacker, identity: 'bookbuyer/bookbuyer', type: 'RDS', message: 'route: weighted cluster refused by this proxy' });
    assert.deepEqual(split.waiting.map((w) => w.proxy), [uuids.nacker]);
    // The NACKing proxy holds the configuration of generation 2, right for everything that entered before the change.
    const meshConfig = await statusOf('MeshConfig', 'osm-system', 'osm-mesh-config');
    assert.deepEqual([meshConfig.affected, meshConfig.programmed, meshConfig.nacked], [5, 5, 0]);
    const io = captured();
    await printStatus({ controller: controllerUrl, output: 'table', namespace: 'bookstore' }, io);
    assert.match(io.stdout, /^KIND +NAMESPACE +NAME +GENERATION +ACCEPTED +PROGRAMMED +NACKED +MESSAGE$/m);
    assert.match(io.stdout, /^TrafficSplit +bookstore +bookstore-split +3 +True +3\/4 +1 +RDS NACK from bookbuyer\/bookbuyer .*: route: weighted cluster refused by this proxy$/m);
    assert.doesNotMatch(io.stdout, /osm-system/);
    const json = captured();
    await printStatus({ controller: controllerUrl, output: 'json' }, json);
    assert.ok((JSON.parse(json.stdout) as PolicyStatus[]).some((s) => s.kind === 'MeshConfig'));
  });

  it('the fixed proxy ACKs the next change: programmed again', async () => {
    nackRds = false;
    await writeFile(path.join(manifests, 'split.yaml'), splitYaml(50, 50));
    const result = await wait('TrafficSplit', 'bookstore', 'bookstore-split', 4);
    assert.equal(result.code, 0, result.stderr);
    assert.match(result.stdout, /generation 4 programmed: reached 4 of 4/);
  });

  it('an object with a problem is not accepted: wait exits 1 with the problem', async () => {
    await writeFile(
      path.join(manifests, 'extra-target.yaml'),
      `apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata:
  name: bookthief-routes
  namespace: bookstore
spec:
  destination:
    kind: ServiceAccount
    name: bookstore
    namespace: bookstore
  sources:
    - kind: ServiceAccount
      name: bookthief
      namespace: bookthief
  rules:
    - kind: HTTPRouteGroup
      name: no-such-routes
`,
    );
    const result = await wait('TrafficTarget', 'bookstore', 'bookthief-routes');
    assert.equal(result.code, 1);
    assert.match(result.stderr, /TrafficTarget bookstore\/bookthief-routes generation 1 is not accepted:\n {2}TrafficTarget bookstore\/bookthief-routes: spec\.rules\[0\]\.name: HTTPRouteGroup bookstore\/no-such-routes does not exist/);
    const tt = await statusOf('TrafficTarget', 'bookstore', 'bookthief-routes');
    assert.equal(tt.accepted, false);
    assert.equal(tt.affected, 2); // bookstore and bookthief
  });

  it('a proxy whose new configuration fails validation keeps its last good one and is not programmed', async () => {
    const limits = (value: string) => `apiVersion: policy.openservicemesh.io/v1alpha1
kind: UpstreamTrafficSetting
metadata:
  name: limits
  namespace: bookstore
spec:
  host: bookstore-v1.bookstore.svc.cluster.local
  rateLimit:
    local:
      http:
        requests: 10
        unit: second
        responseHeadersToAdd:
          - name: x-limited
            value: "${value}"
`;
    // CR LF passes the CRD schema but breaks Envoy's HTTP_HEADER_VALUE rule: bookstore's inbound routes are invalid.
    await writeFile(path.join(manifests, 'limits.yaml'), limits('yes\\r\\nInjected: 1'));
    let detail: PolicyStatusDetail | undefined;
    await eventually(async () => {
      detail = await statusOf('UpstreamTrafficSetting', 'bookstore', 'limits');
      assert.notEqual(detail.meshGeneration, null);
      assert.deepEqual(detail.waiting.map((w) => w.proxy), [uuids.bookstore]);
      assert.match(detail.waiting[0].reason, /^configuration not sent: .*rds-inbound\.14001.*/);
    }, 20_000);
    assert.equal(detail!.accepted, true);
    assert.equal(detail!.programmed, detail!.affected - 1);
    const result = await wait('UpstreamTrafficSetting', 'bookstore', 'limits', undefined, 1);
    assert.equal(result.code, 1);
    assert.match(result.stderr, new RegExp(`bookstore/bookstore ${uuids.bookstore}: configuration not sent: `));
    // What entered before is still programmed on it: its last good configuration has it.
    const split = await statusOf('TrafficSplit', 'bookstore', 'bookstore-split');
    assert.equal(split.programmed, split.affected);
    // Fixed: programmed everywhere.
    await writeFile(path.join(manifests, 'limits.yaml'), limits('yes'));
    const fixed = await wait('UpstreamTrafficSetting', 'bookstore', 'limits', 2);
    assert.equal(fixed.code, 0, fixed.stderr);
  });

  it('times out naming the proxies it waits for when one never ACKs', async () => {
    // A bookbuyer proxy that asks for its configuration and never ACKs any of it.
    const { client, stream, uuid: silent } = await openMeshStream({ stateDir, xdsAddress: `127.0.0.1:${running.xdsPort}`, out: path.join(dir, 'silent'), namespace: 'bookbuyer', serviceAccount: 'bookbuyer' });
    clients.push(client);
    stream.request(TypeUrl.Cluster);
    stream.request(TypeUrl.Listener);
    await stream.waitFor((r) => r.type_url === TypeUrl.Listener);
    const io = captured();
    const code = await waitProgrammed({ controller: controllerUrl, kind: 'TrafficSplit', namespace: 'bookstore', name: 'bookstore-split', timeoutSeconds: 1 }, io);
    assert.equal(code, 1);
    assert.match(io.stderr, new RegExp(`^timed out after 1 s: TrafficSplit bookstore/bookstore-split generation 4 is not programmed: reached 4 of 5 affected proxies\n  bookbuyer/bookbuyer ${silent}: not ACKed yet\n$`));
    stream.cancel();
    const absent = captured();
    assert.equal(await waitProgrammed({ controller: controllerUrl, kind: 'TrafficSplit', namespace: 'bookstore', name: 'absent-split', timeoutSeconds: 0.3 }, absent), 1);
    assert.match(absent.stderr, /timed out after 0\.3 s: the controller at .* has no TrafficSplit bookstore\/absent-split/);
    const unknown = captured();
    assert.equal(await waitProgrammed({ controller: controllerUrl, kind: 'TrafficSplit', namespace: 'default', name: 'bookstore-split', timeoutSeconds: 60, unknownGraceMs: 300 }, unknown), 1);
    assert.match(unknown.stderr, /^the controller at .* has no TrafficSplit default\/bookstore-split \(for 0\.3 s\): check KIND\/NAME and -n\n$/, 'an object the controller does not know ends the wait long before its timeout');
    const behind = captured();
    assert.equal(await waitProgrammed({ controller: controllerUrl, kind: 'TrafficSplit', namespace: 'bookstore', name: 'bookstore-split', timeoutSeconds: 0.3, generation: 9 }, behind), 1);
    assert.match(behind.stderr, /timed out after 0\.3 s: TrafficSplit bookstore\/bookstore-split is at generation 4, not 9 yet/);
  });
  it('a client that ACKs LDS and CDS and never subscribes RDS, EDS or SDS is not programmed; a sidecar that fetches them is', async () => {
    // A real Envoy keeps listeners and clusters warming until what they name arrives: so must the status.
    const raw = await openMeshStream({ stateDir, xdsAddress: `127.0.0.1:${running.xdsPort}`, out: path.join(dir, 'lds-cds-only'), namespace: 'bookbuyer', serviceAccount: 'bookbuyer' });
    clients.push(raw.client);
    raw.stream.request(TypeUrl.Cluster);
    raw.stream.request(TypeUrl.Listener);
    raw.stream.ack(await raw.stream.waitFor((r) => r.type_url === TypeUrl.Cluster));
    raw.stream.ack(await raw.stream.waitFor((r) => r.type_url === TypeUrl.Listener));
    const { uuid: fetching } = await connect('bookbuyer', 'bookbuyer');
    let routes: PolicyStatusDetail | undefined;
    await eventually(async () => {
      routes = await statusOf('HTTPRouteGroup', 'bookstore', 'bookstore-service-routes');
      assert.ok(routes.waiting.some((w) => w.proxy === raw.uuid), JSON.stringify(routes));
      assert.ok(!routes.waiting.some((w) => w.proxy === fetching), JSON.stringify(routes));
    }, 20_000);
    assert.equal(routes!.waiting.find((w) => w.proxy === raw.uuid)?.reason, 'not ACKed yet');
    const result = await wait('HTTPRouteGroup', 'bookstore', 'bookstore-service-routes', undefined, 1);
    assert.equal(result.code, 1, result.stdout);
    assert.match(result.stderr, new RegExp(`bookbuyer/bookbuyer ${raw.uuid}: not ACKed yet`));
  });
});
