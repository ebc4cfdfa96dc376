/**
 * The benchmark report (`bench/report.ts`): the repeated mesh-wide change and change floor,
 * with their medians and the ratio of the medians.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { markdownReport } from '../bench/report.js';
import { median } from '../bench/stats.js';
import type { BenchDetails, BenchResults } from '../bench/results-schema.js';

const RESULTS = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'bench', 'results');

describe('bench report', () => {
  it('takes the middle value as the median (the lower middle one for an even count), none of nothing', () => {
    assert.equal(median([1060, 927, 1010]), 1010);
    assert.equal(median([4, 1, 3, 2]), 2);
    assert.equal(median([]), null);
  });

  it('lists each repeated mesh-wide change and change floor with the ratio of their medians', async () => {
    const results = JSON.parse(await readFile(path.join(RESULTS, '2026-12-02-issue14-s10-smi.json'), 'utf8')) as BenchResults;
    const details = JSON.parse(await readFile(path.join(RESULTS, '2026-12-02-issue14-s10-smi.details.json'), 'utf8')) as BenchDetails;
    const without = markdownReport('t', results, details);
    assert.doesNotMatch(without, /median ÷ median/, 'no table for runs measured once');
    details.runs[0].mesh_wide_repeats_ms = [1060, 900, 990];
    details.runs[0].floor_change_repeats_ms = [324, 400, 300];
    const report = markdownReport('t', results, details);
    assert.match(report, /\| N1000-S1000-E5-K10-smi-mtls \| 1060, 900, 990 \| 990 \| 324, 400, 300 \| 324 \| 3\.1 \|/);
  });
});
