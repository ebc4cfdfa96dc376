/**
 * The human-readable outputs of the benchmark: a Markdown table (`<stem>.md`) and a chart of
 * convergence and memory against N (`<stem>.svg`, written by hand: no dependency).
 */
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { median } from './stats.js';
import { runKey, SCENARIOS, type BenchDetails, type BenchResults, type EnvoyTiming, type RunDetails, type RunResult } from './results-schema.js';

const fmt = (v: number | null | undefined, digits = 0): string => (v === null || v === undefined || Number.isNaN(v) ? '—' : v.toFixed(digits));
const ratio = (a: number | null | undefined, b: number | null | undefined): string => (a && b ? (a / b).toFixed(1) : '—');

function sortRuns(runs: readonly RunResult[]): RunResult[] {
  return [...runs].sort(
    (a, b) => a.mode.localeCompare(b.mode) || a.services - b.services || a.transport.localeCompare(b.transport) || a.proxies - b.proxies,
  );
}

/** The Markdown report. `previous`: an earlier results file whose matching runs are shown beside. */
export function markdownReport(title: string, results: BenchResults, details: BenchDetails, previous?: BenchResults): string {
  const det = new Map<string, RunDetails>(details.runs.map((d) => [d.key, d]));
  const prev = new Map<string, RunResult>((previous?.runs ?? []).map((r) => [runKey(r), r]));
  const runs = sortRuns(results.runs);
  const out: string[] = [
    `# Trellis benchmark: ${title}`,
    '',
    'Controller (`node bin/trellis.js controller`, resync off, log level warn) and load generator in separate processes on 127.0.0.1, 2 cores.',
    'Every change time runs from the file write to the ACK of the last response a proxy received for it, and includes the manifests',
    'source\'s settle (a file is taken once unchanged for 200 ms since its modification, the watcher\'s 50 ms quiet period within it;',
    'until 2026-12-02-issue14-s9 200 ms after the watcher\'s 50 ms): about 200 ms of waiting. Until 2026-12-02-issue14-s10 the push debounce',
    'added 100 ms (its quiet period; a manifests rescan is now pushed at once).',
    'The floor is an `AdsServer` over a pre-filled `SnapshotCache`',
    '(snapshots built with the controller\'s own code from the same manifests) doing nothing else; "floor" = time from the N streams\' connect',
    '(TLS included for mTLS) until all ACKed their full configuration, the initial sync without generation (runs before 2026-11-30-session2:',
    'streams already open, now "open-streams floor"; from 2026-11-30-session4 by a fresh load generator, as the controller\'s initial sync',
    'is, where it used to be the generator that had already run everything else, JIT-warm); "change floor" = streams open, a',
    '`setSnapshot` of the mesh-config-changed snapshots.',
    '"ready ms" = controller start to `/readyz`: manifests loaded, and each identity\'s certificate issued and (from 2026-11-30-session3,',
    'within `--warm-up-config`, default 64 MiB) its configuration generated ahead; the initial sync then serves what is prepared. With',
    '`--warm-up-config 0` the initial sync generates every configuration on first connection (runs before session 3 did).',
    '',
    'Legend: N proxies (`--proxies`), S services (`--services`, one identity each), E endpoints per service (`--endpoints`), K',
    'destinations each identity may reach (`--reach`). "prev" columns: the same configuration in the `--previous` results file (by',
    'default the newest other dated file beside this one). "—": not measured (e.g. every floor column with `--no-floor`).',
    '',
    '## Runs',
    '',
    '| N | S | E | K | mode | transport | ready ms | initial sync ms (p50 / max) | floor ms | sync ÷ floor | RSS idle MB | RSS peak MB | RSS after sync MB | KB / proxy | sync CPU s | sync bytes | prev sync ms |',
    '| ---: | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  ];
  for (const r of runs) {
    const d = det.get(runKey(r));
    const p = prev.get(runKey(r));
    const sync = r.initial_sync_ms ?? d?.initial_sync.max_ms ?? null;
    const syncText = r.initial_sync_ms === null && d ? `${fmt(d.initial_sync.p50_ms)} / ${fmt(sync)} (${d.initial_sync.synced}/${r.proxies} synced)` : `${fmt(d?.initial_sync.p50_ms)} / ${fmt(sync)}`;
    const mark = d?.cpu_profiled ? ' †' : '';
    out.push(
      `| ${r.proxies} | ${r.services} | ${r.endpoints} | ${r.reach} | ${r.mode} | ${r.transport}${r.xds === 'delta' ? ' delta' : ''}${r.envoys ? ` + ${r.envoys.count} Envoys` : ''}${mark} | ${fmt(d?.ready_ms)}${d?.warm_up_config_mb !== undefined ? ` (warm-up ${d.warm_up_config_mb} MiB)` : ''} | ${syncText} | ${fmt(r.floor_ms)} | ${ratio(r.initial_sync_ms, r.floor_ms)} | ${fmt(r.rss_idle_mb, 1)} | ${fmt(r.rss_peak_mb, 1)} | ${fmt(d?.rss_after_sync_mb, 1)} | ${fmt(d?.kb_per_proxy)} | ${fmt(d?.initial_sync.cpu_s, 2)} | ${fmt(d?.initial_sync.bytes)} | ${fmt(p?.initial_sync_ms)} |`,
    );
  }
  if (runs.some((r) => det.get(runKey(r))?.cpu_profiled)) {
    out.push('', '† controller run under `node --cpu-prof`: its RSS may include the profiler\'s sample buffers, its CPU a few % of sampling. Idle RSS (sampled 2 s after /readyz, no forced GC) varies by ±100 MB between runs of the same mesh, so KB / proxy is indicative only.');
  }
  out.push(
    '',
    '## Scenarios',
    '',
    '| run | scenario | p50 ms | p99 ms | max ms | proxies updated / expected | CPU s | bytes | ÷ change floor | prev p99 / max ms |',
    '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  );
  for (const r of runs) {
    const d = det.get(runKey(r));
    const p = prev.get(runKey(r));
    for (const name of SCENARIOS) {
      const s = r.scenarios[name];
      const sd = d?.scenarios[name];
      const floorRatio = name === 'mesh_config_change' ? ratio(s.max_ms, d?.floor_change_ms) : '';
      out.push(
        `| ${runKey(r)} | ${name}${sd?.timed_out ? ' (timed out)' : ''} | ${fmt(s.p50_ms)} | ${fmt(s.p99_ms)} | ${fmt(s.max_ms)} | ${s.proxies_updated} / ${sd?.expected_proxies ?? '—'} | ${fmt(s.cpu_s, 2)} | ${s.bytes_sent} | ${floorRatio} | ${p ? `${fmt(p.scenarios[name].p99_ms)} / ${fmt(p.scenarios[name].max_ms)}` : '—'} |`,
      );
    }
  }
  const repeated = runs.filter((r) => (det.get(runKey(r))?.mesh_wide_repeats_ms?.length ?? 0) > 1);
  if (repeated.length > 0) {
    out.push(
      '',
      'The mesh-wide change made again, the MeshConfig toggled back and forth, and the change floor as often (one change floor varies by up to 2× between runs):',
      '',
      '| run | mesh-wide change max ms, each | median | change floor ms, each | median | median ÷ median |',
      '| --- | --- | ---: | --- | ---: | ---: |',
    );
    for (const r of repeated) {
      const d = det.get(runKey(r))!;
      const own = d.mesh_wide_repeats_ms!;
      const floors = d.floor_change_repeats_ms ?? [];
      out.push(`| ${runKey(r)} | ${own.join(', ')} | ${fmt(median(own))} | ${floors.join(', ') || '—'} | ${fmt(median(floors))} | ${ratio(median(own), median(floors))} |`);
    }
  }
  out.push(...envoySection(runs, det));
  const notes = runs
    .map((r) => ({ r, d: det.get(runKey(r)) }))
    .filter(({ d }) => d && (d.failure || d.initial_sync.streams_ended > 0 || (d.initial_sync.reconnects?.total ?? 0) > 0 || (d.floor_reconnects?.total ?? 0) > 0 || d.large_responses > 0 || d.initial_sync.verify_mismatches.length > 0));
  out.push('', '## Other floors', '', '| run | open-streams floor ms | change floor ms | floor build ms |', '| --- | ---: | ---: | ---: |');
  for (const r of runs) {
    const d = det.get(runKey(r));
    out.push(`| ${runKey(r)} | ${fmt(d?.floor_open_streams_ms)} | ${fmt(d?.floor_change_ms)} | ${fmt(d?.floor_build_ms)} |`);
  }
  if (notes.length > 0) {
    out.push('', '## Findings', '');
    for (const { r, d } of notes) {
      const parts: string[] = [];
      if (d!.failure) parts.push(`failed: ${d!.failure}`);
      if (d!.initial_sync.streams_ended > 0) parts.push(`${d!.initial_sync.streams_ended} streams ended: ${d!.initial_sync.errors.join('; ')}`);
      const retried = (what: string, r: { total: number; proxies: number; errors: string[] } | undefined): void => {
        if (r && r.total > 0) parts.push(`${what}: ${r.total} connections retried by ${r.proxies} proxies (${r.errors.join('; ')})`);
      };
      retried('initial sync', d!.initial_sync.reconnects);
      retried('floor connect-and-sync', d!.floor_reconnects);
      if (d!.large_responses > 0) parts.push(`${d!.large_responses} "large xDS response" warnings`);
      if (d!.initial_sync.verify_mismatches.length > 0) parts.push(`lean decoding mismatch: ${d!.initial_sync.verify_mismatches[0]}`);
      out.push(`- ${runKey(r)}: ${parts.join('; ')}`);
    }
  }
  out.push('', 'Scenario edits:', '');
  const seen = new Set<string>();
  for (const d of details.runs) {
    for (const name of SCENARIOS) {
      const text = d.scenarios[name]?.description;
      if (text && !seen.has(`${name}${text}`) && seen.size < 8) {
        seen.add(`${name}${text}`);
        out.push(`- ${name} (${d.key}): ${text}`);
      }
    }
  }
  return `${out.join('\n')}\n`;
}

const timingText = (t: EnvoyTiming | undefined): string => (t ? `${fmt(t.p50_ms)} / ${fmt(t.max_ms)} (${t.updated}/${t.expected})` : '—');

/** The "Real Envoys" section (runs with `--envoys K`); empty when no run had any. */
function envoySection(runs: readonly RunResult[], det: ReadonlyMap<string, RunDetails>): string[] {
  const withEnvoys = runs.filter((r) => r.envoys);
  if (withEnvoys.length === 0) return [];
  const out = [
    '',
    '## Real Envoys',
    '',
    'Envoy 1.40 sidecars (one lab network namespace each, uid 1500, SotW, mTLS ADS to the controller on the lab bridge address) beside the',
    'N simulated proxies, each with its own UUID and one of the planned identities (first those the scenarios affect). Initial sync: from',
    'spawning them (as the simulated streams connect) until `/ready` is LIVE (first CDS/EDS and LDS/RDS applied) and their versions (below)',
    'stopped changing; "after admin up": the same from each Envoy\'s admin interface answering (its own start-up left out). A change: from the file',
    'write until the last change of the Envoy\'s resource versions as its `/config_dump` shows them (`?resource=…&mask=version_info` per',
    'resource list; endpoints hashed, their `version_info` is empty in Envoy\'s dump), polled in rounds (resolution: the round time).',
    'Cells: p50 / max ms (Envoys that showed it / Envoys it affects). NACKs: sum of their `*.update_rejected` at the end.',
    '',
    '| run | Envoys | admin up p50 / max ms | initial sync | after admin up | endpoint_change | split_change | new_service | mesh_config_change | NACKs | RSS p50 / max MB | Pss p50 MB | in sync at end | poll round ms (max) |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  ];
  for (const r of withEnvoys) {
    const e = r.envoys!;
    const d = det.get(runKey(r))?.envoys;
    const rounds = Object.values(d?.scenarios ?? {}).map((s) => s.poll_round_ms);
    out.push(
      `| ${runKey(r)} | ${e.count} | ${fmt(d?.admin_ready_p50_ms)} / ${fmt(d?.admin_ready_max_ms)} | ${timingText(e.initial_sync)} | ${timingText(e.initial_sync_after_admin_up)} | ${SCENARIOS.map((n) => timingText(e.scenarios[n])).join(' | ')} | ${e.update_rejected} | ${fmt(e.rss_p50_mb, 1)} / ${fmt(e.rss_max_mb, 1)} | ${fmt(d?.pss_p50_mb, 1)} | ${d ? `${d.in_sync_at_end}/${e.count}` : '—'} | ${rounds.length > 0 ? fmt(Math.max(...rounds)) : '—'} |`,
    );
  }
  for (const r of withEnvoys) {
    const d = det.get(runKey(r))?.envoys;
    if (!d) continue;
    const issues = [
      ...d.start_failures.map((f) => `did not start: ${f.split('\n')[0]}`),
      ...(d.init_fetch_timeout > 0 ? [`${d.init_fetch_timeout} init_fetch_timeout (initial fetches Envoy stopped waiting for after 15 s)`] : []),
      ...d.differences,
      ...SCENARIOS.flatMap((n) => (d.scenarios[n]?.unaffected_changed ? [`${n}: ${d.scenarios[n]!.unaffected_changed} Envoys it does not affect changed`] : [])),
      ...SCENARIOS.flatMap((n) => (d.scenarios[n]?.timed_out ? [`${n}: timed out`] : [])),
    ];
    if (issues.length > 0) out.push('', `- ${runKey(r)}: ${issues.join('; ')}`);
  }
  return out;
}

const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#8c564b', '#e377c2', '#17becf'];

function niceMax(v: number): number {
  if (v <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

const esc = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;');

interface Series {
  label: string;
  color: string;
  dashed: boolean;
  points: [number, number][];
}

function panel(x0: number, y0: number, w: number, h: number, title: string, yLabel: string, ns: number[], series: Series[]): string {
  const maxY = niceMax(Math.max(1, ...series.flatMap((s) => s.points.map((p) => p[1]))));
  const xOf = (n: number): number => x0 + (ns.length === 1 ? w / 2 : (ns.indexOf(n) * w) / (ns.length - 1));
  const yOf = (v: number): number => y0 + h - (v / maxY) * h;
  const parts: string[] = [
    `<text x="${x0 + w / 2}" y="${y0 - 12}" text-anchor="middle" font-weight="bold">${esc(title)}</text>`,
    `<line x1="${x0}" y1="${y0 + h}" x2="${x0 + w}" y2="${y0 + h}" stroke="#333"/>`,
    `<line x1="${x0}" y1="${y0}" x2="${x0}" y2="${y0 + h}" stroke="#333"/>`,
    `<text x="${x0 - 48}" y="${y0 + h / 2}" transform="rotate(-90 ${x0 - 48} ${y0 + h / 2})" text-anchor="middle">${esc(yLabel)}</text>`,
    `<text x="${x0 + w / 2}" y="${y0 + h + 34}" text-anchor="middle">proxies (N)</text>`,
  ];
  for (let i = 0; i <= 4; i++) {
    const v = (maxY * i) / 4;
    parts.push(`<line x1="${x0}" y1="${yOf(v)}" x2="${x0 + w}" y2="${yOf(v)}" stroke="#ddd"/>`);
    parts.push(`<text x="${x0 - 6}" y="${yOf(v) + 4}" text-anchor="end">${v >= 100 ? v.toFixed(0) : v.toFixed(1)}</text>`);
  }
  for (const n of ns) parts.push(`<text x="${xOf(n)}" y="${y0 + h + 16}" text-anchor="middle">${n}</text>`);
  for (const s of series) {
    const pts = s.points.filter((p) => ns.includes(p[0])).sort((a, b) => a[0] - b[0]);
    if (pts.length === 0) continue;
    parts.push(
      `<polyline fill="none" stroke="${s.color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="6 4"' : ''} points="${pts.map((p) => `${xOf(p[0]).toFixed(1)},${yOf(p[1]).toFixed(1)}`).join(' ')}"/>`,
    );
    for (const p of pts) parts.push(`<circle cx="${xOf(p[0]).toFixed(1)}" cy="${yOf(p[1]).toFixed(1)}" r="3" fill="${s.color}"/>`);
  }
  return parts.join('\n');
}

/** The SVG chart: convergence (initial sync, mesh-config change max) and controller memory (peak, idle) against N. */
export function svgChart(title: string, results: BenchResults): string {
  const runs = sortRuns(results.runs);
  const ns = [...new Set(runs.map((r) => r.proxies))].sort((a, b) => a - b);
  const group = (r: RunResult): string => `S=${r.services} ${r.mode} ${r.transport}${r.xds === 'delta' ? ' delta' : ''}`;
  const groups = [...new Set(runs.map(group))];
  const of = (g: string): RunResult[] => runs.filter((r) => group(r) === g);
  const conv: Series[] = [];
  const mem: Series[] = [];
  groups.forEach((g, i) => {
    const color = COLORS[i % COLORS.length];
    const rs = of(g);
    conv.push({ label: `${g}: initial sync`, color, dashed: false, points: rs.filter((r) => r.initial_sync_ms !== null).map((r) => [r.proxies, r.initial_sync_ms!]) });
    conv.push({
      label: `${g}: mesh-config change (max)`,
      color,
      dashed: true,
      points: rs.filter((r) => r.scenarios.mesh_config_change.max_ms !== null).map((r) => [r.proxies, r.scenarios.mesh_config_change.max_ms!]),
    });
    mem.push({ label: `${g}: peak RSS`, color, dashed: false, points: rs.map((r) => [r.proxies, r.rss_peak_mb]) });
    mem.push({ label: `${g}: idle RSS`, color, dashed: true, points: rs.map((r) => [r.proxies, r.rss_idle_mb]) });
  });
  const width = 980;
  const legendRows = groups.length;
  const height = 420 + legendRows * 18;
  const legend = groups
    .map((g, i) => {
      const y = 410 + i * 18;
      const color = COLORS[i % COLORS.length];
      return `<line x1="80" y1="${y - 4}" x2="110" y2="${y - 4}" stroke="${color}" stroke-width="2"/><line x1="116" y1="${y - 4}" x2="146" y2="${y - 4}" stroke="${color}" stroke-width="2" stroke-dasharray="6 4"/><text x="154" y="${y}">${esc(g)} (solid: initial sync / peak RSS; dashed: mesh-config change max / idle RSS)</text>`;
    })
    .join('\n');
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${width / 2}" y="20" text-anchor="middle" font-size="15" font-weight="bold">${esc(title)}</text>`,
    panel(80, 60, 380, 280, 'Convergence', 'ms', ns, conv),
    panel(570, 60, 380, 280, 'Controller memory', 'MB', ns, mem),
    legend,
    '</svg>',
    '',
  ].join('\n');
}

/** Writes `<stem>.md` and `<stem>.svg`. */
export async function writeReports(stem: string, results: BenchResults, details: BenchDetails, previous?: BenchResults): Promise<void> {
  const title = `Trellis benchmark ${path.basename(stem)}`;
  await writeFile(`${stem}.md`, markdownReport(path.basename(stem), results, details, previous));
  await writeFile(`${stem}.svg`, svgChart(title, results));
}
