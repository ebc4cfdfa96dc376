/**
 * The real-Envoy part of a benchmark run (`npm run bench -- --envoys K`): which identities the
 * K Envoys run as, their initial sync, each change scenario as their config dumps show it, and
 * the end-of-run checks (NACKs, RSS, agreement with the controller). The runner (`run.ts`)
 * calls these around its own steps for the simulated proxies.
 */
import { readFileSync } from 'node:fs';
import { compareWithController, type ConfigDump } from '../src/lab/envoy.js';
import { EnvoyFleet, mapLimit, pollUntil, watchChange, type FleetEnvoy } from './envoy-fleet.js';
import { nowMs } from './lean-sidecar.js';
import type { BenchProxy, ScenarioEdit } from './mesh-generator.js';
import type { EnvoyRunDetails, EnvoyRunResult, EnvoyTiming, ScenarioName } from './results-schema.js';
import { percentile } from './stats.js';


const round1 = (v: number | null): number | null => (v === null ? null : Math.round(v * 10) / 10);

/**
 * The identities of the K real Envoys: first those the change scenarios affect (taken in turn
 * from each scenario's affected identities, so every scenario has Envoys to time), then every
 * planned proxy's identity in turn. Each gets its own UUID (`00000000-0000-4000-9000-<k>`,
 * where the simulated proxies' are `…-8000-…`). Pure.
 */
export function envoyProxies(proxies: readonly BenchProxy[], edits: readonly ScenarioEdit[], count: number): BenchProxy[] {
  const byIdentity = new Map<number, BenchProxy>();
  for (const p of proxies) if (!byIdentity.has(p.identity)) byIdentity.set(p.identity, p);
  const lists = edits.filter((e) => !e.affectsAll).map((e) => e.affectedIdentities.filter((i) => byIdentity.has(i)));
  const order: number[] = [];
  const seen = new Set<number>();
  for (let k = 0; lists.some((l) => k < l.length); k++) {
    for (const l of lists) {
      const i = l[k];
      if (i !== undefined && !seen.has(i)) {
        seen.add(i);
        order.push(i);
      }
    }
  }
  for (const p of proxies) {
    if (!seen.has(p.identity)) {
      seen.add(p.identity);
      order.push(p.identity);
    }
  }
  return Array.from({ length: count }, (_, k) => {
    const p = byIdentity.get(order[k % order.length])!;
    return { ...p, uuid: `00000000-0000-4000-9000-${k.toString(16).padStart(12, '0')}` };
  });
}

/** Whether an edit affects a proxy of this identity. */
function affects(edit: ScenarioEdit, identity: number): boolean {
  return edit.affectsAll || edit.affectedIdentities.includes(identity);
}

function timing(times: readonly (number | null)[], t0: number, expected: number): EnvoyTiming {
  const ms = times.filter((t): t is number => t !== null).map((t) => t - t0).sort((a, b) => a - b);
  return { p50_ms: round1(percentile(ms, 50)), max_ms: round1(ms.at(-1) ?? null), updated: ms.length, expected };
}

/** MemAvailable of the host (MB). */
export function memAvailableMb(): number {
  const kb = Number(/^MemAvailable:\s+(\d+) kB/m.exec(readFileSync('/proc/meminfo', 'utf8'))?.[1] ?? 0);
  return Math.round(kb / 1024);
}

function memStats(fleet: EnvoyFleet, read: (e: FleetEnvoy) => number | null): { p50: number | null; max: number | null } {
  const mb = fleet.running.map(read).filter((v): v is number => v !== null).sort((a, b) => a - b);
  return { p50: round1(percentile(mb, 50)), max: round1(mb.at(-1) ?? null) };
}

interface ProxyStatus {
  uuid: string;
  streams: { types: Record<string, { versionAcked: string | null; lastVersionSent: string | null; lastNack: unknown }> }[];
}

/** The real Envoys' measurements of one run, filled in step by step. */
export class EnvoyRun {
  readonly result: EnvoyRunResult;
  readonly details: EnvoyRunDetails;

  /** @param controllerHttp the controller's ops address (`http://127.0.0.1:<port>`), for `/debug/…`. */
  constructor(
    readonly fleet: EnvoyFleet,
    private readonly controllerHttp: string,
  ) {
    this.result = {
      count: fleet.envoys.length,
      initial_sync: { p50_ms: null, max_ms: null, updated: 0, expected: fleet.envoys.length },
      scenarios: {},
      update_rejected: 0,
      rss_p50_mb: null,
      rss_max_mb: null,
    };
    this.details = {
      lab: { prefix: fleet.lab.prefix, subnet: fleet.lab.subnet, bridge_address: fleet.lab.bridgeAddress },
      admin_ready_p50_ms: null,
      admin_ready_max_ms: null,
      start_failures: [],
      init_fetch_timeout: 0,
      in_sync_at_end: 0,
      differences: [],
      scenarios: {},
      rss_after_sync_p50_mb: null,
      rss_after_sync_max_mb: null,
      mem_available_before_mb: memAvailableMb(),
      mem_available_after_mb: 0,
      pss_p50_mb: null,
    };
  }

  /**
   * Spawns every Envoy at once (the caller does so as the simulated streams connect, at `t0`)
   * and waits until each is LIVE or `timeoutMs` passed; then watches their versions until none
   * changed for 2 s after `simulatedSynced` (an Envoy that went LIVE because an initial fetch
   * timed out gets the rest later). An Envoy's sync time is the later of LIVE and its last change.
   */
  async initialSync(t0: number, simulatedSynced: Promise<unknown>, timeoutMs: number): Promise<void> {
    const started = await this.fleet.start(nowMs);
    this.details.start_failures = started.flatMap((s) => ('error' in s ? [s.error] : [])).slice(0, 5);
    const ready = timing(started.map((s) => ('readyAt' in s ? s.readyAt : null)), t0, started.length);
    this.details.admin_ready_p50_ms = ready.p50_ms;
    this.details.admin_ready_max_ms = ready.max_ms;
    const running = this.fleet.running;
    const liveAt = await pollUntil(running, (e) => this.fleet.live(e), nowMs, t0, timeoutMs);
    let simulatedDone = false;
    void simulatedSynced.finally(() => { simulatedDone = true; });
    const watchStart = nowMs();
    const watch = await watchChange(this.fleet, running, await this.baseline(), nowMs, (last) => {
      const now = nowMs();
      return now - t0 >= timeoutMs || (simulatedDone && now - Math.max(last, watchStart) >= 2000);
    });
    const syncedAt = liveAt.map((t, i) => (t === null ? null : Math.max(t, watch.changedAt[i] ?? 0)));
    this.result.initial_sync = timing(syncedAt, t0, this.fleet.envoys.length);
    const readyAt = new Map(running.map((e) => [e, started[e.index]]));
    const fromStart = syncedAt.flatMap((t, i) => {
      const s = readyAt.get(running[i]);
      return t !== null && s && 'readyAt' in s ? [t - s.readyAt] : [];
    }).sort((a, b) => a - b);
    this.result.initial_sync_after_admin_up = { p50_ms: round1(percentile(fromStart, 50)), max_ms: round1(fromStart.at(-1) ?? null), updated: fromStart.length, expected: this.fleet.envoys.length };
    this.details.initial_sync_late_changes = watch.changes.filter((n) => n > 0).length;
    const rss = memStats(this.fleet, (e) => this.fleet.rssMb(e));
    this.details.rss_after_sync_p50_mb = rss.p50;
    this.details.rss_after_sync_max_mb = rss.max;
  }

  /** The versions of every running Envoy now (the baseline of a scenario), '' for one that does not answer. */
  async baseline(): Promise<string[]> {
    return mapLimit(this.fleet.running, 8, (e) => this.fleet.versions(e).catch(() => ''));
  }

  /**
   * Times one change scenario on the Envoys it affects: from `t0` (the file write) until each
   * one's versions last changed. Stops once every affected Envoy changed and none changed for
   * `quietMs`, after `simulatedSettled` resolved; or when nothing changed for 5 s more than that
   * (an Envoy that was expected to change did not), or after `timeoutMs`.
   */
  async scenario(
    name: ScenarioName,
    edit: ScenarioEdit,
    baseline: readonly string[],
    t0: number,
    simulatedSettled: Promise<unknown>,
    timeoutMs: number,
  ): Promise<void> {
    const running = this.fleet.running;
    const watched = running.map((e, i) => ({ e, i })).filter(({ e }) => affects(edit, e.proxy.identity));
    let settled = false;
    void simulatedSettled.finally(() => { settled = true; });
    const QUIET_MS = 1500;
    const QUIET_UNEXPECTED_MS = 5000;
    let timedOut = false;
    const watch = await watchChange(this.fleet, watched.map((w) => w.e), watched.map((w) => baseline[w.i]), nowMs, (last, all) => {
      const now = nowMs();
      if (now - t0 >= timeoutMs) {
        timedOut = true;
        return true;
      }
      const quiet = now - Math.max(last, t0);
      return settled && quiet >= QUIET_MS && (all || quiet >= QUIET_UNEXPECTED_MS);
    });
    await simulatedSettled;
    const unaffected = running.map((e, i) => ({ e, i })).filter(({ e }) => !affects(edit, e.proxy.identity));
    const after = await mapLimit(unaffected, 8, ({ e }) => this.fleet.versions(e).catch(() => ''));
    this.result.scenarios[name] = timing(watch.changedAt, t0, watched.length);
    this.details.scenarios[name] = {
      unaffected_changed: after.filter((v, k) => v !== baseline[unaffected[k].i]).length,
      poll_round_ms: round1(watch.roundMs)!,
      changes_per_envoy_max: Math.max(0, ...watch.changes),
      timed_out: timedOut,
    };
  }

  /** NACK and init-fetch-timeout counters, RSS, and each Envoy's dump against the controller's. */
  async finish(): Promise<void> {
    const running = this.fleet.running;
    const counters = await mapLimit(running, 8, (e) => this.fleet.counters(e).catch(() => ({ updateRejected: Number.NaN, initFetchTimeout: Number.NaN })));
    this.result.update_rejected = counters.reduce((s, c) => s + c.updateRejected, 0);
    this.details.init_fetch_timeout = counters.reduce((s, c) => s + c.initFetchTimeout, 0);
    const rss = memStats(this.fleet, (e) => this.fleet.rssMb(e));
    this.result.rss_p50_mb = rss.p50;
    this.result.rss_max_mb = rss.max;
    this.details.pss_p50_mb = memStats(this.fleet, (e) => this.fleet.pssMb(e)).p50;
    this.details.mem_available_after_mb = memAvailableMb();
    const proxies = (await (await fetch(`${this.controllerHttp}/debug/proxies`)).json()) as ProxyStatus[];
    const byUuid = new Map(proxies.map((p) => [p.uuid, p]));
    const differences: string[] = [];
    const inSync = await mapLimit(running, 4, async (e: FleetEnvoy) => {
      const diffs: string[] = [];
      const status = byUuid.get(e.proxy.uuid);
      if (!status || status.streams.length === 0) diffs.push('not connected');
      for (const stream of status?.streams ?? []) {
        for (const [type, st] of Object.entries(stream.types)) {
          if (st.lastNack) diffs.push(`${type}: NACK recorded by the controller`);
          if (st.versionAcked !== st.lastVersionSent) diffs.push(`${type}: sent ${st.lastVersionSent}, ACKed ${st.versionAcked}`);
        }
      }
      try {
        const trellis = (await (await fetch(`${this.controllerHttp}/debug/config_dump?proxy=${e.proxy.uuid}`)).json()) as ConfigDump;
        const [dump, stats] = await Promise.all([e.admin.configDump(), e.admin.stats()]);
        // init_fetch_timeout is counted on its own (details.init_fetch_timeout).
        diffs.push(...compareWithController(dump, trellis, { stats }).filter((d) => !d.includes('.init_fetch_timeout ')));
      } catch (error) {
        diffs.push(error instanceof Error ? error.message : String(error));
      }
      if (diffs.length > 0 && differences.length < 5) differences.push(`envoy ${e.index} (${e.proxy.namespace}/${e.proxy.serviceAccount}): ${diffs.slice(0, 3).join('; ')}`);
      return diffs.length === 0;
    });
    this.details.in_sync_at_end = inSync.filter(Boolean).length;
    this.details.differences = differences;
  }
}
