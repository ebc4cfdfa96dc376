/**
 * The shapes of the benchmark's output files. `BenchResults` is the schema issue 5 fixes
 * (`bench/results/<date>.json`); `RunDetails` (`<date>.details.json`) holds everything else a
 * run measured, so the main file stays exactly that schema.
 */

/** One scenario's figures. */
export interface ScenarioResult {
  /** Per-proxy time from the file write to the ACK of the last response it got (ms), over the proxies that got something. */
  p50_ms: number | null;
  p99_ms: number | null;
  max_ms: number | null;
  /** Proxies that received at least one response. */
  proxies_updated: number;
  /** Controller CPU seconds from the write until settled. */
  cpu_s: number;
  /** Sum of the DiscoveryResponse message sizes the load generator received. */
  bytes_sent: number;
}

/** Names of the four change scenarios. */
export const SCENARIOS = ['endpoint_change', 'split_change', 'new_service', 'mesh_config_change'] as const;
/** One of {@link SCENARIOS}. */
export type ScenarioName = (typeof SCENARIOS)[number];

/** One configuration's figures (issue 5's schema). */
export interface RunResult {
  proxies: number;
  services: number;
  endpoints: number;
  reach: number;
  mode: 'smi' | 'permissive';
  transport: 'mtls' | 'plaintext';
  /** The ADS variant the simulated proxies speak (`--delta`); absent in SotW runs (and in results before 2026-12-01). */
  xds?: 'delta';
  /** Time from opening every stream at once until the last proxy ACKed its first full configuration (ms); null if not all did. */
  initial_sync_ms: number | null;
  /** Controller RSS once the manifests are loaded, before any proxy (MB). */
  rss_idle_mb: number;
  /** Controller peak RSS (VmHWM) over the run (MB). */
  rss_peak_mb: number;
  /**
   * The floor of the initial sync: an AdsServer doing nothing else, every snapshot already in
   * its cache; time from the N streams' connect (TLS handshakes included for mTLS) until all
   * have ACKed their full configuration (ms). The same work as the initial sync, without
   * generation. (Before 2026-11-30-session2 this was {@link RunDetails.floor_open_streams_ms}.)
   */
  floor_ms: number | null;
  scenarios: Record<ScenarioName, ScenarioResult>;
  /** Real Envoys run beside the N simulated proxies (`--envoys K`); absent in runs without. */
  envoys?: EnvoyRunResult;
}

/** Timings of the real Envoys for one scenario (ms from the file write, or from their start for the initial sync). */
export interface EnvoyTiming {
  /** Over the Envoys that showed the change: p50 and the last one (ms). */
  p50_ms: number | null;
  max_ms: number | null;
  /** Envoys that showed it / Envoys it affects. */
  updated: number;
  expected: number;
}

/**
 * The real Envoys' figures (`--envoys K`). An Envoy "shows" the initial configuration when its
 * server state is LIVE (`/ready` 200: its first CDS/EDS and LDS/RDS responses applied) and a
 * change when the `version_info` of one of its dynamic resources in `/config_dump` changed
 * (the time is that of the last such change seen for it).
 */
export interface EnvoyRunResult {
  /** K: real Envoys (one pod network and Envoy each, SotW, mTLS on the lab bridge). */
  count: number;
  /**
   * From spawning them all (with the N simulated streams' connect) until each is LIVE and its
   * versions stopped changing (later than LIVE for one whose initial fetch timed out).
   */
  initial_sync: EnvoyTiming;
  /** The same, from each Envoy's admin interface answering (its process up) instead of the spawn. */
  initial_sync_after_admin_up?: EnvoyTiming;
  scenarios: Partial<Record<ScenarioName, EnvoyTiming>>;
  /** Sum over the K Envoys of their `*.update_rejected` counters at the end of the run: NACKs. */
  update_rejected: number;
  /** Envoy RSS (VmRSS) after the last scenario, MB: median and largest. */
  rss_p50_mb: number | null;
  rss_max_mb: number | null;
}

/** `bench/results/<date>.json`. */
export interface BenchResults {
  runs: RunResult[];
}

/** Extra figures of one scenario. */
export interface ScenarioDetails {
  description: string;
  /** Proxies expected to receive something (from the generated reach graph). */
  expected_proxies: number;
  /** Settling hit the time limit. */
  timed_out: boolean;
  /** Responses received, by type. */
  responses_by_type: Record<string, number>;
  /** Delta of the controller's `trellis_xds_response_bytes_total` (resource bytes only). */
  controller_metric_bytes: number;
  generator_cpu_s: number;
}

/** Extra figures of one run. */
export interface RunDetails {
  key: string;
  started_at: string;
  duration_s: number;
  cert_issue_ms: number;
  /**
   * Controller start to `/readyz` 200 (ms): manifests loaded, and the mesh's certificates and,
   * within `--warm-up-config`, configurations prepared ahead.
   */
  ready_ms?: number;
  /** The controller's `--warm-up-config` (MiB) when the bench set it. */
  warm_up_config_mb?: number;
  initial_sync: {
    p50_ms: number | null;
    p99_ms: number | null;
    max_ms: number | null;
    synced: number;
    streams_ended: number;
    /**
     * Connections the simulated sidecars tried again after one failed before any response (a
     * jittered exponential backoff, as Envoy's; `CONNECT_RETRY` in lean-sidecar.ts), the proxies
     * that needed it and up to 5 of the failures. Absent before 2026-12-02 (no retry: such a
     * stream ended).
     */
    reconnects?: { total: number; proxies: number; errors: string[] };
    errors: string[];
    verify_mismatches: string[];
    cpu_s: number;
    bytes: number;
    controller_metric_bytes: number;
    generator_cpu_s: number;
  };
  rss_after_sync_mb: number;
  /** (RSS after initial sync − idle RSS) / N, in KB. */
  kb_per_proxy: number;
  /** Floor of the mesh-config change: every snapshot replaced by the changed one, time to the last ACK (ms). */
  floor_change_ms: number | null;
  /** The change floor measured `--mesh-wide-repeats` times, the first being {@link floor_change_ms}, toggling between the two MeshConfigs (ms). Absent before 2026-12-02-issue14-s11. */
  floor_change_repeats_ms?: number[];
  /** The controller's mesh-wide change made `--mesh-wide-repeats` times (max ms to the last ACK), the first being the scenario's, the MeshConfig toggled back and forth. Absent before 2026-12-02-issue14-s11, and with real Envoys. */
  mesh_wide_repeats_ms?: number[];
  /** Time for N streams already open to ACK their full configuration after a `setSnapshot` of all (ms). */
  floor_open_streams_ms?: number | null;
  /** The floor's connect-and-sync: connections retried, as {@link RunDetails.initial_sync}'s `reconnects`. */
  floor_reconnects?: { total: number; proxies: number; errors: string[] };
  floor_build_ms: number | null;
  scenarios: Partial<Record<ScenarioName, ScenarioDetails>>;
  /** Controller log lines at warn or above (the log level is warn), and how many were "large xDS response". */
  controller_warnings: number;
  large_responses: number;
  /** The controller ran under `--cpu-prof` (its RSS then includes the profiler's buffers, and its CPU a few % of sampling). */
  cpu_profiled?: boolean;
  /** Set when the run stopped early. */
  failure?: string;
  /** The real Envoys' details (`--envoys K`). */
  envoys?: EnvoyRunDetails;
  /** The waits a change goes through: the watcher's quiet period, the settle of a recently modified file (counted from its modification, from 2026-12-02-issue14-s9; absent before), the push debouncer's: part of every change's time (ms). */
  debounce_ms: { manifests: number; manifests_settle?: number; push_quiet: number; push_max: number };
}

/** More about the real Envoys of a run. */
export interface EnvoyRunDetails {
  /** Lab prefix and subnet the pods lived in. */
  lab: { prefix: string; subnet: string; bridge_address: string };
  /** Spawn to admin interface answering, over the K Envoys (ms). */
  admin_ready_p50_ms: number | null;
  admin_ready_max_ms: number | null;
  /** Envoys that did not start, and why (at most 5). */
  start_failures: string[];
  /**
   * Sum of `*.init_fetch_timeout`: initial fetches (CDS, LDS, …) an Envoy stopped waiting for
   * after 15 s (Envoy's default `initial_fetch_timeout`; it then goes LIVE without them).
   */
  init_fetch_timeout: number;
  /** Envoys whose versions changed after they went LIVE, during the initial sync. */
  initial_sync_late_changes?: number;
  /**
   * Envoys whose config dump matched the controller's `/debug/config_dump` at the end
   * (`compareWithController`, `init_fetch_timeout` left to its own count), and the first differences.
   */
  in_sync_at_end: number;
  differences: string[];
  /** Per scenario: Envoys the change does not affect whose versions changed anyway, and the polling resolution (mean round over the affected Envoys, ms). */
  scenarios: Partial<Record<ScenarioName, { unaffected_changed: number; poll_round_ms: number; changes_per_envoy_max: number; timed_out: boolean }>>;
  /** Envoy RSS after the initial sync (MB). */
  rss_after_sync_p50_mb: number | null;
  rss_after_sync_max_mb: number | null;
  /** Host memory available (MemAvailable) before the Envoys started and after the run's last scenario (MB). */
  mem_available_before_mb: number;
  mem_available_after_mb: number;
  /** Envoy proportional set size after the last scenario (Pss, MB; its shared pages divided among the Envoys): what each one adds. */
  pss_p50_mb: number | null;
}

/** `bench/results/<date>.details.json`. */
export interface BenchDetails {
  runs: RunDetails[];
}

/** The identity of a configuration, e.g. `N1000-S1000-E5-K10-smi-mtls` (`…-envoys50` with 50 real Envoys). */
export function runKey(r: Pick<RunResult, 'proxies' | 'services' | 'endpoints' | 'reach' | 'mode' | 'transport' | 'xds'> & { envoys?: { count: number } | number }): string {
  const envoys = typeof r.envoys === 'number' ? r.envoys : r.envoys?.count ?? 0;
  return `N${r.proxies}-S${r.services}-E${r.endpoints}-K${r.reach}-${r.mode}-${r.transport}${r.xds === 'delta' ? '-delta' : ''}${envoys > 0 ? `-envoys${envoys}` : ''}`;
}
