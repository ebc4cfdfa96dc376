import * as grpc from '@grpc/grpc-js';
import assert from 'node:assert/strict';
import { readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { TypeUrl } from '../src/api/type-urls.js';
import { writeProxyBootstrap } from '../src/cli/bootstrap-command.js';
import type { RunningController } from '../src/main.js';
import { AdsTestClient } from './helpers/ads-client.js';
import { startExampleController, type ExampleController } from './helpers/example-controller.js';
import { SimulatedSidecar } from './helpers/sidecar.js';

type Decoded = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

describe('controller end to end on examples/bookstore over mTLS', () => {
  let controller: ExampleController;
  let dir: string;
  let manifests: string;
  let stateDir: string;
  let running: RunningController;
  let clients: AdsTestClient[];
  const sidecars: SimulatedSidecar[] = [];

  before(async () => {
    controller = await startExampleController('trellis-e2e-', { resyncIntervalMs: 60_000 });
    ({ dir, manifests, stateDir, running, clients } = controller);
  });

  after(async () => {
    for (const s of sidecars) s.stop();
    await controller?.stop();
  });

  /** Issues a bootstrap with `trellis bootstrap`'s code and connects a simulated sidecar with its certificate. */
  async function connect(namespace: string, serviceAccount: string, nodeId?: string): Promise<{ sidecar: SimulatedSidecar; uuid: string }> {
    const out = path.join(dir, `${namespace}-${serviceAccount}-${sidecars.length}`);
    const result = await writeProxyBootstrap({ namespace, serviceAccount, out, stateDir, xdsAddress: `127.0.0.1:${running.xdsPort}` });
    const bootstrap = await readFile(result.files.bootstrap, 'utf8');
    assert.match(bootstrap, new RegExp(`id: ${result.commonName.replace(/\./g, '\\.')}`));
    const credentials = grpc.credentials.createSsl(
      await readFile(result.files.ca),
      await readFile(result.files.key),
      await readFile(result.files.cert),
    );
    const client = new AdsTestClient(`127.0.0.1:${running.xdsPort}`, credentials);
    clients.push(client);
    const sidecar = new SimulatedSidecar(client.openStream(nodeId ?? result.commonName)).start();
    sidecars.push(sidecar);
    return { sidecar, uuid: result.commonName.split('.')[0] };
  }

  async function getJson(urlPath: string): Promise<Decoded> {
    const res = await fetch(`http://127.0.0.1:${running.httpPort}${urlPath}`);
    assert.equal(res.status, 200, `${urlPath} → ${res.status}`);
    return (await res.json()) as Decoded;
  }

  function bookstoreRoute(sidecar: SimulatedSidecar): Decoded | undefined {
    const rds = sidecar.get(TypeUrl.RouteConfiguration, 'rds-outbound.14001');
    return rds?.virtual_hosts?.find((v: Decoded) => v.name === 'outbound_virtual-host|bookstore.bookstore.svc.cluster.local')?.routes?.[0]?.route;
  }

  it('is ready and healthy once the manifests are loaded', async () => {
    const ready = await fetch(`http://127.0.0.1:${running.httpPort}/readyz`);
    assert.equal(ready.status, 200);
    const policies = await getJson('/debug/policies');
    assert.deepEqual(policies.manifestErrors, []);
    assert.deepEqual(policies.problems, []);
    assert.equal(policies.settings.permissiveTrafficPolicyMode, false);
  });

  it('sends bookbuyer a 50/50 split of bookstore to v1 and v2, with every resource it names', async () => {
    const { sidecar: buyer, uuid } = await connect('bookbuyer', 'bookbuyer');
    // Secrets: its certificate and one outbound root for every upstream (bookbuyer serves nothing: no inbound root).
    await buyer.until((s) => bookstoreRoute(s) !== undefined && s.names(TypeUrl.Secret).length >= 2, 'bookbuyer routes and secrets');
    assert.deepEqual(buyer.names(TypeUrl.Secret).sort(), ['root-cert-for-mtls-outbound', 'service-cert']);
    const split = bookstoreRoute(buyer)!.weighted_clusters;
    assert.deepEqual(
      split.clusters.map((c: Decoded) => [c.name, c.weight.value]),
      [
        ['bookstore/bookstore-v1|14001', 50],
        ['bookstore/bookstore-v2|14001', 50],
      ],
    );
    assert.equal(split.total_weight, undefined, 'no total_weight (deprecated in Envoy): the sum of the weights is the total');
    for (const cluster of ['bookstore/bookstore-v1|14001', 'bookstore/bookstore-v2|14001']) {
      assert.ok(buyer.get(TypeUrl.Cluster, cluster), `cluster ${cluster}`);
      await buyer.until((s) => s.get(TypeUrl.ClusterLoadAssignment, cluster) !== undefined, `EDS for ${cluster}`);
    }
    assert.deepEqual(buyer.names(TypeUrl.Listener), ['outbound-listener']);
    assert.ok(buyer.get(TypeUrl.Secret, 'service-cert')?.tls_certificate?.private_key?.inline_string?.includes('PRIVATE KEY'));
    // Make before break on the wire: CDS came before EDS, LDS before RDS.
    const order = buyer.log.map((r) => r.type_url);
    assert.ok(order.indexOf(TypeUrl.Cluster) < order.indexOf(TypeUrl.ClusterLoadAssignment));
    assert.ok(order.indexOf(TypeUrl.Listener) < order.indexOf(TypeUrl.RouteConfiguration));

    const proxies = await getJson('/debug/proxies');
    const me = proxies.find((p: Decoded) => p.uuid === uuid);
    assert.equal(me.identity, 'bookbuyer/bookbuyer');
    assert.ok(me.streams[0].types.CDS.versionAcked, 'CDS version ACKed');
    const dump = await getJson(`/debug/config_dump?proxy=${uuid}`);
    const clusters = dump.configs.find((c: Decoded) => c['@type'].endsWith('ClustersConfigDump'));
    assert.ok(clusters.dynamic_active_clusters.some((c: Decoded) => c.cluster.name === 'bookstore/bookstore-v1|14001'));
    const secrets = dump.configs.find((c: Decoded) => c['@type'].endsWith('SecretsConfigDump'));
    const cert = secrets.dynamic_active_secrets.find((s: Decoded) => s.name === 'service-cert');
    assert.equal(cert.secret.tls_certificate.private_key.inline_string, '[redacted]');
  });

  it('takes the identity from the certificate, not from node.id', async () => {
    const { sidecar } = await connect('bookthief', 'bookthief', '6ba7b810-9dad-11d1-80b4-00c04fd430c8.sidecar.bookbuyer.bookbuyer.cluster.local');
    await sidecar.until((s) => s.names(TypeUrl.Cluster).length > 0, 'CDS');
    assert.deepEqual(sidecar.names(TypeUrl.Cluster), ['envoy-metrics-cluster']);
    sidecar.stop();
  });

  it('gives bookthief nothing for bookstore, until MeshConfig turns permissive mode on', async () => {
    const { sidecar: thief } = await connect('bookthief', 'bookthief');
    await thief.until((s) => s.names(TypeUrl.Cluster).length > 0, 'bookthief CDS');
    assert.deepEqual(thief.names(TypeUrl.Cluster), ['envoy-metrics-cluster']);
    assert.deepEqual(thief.names(TypeUrl.Listener), []);
    const file = path.join(manifests, 'meshconfig.yaml');
    const original = await readFile(file, 'utf8');
    assert.match(original, /enablePermissiveTrafficPolicyMode: false/);
    await writeFile(file, original.replace('enablePermissiveTrafficPolicyMode: false', 'enablePermissiveTrafficPolicyMode: true'));
    await thief.until((s) => s.get(TypeUrl.Cluster, 'bookstore/bookstore|14001') !== undefined, 'bookstore cluster for bookthief');
    await thief.until((s) => bookstoreRoute(s) !== undefined, 'bookstore route for bookthief');
    await writeFile(file, original);
    await thief.until((s) => s.get(TypeUrl.Cluster, 'bookstore/bookstore|14001') === undefined, 'bookstore cluster removed again');
    thief.stop();
  });

  it('keeps the last MeshConfig settings in force when the MeshConfig is deleted, and says so', async () => {
    const { sidecar: thief } = await connect('bookthief', 'bookthief');
    await thief.until((s) => s.names(TypeUrl.Cluster).length > 0, 'bookthief CDS');
    const file = path.join(manifests, 'meshconfig.yaml');
    const original = await readFile(file, 'utf8');
    await rm(file);
    let policies: Decoded = {};
    const deleted = (p: Decoded) => p.problems?.find((x: Decoded) => x.kind === 'MeshConfig' && /was deleted; its last settings stay in force/.test(x.message));
    for (let i = 0; i < 200 && !deleted(policies); i++) {
      await new Promise((r) => setTimeout(r, 25));
      policies = await getJson('/debug/policies');
    }
    assert.ok(deleted(policies), `the deletion is reported in /debug/policies: ${JSON.stringify(policies.problems)}`);
    assert.equal(deleted(policies).text, 'MeshConfig osm-system/osm-mesh-config: metadata: was deleted; its last settings stay in force (permissive mode off) until it is created again (a controller started without it uses the defaults)');
    assert.equal(policies.settings.permissiveTrafficPolicyMode, false);
    assert.deepEqual(policies.meshConfig, { name: 'osm-system/osm-mesh-config', deleted: true });
    await running.controller.flush();
    assert.deepEqual(thief.names(TypeUrl.Cluster), ['envoy-metrics-cluster'], 'bookthief got no bookstore, bookwarehouse or mysql cluster');
    assert.deepEqual(thief.names(TypeUrl.Listener), [], 'bookthief has no outbound listener');
    await writeFile(file, original);
    for (let i = 0; i < 200 && policies.meshConfig?.deleted !== false; i++) {
      await new Promise((r) => setTimeout(r, 25));
      policies = await getJson('/debug/policies');
    }
    assert.deepEqual(policies.problems, [], 'the warning is gone once the MeshConfig is back');
    thief.stop();
  });

  it('pushes new RDS to bookbuyer when the split file changes to 100/0', async () => {
    const buyer = sidecars[0];
    const file = path.join(manifests, 'split.yaml');
    const text = await readFile(file, 'utf8');
    await writeFile(file, text.replace(/weight: 50\n(\s+- service: bookstore-v2\n\s+weight:) 50/, 'weight: 100\n$1 0'));
    await buyer.until(
      (s) => JSON.stringify(bookstoreRoute(s)?.weighted_clusters?.clusters?.map((c: Decoded) => [c.name, c.weight.value])) ===
        JSON.stringify([['bookstore/bookstore-v1|14001', 100]]),
      'the 100/0 split',
    );
  });

  it("pushes a new ClusterLoadAssignment when a pod's IP changes", async () => {
    const buyer = sidecars[0];
    const file = path.join(manifests, 'bookstore.yaml');
    const text = await readFile(file, 'utf8');
    const v2 = buyer.get(TypeUrl.ClusterLoadAssignment, 'bookstore/bookstore-v2|14001')!;
    const oldIp: string = v2.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.address;
    assert.ok(text.includes(`podIP: ${oldIp}`), `bookstore.yaml has podIP ${oldIp}`);
    await writeFile(file, text.replace(`podIP: ${oldIp}`, 'podIP: 10.244.99.99'));
    await buyer.until(
      (s) =>
        s.get(TypeUrl.ClusterLoadAssignment, 'bookstore/bookstore-v2|14001')?.endpoints?.[0]?.lb_endpoints?.[0]?.endpoint?.address?.socket_address
          ?.address === '10.244.99.99',
      'the new endpoint IP',
    );
  });

  it('reports a broken YAML file and changes nothing else', async () => {
    const buyer = sidecars[0];
    const before = buyer.log.length;
    await writeFile(path.join(manifests, 'broken.yaml'), 'apiVersion: v1\nkind: Service\nmetadata:\n  name: [oops\n');
    let policies: Decoded = {};
    for (let i = 0; i < 100 && !policies.manifestErrors?.length; i++) {
      await new Promise((r) => setTimeout(r, 50));
      policies = await getJson('/debug/policies');
    }
    const error = policies.manifestErrors[0];
    assert.match(error.file, /broken\.yaml$/);
    assert.equal(typeof error.line, 'number');
    assert.ok(bookstoreRoute(buyer), 'bookbuyer keeps its routes');
    assert.equal(policies.trafficSplits.length, 1);
    await running.controller.flush();
    assert.equal(buyer.log.length, before, 'no push followed the broken file');
  });

  it('refuses a client without a mesh certificate', async () => {
    const ca = await readFile(path.join(stateDir, 'ca.pem'));
    const client = new AdsTestClient(`127.0.0.1:${running.xdsPort}`, grpc.credentials.createSsl(ca));
    clients.push(client);
    const stream = client.openStream('6ba7b810-9dad-11d1-80b4-00c04fd430c8.sidecar.bookbuyer.bookbuyer.cluster.local');
    stream.request(TypeUrl.Cluster);
    const status = await stream.ended();
    assert.notEqual(status.code, grpc.status.OK);
    assert.equal(stream.responses.length, 0);
  });

  it('unregisters a proxy when its stream closes', async () => {
    const { sidecar, uuid } = await connect('bookwarehouse', 'bookwarehouse');
    await sidecar.until((s) => s.names(TypeUrl.Cluster).length > 0, 'bookwarehouse CDS');
    assert.ok((await getJson('/debug/proxies')).some((p: Decoded) => p.uuid === uuid));
    sidecar.stop();
    let present = true;
    for (let i = 0; i < 100 && present; i++) {
      await new Promise((r) => setTimeout(r, 20));
      present = (await getJson('/debug/proxies')).some((p: Decoded) => p.uuid === uuid);
    }
    assert.equal(present, false, 'proxy gone from /debug/proxies');
  });
});
