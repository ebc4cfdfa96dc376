import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import { ObjectStore } from '../../store/object-store.js';
import type { KubeObject, MeshConfig, Namespace, ObjectKind, Pod, Service, TrafficSplit, TrafficTarget } from '../../store/objects.js';
import { ManifestsSource } from './manifests-source.js';
import { formatManifestError, parseManifests } from './parse.js';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const exampleDir = path.join(repoRoot, 'examples/bookstore');
const anchorsDir = path.join(path.resolve(repoRoot, '../shared'), 'anchors/osm/bookstore');

function names(store: ObjectStore, kind: ObjectKind): string[] {
  return store.list(kind).map((o: KubeObject) => (o.metadata.namespace ? `${o.metadata.namespace}/${o.metadata.name}` : o.metadata.name));
}

describe('examples/bookstore', () => {
  it('loads with no errors or warnings and holds the demo objects', async () => {
    const store = new ObjectStore();
    const source = new ManifestsSource({ dir: exampleDir, store, logger: pino({ level: 'silent' }), watch: false });
    await source.start();
    await source.stop();
    assert.deepEqual(source.errors().map(formatManifestError), []);
    assert.deepEqual(source.warnings().map(formatManifestError), []);
    assert.equal(source.synced, true);

    assert.deepEqual(names(store, 'Namespace'), ['bookbuyer', 'bookstore', 'bookthief', 'bookwarehouse']);
    for (const ns of store.list<Namespace>('Namespace')) assert.equal(ns.metadata.labels?.['openservicemesh.io/monitored-by'], 'osm');
    assert.deepEqual(names(store, 'ServiceAccount'), [
      'bookbuyer/bookbuyer', 'bookstore/bookstore', 'bookstore/bookstore-v2', 'bookthief/bookthief', 'bookwarehouse/bookwarehouse', 'bookwarehouse/mysql',
    ]);
    assert.deepEqual(names(store, 'Service'), ['bookstore/bookstore', 'bookstore/bookstore-v1', 'bookstore/bookstore-v2', 'bookwarehouse/bookwarehouse', 'bookwarehouse/mysql']);
    assert.equal(store.get<Service>('Service', 'bookwarehouse', 'mysql')?.spec.clusterIP, 'None');
    assert.deepEqual(store.get<Service>('Service', 'bookwarehouse', 'mysql')?.spec.ports, [{ name: 'client', port: 3306, targetPort: 3306, appProtocol: 'tcp' }]);
    assert.equal(store.get<Service>('Service', 'bookstore', 'bookstore')?.spec.ports?.[0].name, 'bookstore-port');
    assert.deepEqual(names(store, 'Deployment'), [
      'bookbuyer/bookbuyer', 'bookstore/bookstore', 'bookstore/bookstore-v2', 'bookthief/bookthief', 'bookwarehouse/bookwarehouse', 'bookwarehouse/mysql',
    ]);
    assert.equal(store.list('Pod').length, 6);
    const podIPs = store.list<Pod>('Pod').map((p) => p.status?.podIP);
    assert.equal(new Set(podIPs).size, 6);
    assert.deepEqual(names(store, 'TrafficTarget'), ['bookstore/bookstore', 'bookstore/bookstore-v2', 'bookwarehouse/bookstore-access-bookwarehouse', 'bookwarehouse/mysql']);
    assert.deepEqual(names(store, 'HTTPRouteGroup'), ['bookstore/bookstore-service-routes', 'bookwarehouse/bookwarehouse-service-routes']);
    assert.deepEqual(names(store, 'TCPRoute'), ['bookwarehouse/mysql']);
    const split = store.get<TrafficSplit>('TrafficSplit', 'bookstore', 'bookstore-split');
    assert.deepEqual(split?.spec, { service: 'bookstore.bookstore', backends: [{ service: 'bookstore-v1', weight: 50 }, { service: 'bookstore-v2', weight: 50 }] });
    const meshConfig = store.get<MeshConfig>('MeshConfig', 'osm-system', 'osm-mesh-config');
    assert.equal(meshConfig?.spec?.traffic?.enablePermissiveTrafficPolicyMode, false);
    assert.equal(meshConfig?.spec?.traffic?.enableEgress, false);
    const everySource = store.list<TrafficTarget>('TrafficTarget').flatMap((t) => t.spec.sources ?? []);
    assert.ok(!everySource.some((s) => s.name === 'bookthief'), 'no TrafficTarget for bookthief');
  });

  it('every OSM bookstore manifest (apps, access, split) parses without errors', { skip: !existsSync(anchorsDir) && 'no ../shared beside the repository' }, () => {
    let files = 0;
    for (const folder of ['apps', 'access', 'split']) {
      for (const name of readdirSync(path.join(anchorsDir, folder))) {
        if (!/\.(ya?ml|json)$/.test(name)) continue;
        files++;
        const file = path.join(anchorsDir, folder, name);
        const parsed = parseManifests(file, readFileSync(file, 'utf8'));
        assert.deepEqual(parsed.errors.map(formatManifestError), [], file);
        assert.ok(parsed.objects.length > 0, `${file}: no objects`);
        if (name === 'mysql.yaml') assert.deepEqual(parsed.ignored.map((i) => i.kind), ['StatefulSet']);
      }
    }
    assert.ok(files >= 12);
  });
});
