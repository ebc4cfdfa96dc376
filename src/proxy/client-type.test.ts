import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { detectClientType, GRPC_CLIENT_FEATURE, withClientType } from './client-type.js';
import { parseCommonName } from './types.js';

describe('detectClientType', () => {
  it('recognises the user_agent_name gRPC clients send', () => {
    // grpc-js-xds 1.14 and C-core 1.51 through Python (as they send them), Go, Java.
    for (const name of ['gRPC Node Pure JS', 'gRPC C-core linux Python', 'gRPC Go', 'gRPC Java', 'grpc']) {
      assert.equal(detectClientType({ user_agent_name: name }), 'grpc', name);
    }
  });

  it('recognises a gRPC client by its client feature when the agent name is unusual', () => {
    assert.equal(detectClientType({ user_agent_name: 'my-grpc-fork', client_features: [GRPC_CLIENT_FEATURE] }), 'grpc');
  });

  it('treats Envoy, unknown and missing nodes as sidecars', () => {
    assert.equal(detectClientType({ user_agent_name: 'envoy', client_features: ['envoy.lb.does_not_support_overprovisioning_x'] }), 'envoy');
    assert.equal(detectClientType({ user_agent_name: 'grpcurl' }), 'envoy');
    assert.equal(detectClientType({}), 'envoy');
    assert.equal(detectClientType(undefined), 'envoy');
    assert.equal(detectClientType(null), 'envoy');
  });

  it('never changes the identity, only the client type', () => {
    const proxy = parseCommonName('6ba7b810-9dad-11d1-80b4-00c04fd430c8.sidecar.bookbuyer.bookbuyer.cluster.local');
    const grpc = withClientType(proxy, { user_agent_name: 'gRPC Node Pure JS' });
    assert.deepEqual({ ...grpc, clientType: undefined }, { ...proxy, clientType: undefined });
    assert.equal(grpc.clientType, 'grpc');
  });
});
