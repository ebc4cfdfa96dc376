import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LAB_SUITE_PORTS } from './helpers/lab-ports.js';

/** The controllers' default ports (ADS mTLS, ADS plaintext, operations, the lab's operations). */
const DEFAULTS = [15128, 15129, 9090, 9091, 9191];

describe('the lab suites\' ports', () => {
  it('are all different, and none is a controller default', () => {
    const ports = Object.values(LAB_SUITE_PORTS).flatMap((p) => [p.xds, p.http]);
    assert.equal(new Set(ports).size, ports.length, `a port is used twice: ${ports.join(', ')}`);
    for (const port of ports) assert.ok(!DEFAULTS.includes(port), `${port} is a controller default`);
  });
});
