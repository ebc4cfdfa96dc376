/**
 * Summarizes a V8 `.cpuprofile` (from `node --cpu-prof`): self time aggregated by function and
 * source location, highest first.
 *
 * ```
 * node --import tsx bench/cpu-profile-summary.ts FILE.cpuprofile [--top 15]
 * ```
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
}
/** The parts of a `.cpuprofile` this reads. */
export interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples?: number[];
  timeDeltas?: number[];
}

/** One aggregated entry: a function at a source location. */
export interface ProfileEntry {
  function: string;
  location: string;
  selfMs: number;
  percent: number;
}

/** The whole summary. */
export interface ProfileSummary {
  totalMs: number;
  entries: ProfileEntry[];
  /** Self time by file (or `(program)`, `(garbage collector)`, …). */
  byFile: { file: string; selfMs: number; percent: number }[];
}

function shortUrl(url: string): string {
  if (!url) return '';
  const p = url.startsWith('file://') ? fileURLToPath(url) : url;
  const i = p.lastIndexOf('node_modules/');
  if (i >= 0) return p.slice(i);
  const src = p.search(/\/(src|bench|test|bin)\//);
  return src >= 0 ? p.slice(src + 1) : path.basename(p);
}

/**
 * Aggregates self time: each sample's time delta goes to the node sampled, then nodes are
 * grouped by function name and location (URL and line).
 */
export function summarizeProfile(profile: CpuProfile): ProfileSummary {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const selfUs = new Map<number, number>();
  const samples = profile.samples ?? [];
  const deltas = profile.timeDeltas ?? [];
  for (let i = 0; i < samples.length; i++) {
    // timeDeltas[i] is the time since the previous sample: attribute it to sample i.
    selfUs.set(samples[i], (selfUs.get(samples[i]) ?? 0) + Math.max(0, deltas[i] ?? 0));
  }
  let total = 0;
  const entries = new Map<string, ProfileEntry>();
  const files = new Map<string, number>();
  for (const [id, us] of selfUs) {
    const node = byId.get(id);
    if (!node) continue;
    total += us;
    const f = node.callFrame;
    const file = shortUrl(f.url);
    const location = file ? `${file}:${f.lineNumber + 1}` : '';
    const name = f.functionName || '(anonymous)';
    const key = `${name}\0${location}`;
    const e = entries.get(key) ?? { function: name, location, selfMs: 0, percent: 0 };
    e.selfMs += us / 1000;
    entries.set(key, e);
    const fileKey = file || name;
    files.set(fileKey, (files.get(fileKey) ?? 0) + us / 1000);
  }
  const totalMs = total / 1000;
  const list = [...entries.values()].sort((a, b) => b.selfMs - a.selfMs);
  for (const e of list) e.percent = totalMs > 0 ? (100 * e.selfMs) / totalMs : 0;
  const byFile = [...files.entries()]
    .map(([file, selfMs]) => ({ file, selfMs, percent: totalMs > 0 ? (100 * selfMs) / totalMs : 0 }))
    .sort((a, b) => b.selfMs - a.selfMs);
  return { totalMs, entries: list, byFile };
}

/** A Markdown table of the top `top` entries, and of the top files. */
export function formatProfileSummary(summary: ProfileSummary, top = 15): string {
  const lines = [
    `Total sampled: ${(summary.totalMs / 1000).toFixed(2)} s`,
    '',
    '| # | self ms | % | function | location |',
    '| ---: | ---: | ---: | --- | --- |',
    ...summary.entries.slice(0, top).map((e, i) => `| ${i + 1} | ${e.selfMs.toFixed(0)} | ${e.percent.toFixed(1)} | \`${e.function}\` | ${e.location} |`),
    '',
    '| self ms | % | file |',
    '| ---: | ---: | --- |',
    ...summary.byFile.slice(0, top).map((f) => `| ${f.selfMs.toFixed(0)} | ${f.percent.toFixed(1)} | ${f.file} |`),
  ];
  return lines.join('\n');
}

async function cli(): Promise<void> {
  const args = process.argv.slice(2);
  const file = args.find((a) => !a.startsWith('--'));
  const topIndex = args.indexOf('--top');
  const top = topIndex >= 0 ? Number(args[topIndex + 1]) : 15;
  if (!file) {
    process.stderr.write('usage: node --import tsx bench/cpu-profile-summary.ts FILE.cpuprofile [--top N]\n');
    process.exit(2);
  }
  const profile = JSON.parse(await readFile(file, 'utf8')) as CpuProfile;
  process.stdout.write(`${formatProfileSummary(summarizeProfile(profile), top)}\n`);
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  cli().catch((err: unknown) => {
    process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  });
}
