/**
 * `trellis status`'s table for an object whose current generation was not accepted: the proxies'
 * count is of the last accepted version (the controller keeps it), and the row must say so
 * rather than show `ACCEPTED False` beside a bare `1/1`.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { statusTable } from '../src/cli/status-command.js';

describe('trellis status table', () => {
  it('marks the programmed count of a rejected generation as the last accepted version, and says so', () => {
    const table = statusTable([
      { kind: 'TrafficSplit', namespace: 'bookstore', name: 'bookstore-split', generation: 3, accepted: false, problems: ['TrafficSplit bookstore/bookstore-split: spec.backends[0].service: no such service'], affected: 1, programmed: 1, nacked: 0, firstNack: null },
      { kind: 'TrafficTarget', namespace: 'bookstore', name: 'bookstore', generation: 1, accepted: true, problems: [], affected: 1, programmed: 1, nacked: 0, firstNack: null },
    ]);
    const [, rejected, accepted] = table.split('\n');
    assert.match(rejected!, /^TrafficSplit +bookstore +bookstore-split +3 +False +1\/1 \(last accepted\) +0 +generation 3 not accepted, the proxies keep the last accepted version \(if any\): TrafficSplit bookstore\/bookstore-split: spec\.backends\[0\]\.service: no such service$/);
    assert.match(accepted!, /^TrafficTarget +bookstore +bookstore +1 +True +1\/1 +0$/);
  });
});
