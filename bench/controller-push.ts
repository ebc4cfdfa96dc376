/**
 * In-process cost of the controller's pushes for one synthetic mesh, without ADS streams: a
 * `MeshController` on the manifests source, N proxies opened through `onStreamOpen` (as the
 * ADS server opens them), then the benchmark's four change scenarios. Per phase: controller CPU
 * (user + system), time spent in garbage collection (V8 `gc` performance entries), heap held
 * after a forced collection, RSS, snapshots set, and the resource types generated (by type, from
 * `trellis_configuration_types_generated_total`: a count that does not depend on the machine's load). No gRPC: what it measures is the
 * controller's own work (generation, validation, encoding, snapshots), which `npm run bench`
 * sees mixed with the streams' sending.
 *
 * ```
 * node --expose-gc --import tsx bench/controller-push.ts --services 1000 --proxies 1000 --mode permissive [--warm-up-config MIB]
 * ```
 * `--profile-dir DIR` writes a CPU profile of each phase, `DIR/<phase>.cpuprofile` (read them with
 * `bench/cpu-profile-summary.ts`); `--heap-snapshot FILE` writes a heap snapshot after the initial sync.
 */
import 'reflect-metadata';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Session } from 'node:inspector/promises';
import { PerformanceObserver } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { writeHeapSnapshot } from 'node:v8';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { CertificateAuthority } from '../src/certificate/authority.js';
import { CertificateManager } from '../src/certificate/manager.js';
import { MeshController } from '../src/controller/mesh-controller.js';
import { parseCommonName, proxyCommonName } from '../src/proxy/types.js';
import { ManifestsSource } from '../src/sources/manifests/manifests-source.js';
import { ObjectStore } from '../src/store/object-store.js';
import { SnapshotCache } from '../src/xds/cache/snapshot-cache.js';
import { nowMs } from './lean-sidecar.js';
import { MESH_NAME, endpointChange, meshConfigChange, newService, planMesh, planProxies, splitChange, writeMesh, type MeshMode, type ScenarioEdit } from './mesh-generator.js';

/** What one phase cost. */
interface Phase {
  readonly name: string;
  readonly wallMs: number;
  readonly cpuMs: number;
  readonly gcMs: number;
  readonly snapshotsSet: number;
  /** Heap used after a forced collection, MB (NaN without `--expose-gc`). */
  readonly heapMb: number;
  /** Memory of Buffers and other objects outside the V8 heap after that collection, MB. */
  readonly externalMb: number;
  readonly rssMb: number;
  /** Resource types generated, by type (`trellis_configuration_types_generated_total`), e.g. `CDS 1000`. */
  readonly types: string;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      services: { type: 'string' },
      proxies: { type: 'string' },
      endpoints: { type: 'string' },
      reach: { type: 'string' },
      mode: { type: 'string' },
      'warm-up-config': { type: 'string' },
      'profile-dir': { type: 'string' },
      'heap-snapshot': { type: 'string' },
    },
  });
  const services = Number(values.services ?? '1000');
  const count = Number(values.proxies ?? '1000');
  const mode = (values.mode ?? 'permissive') as MeshMode;
  const plan = planMesh({ services, endpoints: Number(values.endpoints ?? '5'), reach: Number(values.reach ?? '10'), mode });
  const work = await mkdtemp(path.join(os.tmpdir(), 'trellis-controller-push-'));
  let gcMs = 0;
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) gcMs += entry.duration;
  });
  observer.observe({ entryTypes: ['gc'] });
  const gc = (globalThis as { gc?: () => void }).gc;
  try {
    const dir = path.join(work, 'manifests');
    await writeMesh(dir, plan);
    const logger = pino({ level: 'silent' });
    const store = new ObjectStore({ logger });
    const source = new ManifestsSource({ dir, store, logger, watch: false });
    await source.start();
    const ca = await CertificateAuthority.loadOrCreate(path.join(work, 'state'));
    const certificates = new CertificateManager({ ca });
    const cache = new SnapshotCache();
    let snapshotsSet = 0;
    const set = cache.setSnapshot.bind(cache);
    cache.setSnapshot = (uuid, snapshot) => {
      snapshotsSet++;
      set(uuid, snapshot);
    };
    const metrics = new Registry();
    const typesGenerated = async (): Promise<Map<string, number>> => {
      const metric = (await metrics.getMetricsAsJSON()).find((m) => m.name === 'trellis_configuration_types_generated_total');
      return new Map((metric?.values ?? []).map((v) => [String(v.labels.type), v.value]));
    };
    const controller = new MeshController({ store, certificates, cache, logger, metrics, meshName: MESH_NAME, debounceQuietMs: 1, debounceMaxDelayMs: 5, resyncIntervalMs: 0 });
    controller.start();
    const phases: Phase[] = [];
    // GC entries reach the observer asynchronously: let them arrive before reading the sum.
    const settled = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 50));
    const profileDir = values['profile-dir'];
    const session = profileDir === undefined ? undefined : new Session();
    session?.connect();
    await session?.post('Profiler.enable');
    const measure = async (name: string, run: () => Promise<void>): Promise<void> => {
      gc?.();
      await settled();
      await session?.post('Profiler.start');
      const types0 = await typesGenerated();
      const [gc0, set0, t0, cpu0] = [gcMs, snapshotsSet, nowMs(), process.cpuUsage()];
      await run();
      const cpu = process.cpuUsage(cpu0);
      if (session && profileDir !== undefined) {
        const { profile } = await session.post('Profiler.stop');
        await writeFile(path.join(profileDir, `${name.replaceAll(' ', '-')}.cpuprofile`), JSON.stringify(profile));
      }
      const [wallMs, sets] = [nowMs() - t0, snapshotsSet - set0];
      const types = [...(await typesGenerated())].map(([type, n]) => [type, n - (types0.get(type) ?? 0)] as const).filter(([, n]) => n > 0).map(([type, n]) => `${type} ${n}`).join(', ');
      await settled();
      const spentGc = gcMs - gc0;
      const rssMb = process.memoryUsage().rss / 2 ** 20;
      gc?.();
      const memory = process.memoryUsage();
      const heapMb = gc ? memory.heapUsed / 2 ** 20 : Number.NaN;
      const externalMb = gc ? memory.external / 2 ** 20 : Number.NaN;
      phases.push({ name, wallMs, cpuMs: (cpu.user + cpu.system) / 1000, gcMs: spentGc, snapshotsSet: sets, heapMb, externalMb, rssMb, types: types || '—' });
    };
    const warmUpMib = values['warm-up-config'];
    await measure('warm-up', async () => {
      await controller.warmUp(warmUpMib === undefined ? {} : { configurationBytes: Number(warmUpMib) * 2 ** 20 });
    });
    const proxies = planProxies(plan, count).map((p) => ({ ...parseCommonName(proxyCommonName(p.uuid, 'sidecar', p.namespace, p.serviceAccount)), verified: true }));
    await measure('initial sync', async () => {
      let id = 0;
      for (const proxy of proxies) await controller.onStreamOpen(proxy, ++id);
    });
    if (values['heap-snapshot'] !== undefined) writeHeapSnapshot(values['heap-snapshot']);
    const planned = planProxies(plan, count);
    const connected = [...new Set(planned.map((p) => p.identity))];
    const split = plan.splits.findIndex((s) => plan.sourcesOf[s.apex].some((i) => connected.includes(i)));
    const edits: [string, ScenarioEdit][] = [
      ['endpoint change', endpointChange(plan, plan.reachOf[planned[0]!.identity]![0] ?? 0)],
      ['split change', splitChange(plan, Math.max(0, split))],
      ['new service', newService(plan, connected.slice(0, plan.options.reach))],
      ['mesh-wide change', meshConfigChange(plan)],
    ];
    for (const [name, edit] of edits) {
      await measure(name, async () => {
        await writeFile(path.join(dir, edit.file), edit.text);
        await source.rescan();
        await controller.flush();
        await controller.flush();
      });
    }
    controller.stop();
    certificates.stop();
    await source.stop();
    const f = (v: number, d = 0): string => (Number.isNaN(v) ? '—' : v.toFixed(d));
    const rows = phases.map((p) => `| ${p.name} | ${f(p.wallMs)} | ${f(p.cpuMs)} | ${f(p.gcMs)} | ${f((100 * p.gcMs) / Math.max(1, p.wallMs))} | ${p.snapshotsSet} | ${f(p.heapMb)} | ${f(p.externalMb)} | ${f(p.rssMb)} | ${p.types} |`);
    process.stdout.write(
      [
        `S=${services} N=${count} mode=${mode} (in process, no ADS streams; node ${process.version})`,
        '| phase | wall ms | CPU ms | GC ms | GC % of wall | snapshots set | heap after GC MB | external MB | RSS MB | types generated |',
        '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |',
        ...rows,
        '',
      ].join('\n'),
    );
  } finally {
    observer.disconnect();
    await rm(work, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
