import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { encodeAny, encodeMessage } from './codec.js';
import { ResponseEncoder } from './response-encoder.js';

const CLUSTER = 'type.googleapis.com/envoy.config.cluster.v3.Cluster';
const SECRET = 'type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret';

describe('ResponseEncoder', () => {
  const a = encodeAny(CLUSTER, { name: 'bookstore/bookstore|14001', type: 'EDS', connect_timeout: { seconds: 1 } });
  const b = encodeAny(CLUSTER, { name: 'x'.repeat(300), type: 'EDS' }); // lengths past one varint byte
  const empty = { type_url: SECRET, value: Buffer.alloc(0) };

  it('writes a DiscoveryResponse byte for byte as protobufjs does, the second time from its memo', () => {
    const encoder = new ResponseEncoder();
    const response = { version_info: 'v1', resources: [a, b, empty], type_url: CLUSTER, nonce: 'n-1' };
    const expected = encodeMessage('envoy.service.discovery.v3.DiscoveryResponse', response);
    assert.deepEqual(encoder.sotw(response), expected);
    assert.deepEqual(encoder.sotw(response), expected);
    const bare = { version_info: '', resources: [], type_url: CLUSTER, nonce: 'n' };
    assert.deepEqual(encoder.sotw(bare), encodeMessage('envoy.service.discovery.v3.DiscoveryResponse', bare));
  });

  it('writes a DeltaDiscoveryResponse byte for byte as protobufjs does, with removed resources', () => {
    const encoder = new ResponseEncoder();
    const resources = [
      { name: 'bookstore/bookstore|14001', version: 'h1', resource: a },
      { name: 'x'.repeat(300), version: 'h2'.repeat(80), resource: b },
      { name: 'service-cert', version: 'h3', resource: empty },
    ];
    const response = { system_version_info: 's1', resources, type_url: CLUSTER, nonce: 'd-1', removed_resources: ['gone', 'also-gone'] };
    const expected = encodeMessage('envoy.service.discovery.v3.DeltaDiscoveryResponse', response);
    assert.deepEqual(encoder.delta(response), expected);
    assert.deepEqual(encoder.delta({ ...response, nonce: 'd-2' }), encodeMessage('envoy.service.discovery.v3.DeltaDiscoveryResponse', { ...response, nonce: 'd-2' }), 'the memo of a resource serves another response');
    const bare = { type_url: CLUSTER, nonce: 'd-3', removed_resources: [] };
    assert.deepEqual(encoder.delta(bare), encodeMessage('envoy.service.discovery.v3.DeltaDiscoveryResponse', bare));
  });
});
