/**
 * Outbound routes split into buckets, through real Envoy sidecars on delta xDS (lab prefix `r7`):
 * a permissive mesh with more HTTP services on port 8080 than the split threshold (all backed by
 * two pods, web-a and web-b), so the client's sidecar gets `rds-outbound.8080.<b>` route
 * configurations and one `outbound_http_8080_<b>` chain per bucket. Envoy accepts them (no NACK,
 * its dump is the controller's), traffic to services of many buckets goes to their pods, a
 * ClusterIP is routed by Host among its bucket's virtual hosts only, and a new service or a
 * TrafficSplit weight change reaches the sidecar changing one route configuration only.
 * Needs root, iproute2, iptables and Envoy (TRELLIS_ENVOY or .cache/envoy-venv); skipped
 * without them, failing under CI=true. Run under `flock /work/locks/lab.lock` (fixed names).
 */
import assert from 'node:assert/strict';
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { OUTBOUND_ROUTE_SPLIT, outboundRouteBucket } from '../src/envoy/rds/rds.js';
import { compareWithController, type ConfigDump } from '../src/lab/envoy.js';
import { startLab, type Lab } from '../src/lab/lab.js';
import type { TrafficSummary } from '../src/lab/traffic.js';
import { envoyTestSkip } from './helpers/envoy.js';
import { labEnvoyAdmin, traffic as trafficIn, trafficUntil as trafficUntilIn, type LabPodRef } from './helpers/lab.js';
import { eventually } from './helpers/wait.js';
import { LAB_SUITE_PORTS } from './helpers/lab-ports.js';

const PREFIX = 'r7';
const SUBNET = '10.237.7.0/24';
const { xds: XDS_PORT, http: HTTP_PORT } = LAB_SUITE_PORTS.labRoutes;
const HTTP_ADDRESS = `127.0.0.1:${HTTP_PORT}`;
const { envoyPath, skip } = envoyTestSkip(['ip', 'setpriv', 'iptables-restore']);

/** More HTTP services on port 8080 than the split threshold. */
const SERVICES = OUTBOUND_ROUTE_SPLIT.threshold + 12;
const CLIENT: LabPodRef = { pod: 'client', namespace: 'client' };
const svcName = (i: number) => `svc-${String(i).padStart(3, '0')}`;
const clusterIp = (i: number) => `10.96.${7 + (i >> 8)}.${(i & 255) + 1}`;
/** Even services select web-a, odd ones web-b. */
const podOf = (i: number) => (i % 2 === 0 ? 'web-a' : 'web-b');
const bucketOf = (name: string) => outboundRouteBucket({ namespace: 'shop', name }, OUTBOUND_ROUTE_SPLIT.buckets);

const namespace = (name: string) => `apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ${name}\n  labels:\n    openservicemesh.io/monitored-by: osm\n`;
const serviceAccount = (ns: string, name: string) => `apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: ${name}\n  namespace: ${ns}\n`;
const service = (name: string, app: string, ip: string) =>
  `apiVersion: v1\nkind: Service\nmetadata:\n  name: ${name}\n  namespace: shop\nspec:\n  clusterIP: ${ip}\n  selector:\n    app: ${app}\n  ports:\n    - name: http\n      port: 8080\n      targetPort: 8080\n`;
const pod = (ns: string, name: string, ip: string, ports: boolean) =>
  `apiVersion: v1\nkind: Pod\nmetadata:\n  name: ${name}\n  namespace: ${ns}\n  labels:\n    app: ${name}\nspec:\n  serviceAccountName: ${name}\n  containers:\n    - name: ${name}\n${ports ? '      ports:\n        - name: http\n          containerPort: 8080\n' : ''}status:\n  phase: Running\n  podIP: ${ip}\n`;
const split = (weights: [number, number]) =>
  `apiVersion: split.smi-spec.io/v1alpha2\nkind: TrafficSplit\nmetadata:\n  name: apex\n  namespace: shop\nspec:\n  service: svc-apex\n  backends:\n    - service: ${svcName(0)}\n      weight: ${weights[0]}\n    - service: ${svcName(1)}\n      weight: ${weights[1]}\n`;

function manifests(): Record<string, string> {
  return {
    'meshconfig.yaml': `apiVersion: config.openservicemesh.io/v1alpha2\nkind: MeshConfig\nmetadata:\n  name: osm-mesh-config\n  namespace: osm-system\nspec:\n  traffic:\n    enablePermissiveTrafficPolicyMode: true\n    enableEgress: false\n`,
    'namespaces.yaml': [namespace('client'), namespace('shop')].join('---\n'),
    'pods.yaml': [
      serviceAccount('client', 'client'),
      serviceAccount('shop', 'web-a'),
      serviceAccount('shop', 'web-b'),
      pod('client', 'client', '10.244.7.20', false),
      pod('shop', 'web-a', '10.244.7.10', true),
      pod('shop', 'web-b', '10.244.7.11', true),
    ].join('---\n'),
    'services.yaml': [...Array.from({ length: SERVICES }, (_, i) => service(svcName(i), podOf(i), clusterIp(i))), service('svc-apex', 'svc-apex', '10.96.9.1')].join('---\n'),
    'split.yaml': split([50, 50]),
  };
}

/** The versions of the outbound route configurations Envoy holds, by name (its admin `/config_dump`). */
function routeVersions(dump: ConfigDump): Map<string, string> {
  const out = new Map<string, string>();
  for (const c of (dump as { configs: { '@type': string; dynamic_route_configs?: { version_info: string; route_config: { name: string } }[] }[] }).configs) {
    for (const r of c.dynamic_route_configs ?? []) if (r.route_config.name.startsWith('rds-outbound.')) out.set(r.route_config.name, r.version_info);
  }
  return out;
}

/** The names of the outbound listener's filter chains and the route configuration each names (Envoy's dump). */
function outboundChains(dump: ConfigDump): Map<string, string | undefined> {
  const out = new Map<string, string | undefined>();
  for (const c of (dump as { configs: { dynamic_listeners?: { name: string; active_state?: { listener: { filter_chains: { name: string; filters: { typed_config: { rds?: { route_config_name: string } } }[] }[] } } }[] }[] }).configs) {
    for (const l of c.dynamic_listeners ?? []) {
      if (l.name !== 'outbound-listener') continue;
      for (const fc of l.active_state?.listener.filter_chains ?? []) out.set(fc.name, fc.filters[0]?.typed_config.rds?.route_config_name);
    }
  }
  return out;
}

describe('outbound routes split into buckets, through real Envoy on delta xDS', { skip, timeout: 600_000 }, () => {
  let lab: Lab;
  let dir: string;
  let manifestsDir: string;

  const traffic = (url: string, more: string[] = []): Promise<TrafficSummary> => trafficIn(lab, CLIENT, ['--url', url, '--requests', '20', ...more]);
  const admin = () => labEnvoyAdmin(lab, CLIENT);
  /** Waits until the client's Envoy holds what the controller sent it and no xDS update was rejected. */
  async function inSync(): Promise<void> {
    const uuid = lab.state().pods.find((p) => p.name === CLIENT.pod)!.proxyUuid!;
    let last: string[] = [];
    await eventually(
      async () => {
        const proxies = (await (await fetch(`http://${lab.controllerHttp}/debug/proxies`)).json()) as { uuid: string; streams: { types: Record<string, { lastNack: unknown }> }[] }[];
        for (const p of proxies) for (const st of p.streams) for (const [type, s] of Object.entries(st.types)) assert.equal(s.lastNack, null, `${p.uuid} NACKed ${type}: ${JSON.stringify(s.lastNack)}`);
        const trellis = (await (await fetch(`http://${lab.controllerHttp}/debug/config_dump?proxy=${uuid}`)).json()) as ConfigDump;
        last = compareWithController(await admin().configDump(), trellis, { stats: await admin().stats(), delta: true });
        return last.length === 0;
      },
      `the client's Envoy in sync with the controller (last differences: ${last.join('; ')})`,
      60_000,
      200,
    );
  }

  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), `${PREFIX}-routes-`));
    await chmod(dir, 0o755);
    manifestsDir = path.join(dir, 'manifests');
    await mkdir(manifestsDir);
    for (const [file, text] of Object.entries(manifests())) await writeFile(path.join(manifestsDir, file), text);
    lab = await startLab({ manifestsDir, envoyPath, prefix: PREFIX, subnet: SUBNET, httpAddress: HTTP_ADDRESS, xdsPort: XDS_PORT, stateDir: path.join(dir, 'state'), delta: true });
    await lab.waitForAllAcked(180_000);
    await inSync();
  });

  after(async () => {
    await lab?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('Envoy accepts the split: a chain per bucket naming its rds-outbound.8080.<b>, and nothing rejected', async () => {
    const dump = await admin().configDump();
    const routes = routeVersions(dump);
    const buckets = new Set([...Array.from({ length: SERVICES }, (_, i) => bucketOf(svcName(i))), bucketOf('svc-apex')]);
    assert.deepEqual([...routes.keys()].sort(), [...buckets].map((b) => `rds-outbound.8080.${b}`).sort());
    const chains = outboundChains(dump);
    for (const b of buckets) assert.equal(chains.get(`outbound_http_8080_${b}`), `rds-outbound.8080.${b}`);
    console.log(`client sidecar: ${routes.size} outbound route configurations, ${chains.size} outbound chains`);
  });

  it('traffic to services of every bucket reaches the pods their selectors name', async () => {
    // One service of each bucket (the first), each checked by name.
    const seen = new Map<number, number>();
    for (let i = 0; i < SERVICES; i++) if (!seen.has(bucketOf(svcName(i)))) seen.set(bucketOf(svcName(i)), i);
    for (const i of seen.values()) {
      const s = await traffic(`http://${svcName(i)}.shop:8080/`);
      assert.deepEqual({ statuses: s.statuses, answeredBy: s.answeredBy }, { statuses: { '200': 20 }, answeredBy: { [podOf(i)]: 20 } }, `${svcName(i)} (bucket ${bucketOf(svcName(i))})`);
    }
    console.log(`services of ${seen.size} buckets answered by their pods`);
  });

  it('a ClusterIP is routed by Host among its bucket\'s virtual hosts only', async () => {
    const b = bucketOf(svcName(0));
    // A service of svc-000's bucket selecting the other pod, and one of another bucket.
    const same = Array.from({ length: SERVICES }, (_, i) => i).find((i) => i % 2 === 1 && bucketOf(svcName(i)) === b);
    const other = Array.from({ length: SERVICES }, (_, i) => i).find((i) => bucketOf(svcName(i)) !== b)!;
    assert.ok(same !== undefined, 'an odd service shares svc-000\'s bucket');
    const sameBucket = await traffic(`http://${clusterIp(0)}:8080/`, ['--header', `host:${svcName(same)}.shop`]);
    assert.deepEqual(sameBucket.answeredBy, { 'web-b': 20 }, `Host ${svcName(same)} on svc-000's ClusterIP`);
    const otherBucket = await traffic(`http://${clusterIp(0)}:8080/`, ['--header', `host:${svcName(other)}.shop`]);
    assert.deepEqual({ statuses: otherBucket.statuses, answeredBy: otherBucket.answeredBy }, { statuses: { '404': 20 }, answeredBy: {} }, `Host ${svcName(other)} (bucket ${bucketOf(svcName(other))}) on svc-000's ClusterIP`);
  });

  it('a TrafficSplit weight change reaches the sidecar changing only the apex\'s route configuration', async () => {
    const before = routeVersions(await admin().configDump());
    const even = await traffic('http://svc-apex.shop:8080/', ['--requests', '200']);
    assert.deepEqual(Object.keys(even.answeredBy).sort(), ['web-a', 'web-b'], JSON.stringify(even));
    await writeFile(path.join(manifestsDir, 'split.yaml'), split([1, 99]));
    const { afterMs } = await trafficUntilIn(lab, CLIENT, ['--url', 'http://svc-apex.shop:8080/', '--requests', '200'], (s) => (s.answeredBy['web-b'] ?? 0) >= 190, 'svc-apex mostly to web-b');
    await inSync();
    const after = routeVersions(await admin().configDump());
    const changed = [...after].filter(([n, v]) => before.get(n) !== v).map(([n]) => n);
    console.log(`split change seen after ${afterMs} ms; route configurations changed: ${changed.join(', ')}`);
    assert.deepEqual(changed, [`rds-outbound.8080.${bucketOf('svc-apex')}`]);
  });

  it('a new service reaches the sidecar changing one route configuration (its bucket) and the listener', async () => {
    const before = routeVersions(await admin().configDump());
    await writeFile(path.join(manifestsDir, 'svc-new.yaml'), service('svc-new', 'web-b', '10.96.9.2'));
    const { afterMs } = await trafficUntilIn(lab, CLIENT, ['--url', 'http://svc-new.shop:8080/', '--requests', '5', '--timeout-ms', '1000'], (s) => s.answeredBy['web-b'] === 5, 'svc-new answered by web-b');
    await inSync();
    const after = routeVersions(await admin().configDump());
    const changed = [...after].filter(([n, v]) => before.get(n) !== v).map(([n]) => n);
    console.log(`new service seen after ${afterMs} ms; route configurations changed: ${changed.join(', ')}`);
    assert.deepEqual(changed, [`rds-outbound.8080.${bucketOf('svc-new')}`]);
    assert.equal(outboundChains(await admin().configDump()).get(`outbound_http_8080_${bucketOf('svc-new')}`), `rds-outbound.8080.${bucketOf('svc-new')}`);
  });
});
