/**
 * In-process cost of each stage of the controller's push pipeline for one synthetic mesh, to
 * locate what a push spends its time on (no gRPC, no second process):
 * manifests load, `buildMeshSnapshot`, and per proxy `getServiceCertificate` (first issue),
 * `generateProxyResources`, `validateProxyResources`, `encodeResources`, `buildProxySnapshot`,
 * on first connection and again after scenario (d)'s MeshConfig change (warm caches); then the
 * controller's own path (in layers: `generateConfiguration`, `buildProxySnapshot` with the shared
 * layers) per proxy, and an estimate of what its resource maps' entries hold.
 *
 * ```
 * node --import tsx bench/pipeline-stages.ts --services 1000 --proxies 50 [--mode smi|permissive]
 * ```
 */
import 'reflect-metadata';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import { MeshSnapshotBuilder } from '../src/catalog/build-snapshot.js';
import { CertificateAuthority } from '../src/certificate/authority.js';
import { CertificateManager } from '../src/certificate/manager.js';
import { generateConfiguration } from '../src/controller/configuration.js';
import { encodeResources } from '../src/controller/mesh-controller.js';
import { GenerationContext, proxyProfile } from '../src/envoy/context.js';
import { generateProxyResources } from '../src/envoy/generate.js';
import { ResourceCheckCache, validateProxyResources } from '../src/envoy/validate/index.js';
import { parseCommonName, proxyCommonName, type Proxy } from '../src/proxy/types.js';
import { ManifestsSource } from '../src/sources/manifests/manifests-source.js';
import { ObjectStore } from '../src/store/object-store.js';
import { ResourceInterner, buildProxySnapshot, sharedLayerOf } from '../src/xds/cache/snapshot-cache.js';
import { nowMs } from './lean-sidecar.js';
import { MESH_NAME, meshConfigChange, planMesh, planProxies, writeMesh, type MeshMode } from './mesh-generator.js';

interface Totals {
  cert: number;
  generate: number;
  validate: number;
  encode: number;
  snapshot: number;
  resources: number;
  bytes: number;
  /** Encoded bytes by type (short name), summed over the proxies. */
  byType: Map<string, number>;
  /** Bytes of the distinct Buffers the proxies' snapshots hold (a Buffer many hold counts once). */
  held: number;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { services: { type: 'string' }, proxies: { type: 'string' }, endpoints: { type: 'string' }, reach: { type: 'string' }, mode: { type: 'string' } },
  });
  const services = Number(values.services ?? '1000');
  const count = Number(values.proxies ?? '50');
  const mode = (values.mode ?? 'smi') as MeshMode;
  const plan = planMesh({ services, endpoints: Number(values.endpoints ?? '5'), reach: Number(values.reach ?? '10'), mode });
  const work = await mkdtemp(path.join(os.tmpdir(), 'trellis-stages-'));
  try {
    const dir = path.join(work, 'manifests');
    await writeMesh(dir, plan);
    const logger = pino({ level: 'silent' });
    const store = new ObjectStore({ logger });
    let t = nowMs();
    const source = new ManifestsSource({ dir, store, logger, watch: false });
    await source.start();
    const load = nowMs() - t;
    // One builder, as the controller keeps one: a rebuild reuses what the store did not change.
    const builder = new MeshSnapshotBuilder();
    t = nowMs();
    const { snapshot: mesh } = builder.build(store, { meshName: MESH_NAME, generation: 1 });
    const build = nowMs() - t;
    t = nowMs();
    const again = builder.build(store, { meshName: MESH_NAME, generation: 2, previous: mesh }).snapshot;
    const rebuild = nowMs() - t;
    const ca = await CertificateAuthority.loadOrCreate(path.join(work, 'state'));
    const certificates = new CertificateManager({ ca });
    // One cache for every proxy, as the controller keeps one (repeated content is encoded and checked once).
    const checked = new ResourceCheckCache();
    const interner = new ResourceInterner();
    const proxies = planProxies(plan, count).map((p) => parseCommonName(proxyCommonName(p.uuid, 'sidecar', p.namespace, p.serviceAccount)));
    const pass = async (context: GenerationContext): Promise<Totals> => {
      const totals: Totals = { cert: 0, generate: 0, validate: 0, encode: 0, snapshot: 0, resources: 0, bytes: 0, byType: new Map(), held: 0 };
      const seen = new WeakSet<Buffer>();
      for (const proxy of proxies) {
        let t = nowMs();
        const cert = await certificates.getServiceCertificate(proxy.identity);
        totals.cert += nowMs() - t;
        t = nowMs();
        const resources = generateProxyResources(context, proxyProfile(proxy), { certChainPem: cert.certPem, privateKeyPem: cert.keyPem, caPem: certificates.caPem });
        totals.generate += nowMs() - t;
        t = nowMs();
        validateProxyResources(resources, checked);
        totals.validate += nowMs() - t;
        t = nowMs();
        const encoded = encodeResources(resources, checked);
        totals.encode += nowMs() - t;
        t = nowMs();
        const built = buildProxySnapshot(encoded, interner);
        totals.snapshot += nowMs() - t;
        for (const [type, list] of built.resources) {
          totals.resources += list.size;
          const short = type.slice(type.lastIndexOf('.') + 1);
          for (const r of list.values()) {
            const value = r.resource.value;
            totals.bytes += value.length;
            totals.byType.set(short, (totals.byType.get(short) ?? 0) + value.length);
            if (!seen.has(value)) {
              seen.add(value);
              totals.held += value.length;
            }
          }
        }
      }
      return totals;
    };
    // As the controller generates: in layers (`generateConfiguration`: the outbound view's
    // layers checked and encoded once, the proxy's own resources for each), into snapshots.
    const layeredPass = async (context: GenerationContext): Promise<{ ms: number; held: number }> => {
      const seen = new WeakSet<object>();
      let [ms, held] = [0, 0];
      const hold = (x: object, bytes: number): void => {
        if (seen.has(x)) return;
        seen.add(x);
        held += bytes;
      };
      for (const proxy of proxies) {
        const cert = await certificates.getServiceCertificate(proxy.identity);
        const t0 = nowMs();
        const configuration = generateConfiguration(context, { ...proxy, verified: true } as Proxy, { certChainPem: cert.certPem, privateKeyPem: cert.keyPem, caPem: certificates.caPem }, layeredChecked);
        const built = buildProxySnapshot(configuration.encoded, layeredInterner, configuration.shared);
        ms += nowMs() - t0;
        for (const map of built.resources.values()) {
          hold(map, 64 + 48 * (sharedLayerOf(map) === map ? map.size : map.size - (sharedLayerOf(map)?.size ?? 0)));
          const layer = sharedLayerOf(map);
          if (layer && layer !== map) hold(layer, 64 + 48 * layer.size);
        }
      }
      return { ms, held };
    };
    const layeredChecked = new ResourceCheckCache();
    const layeredInterner = new ResourceInterner();
    const firstContext = new GenerationContext(mesh);
    const first = await pass(firstContext);
    const layeredFirst = await layeredPass(new GenerationContext(mesh));
    // Scenario (d) of the benchmark: a MeshConfig change that alters every cluster and listener.
    const edit = meshConfigChange(plan);
    await writeFile(path.join(dir, edit.file), edit.text);
    await source.rescan();
    const changed = builder.build(store, { meshName: MESH_NAME, generation: 3, previous: again }).snapshot;
    // The controller's context for the new snapshot: made with the one before (what is unchanged carries over).
    const second = await pass(new GenerationContext(changed, firstContext));
    certificates.stop();
    await source.stop();
    const per = (v: number): string => (v / count).toFixed(2);
    const line = (name: string, x: Totals): string =>
      `${name} per proxy (ms): service cert ${per(x.cert)}, generate ${per(x.generate)}, validate ${per(x.validate)}, encode ${per(x.encode)}, buildProxySnapshot ${per(x.snapshot)}`;
    process.stdout.write(
      [
        `S=${services} mode=${mode} proxies sampled=${count}`,
        `manifests load ${load.toFixed(0)} ms; buildMeshSnapshot ${build.toFixed(0)} ms (again: ${rebuild.toFixed(0)} ms)`,
        line('first connection', first),
        line('after a MeshConfig change', second),
        `per proxy: ${(first.resources / count).toFixed(0)} resources, ${(first.bytes / count / 1024).toFixed(1)} KB encoded (${[...first.byType].sort().map(([t, b]) => `${t} ${(b / count / 1024).toFixed(1)}`).join(', ')})`,
        `held by the ${count} snapshots: ${(first.held / 1024).toFixed(0)} KB of distinct encoded resources (${(first.held / count / 1024).toFixed(1)} KB per proxy)`,
        `as the controller (layers, generateConfiguration + buildProxySnapshot), first connection: ${(layeredFirst.ms / count).toFixed(2)} ms per proxy; resource maps' entries ≈ ${(layeredFirst.held / 1024).toFixed(0)} KB (48 B an entry), against ≈ ${((first.resources * 48) / 1024).toFixed(0)} KB for flat maps`,
        '',
      ].join('\n'),
    );
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? err.stack ?? err.message : String(err)}\n`);
  process.exit(1);
});
