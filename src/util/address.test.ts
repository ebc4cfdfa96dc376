import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { splitHostPort } from './address.js';

describe('splitHostPort', () => {
  it('splits IPv4, names and bracketed IPv6', () => {
    assert.deepEqual(splitHostPort('127.0.0.1:15128'), { host: '127.0.0.1', port: 15128 });
    assert.deepEqual(splitHostPort('osm-controller.osm-system.svc:15128'), { host: 'osm-controller.osm-system.svc', port: 15128 });
    assert.deepEqual(splitHostPort('[::1]:0'), { host: '::1', port: 0 });
  });

  it('gives NaN for a missing or non-numeric port and an empty host without a colon', () => {
    assert.ok(Number.isNaN(splitHostPort('localhost:').port));
    assert.ok(Number.isNaN(splitHostPort('localhost:http').port));
    assert.equal(splitHostPort('localhost').host, '');
  });
});
