import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { AnyMemo, EnvoyCodec, decodeMessage, encodeMessage, envoyCodec } from './codec.js';
import { TypeUrl } from './type-urls.js';

const ROUTER = 'type.googleapis.com/envoy.extensions.filters.http.router.v3.Router';

/** A listener whose two filter chains share one `typed_config` object (an `Any`). */
function listenerSharingAnAny(): object {
  const router = { name: 'envoy.filters.http.router', typed_config: { '@type': ROUTER, suppress_envoy_headers: true } };
  const chain = (port: number) => ({
    filter_chain_match: { destination_port: { value: port } },
    filters: [{ name: 'envoy.filters.network.http_connection_manager', typed_config: {
      '@type': 'type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager',
      stat_prefix: 'in',
      http_filters: [router],
      route_config: { name: 'local' },
    } }],
  });
  return { name: 'inbound', filter_chains: [chain(8080), chain(9090)] };
}

describe('EnvoyCodec', () => {
  it('is an object of its own: a second codec shares no state with the process\'s, and encodes the same bytes', () => {
    const mine = new EnvoyCodec();
    assert.notEqual(mine.root, envoyCodec().root);
    assert.notEqual(mine.messageType(TypeUrl.Listener), envoyCodec().messageType(TypeUrl.Listener));
    const listener = listenerSharingAnAny();
    const bytes = mine.encodeMessage(TypeUrl.Listener, listener);
    assert.deepEqual(bytes, encodeMessage(TypeUrl.Listener, listener));
    assert.deepEqual(mine.decodeMessage(TypeUrl.Listener, bytes), decodeMessage(TypeUrl.Listener, bytes));
  });

  it('uses an AnyMemo only during the encoding given it, on the codec that runs it', () => {
    const mine = new EnvoyCodec();
    const listener = listenerSharingAnAny();
    const memo = new AnyMemo();
    const withMemo = mine.encodeMessage(TypeUrl.Listener, listener, false, memo);
    // Each Any object converted once: the two connection managers and the router they share.
    assert.equal(memo.converted, 3);
    mine.encodeMessage(TypeUrl.Listener, listener, false, memo);
    assert.equal(memo.converted, 3, 'the same objects again: found in the memo');
    // Encodings without it (on this codec or the process's) neither read nor add to it.
    assert.deepEqual(mine.encodeMessage(TypeUrl.Listener, listener), withMemo);
    assert.deepEqual(encodeMessage(TypeUrl.Listener, listenerSharingAnAny()), withMemo);
    assert.equal(memo.converted, 3);
    // The same memo on another codec: still its own count, the same bytes.
    assert.deepEqual(envoyCodec().encodeChecked(TypeUrl.Listener, listenerSharingAnAny(), memo).encoded, withMemo);
    assert.equal(memo.converted, 6);
  });

  it('ends an encoding that throws with no memo left active', () => {
    const mine = new EnvoyCodec();
    const memo = new AnyMemo();
    // protobufjs' fromObject throws half way (a wrapper given as a bare number, the check skipped).
    const broken = { ...listenerSharingAnAny(), listener_filters_timeout: 5 };
    assert.throws(() => mine.encodeMessage(TypeUrl.Listener, broken, true, memo), /object expected/);
    const before = memo.converted;
    mine.encodeMessage(TypeUrl.Listener, listenerSharingAnAny());
    assert.equal(memo.converted, before, 'an encoding without a memo after it does not use it');
  });
});

describe('EnvoyCodec.toProto3Json', () => {
  const codec = envoyCodec();
  it('prints wrapper fields as plain values (a default one too) and durations as strings, found by type through Anys', () => {
    const cluster = {
      '@type': TypeUrl.Cluster,
      name: 'c',
      connect_timeout: { seconds: '1' },
      per_connection_buffer_limit_bytes: { value: 32768 },
      circuit_breakers: { thresholds: [{ max_connections: { value: 100 }, max_retries: {} }] },
      common_lb_config: { healthy_panic_threshold: { value: 50 } },
      typed_extension_protocol_options: {
        'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': {
          '@type': 'type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions',
          common_http_protocol_options: { idle_timeout: { seconds: '0', nanos: 250_000_000 }, max_requests_per_connection: { value: 7 } },
        },
      },
    };
    assert.deepEqual(codec.toProto3Json({ proxy: 'p', configs: [cluster] }), {
      proxy: 'p',
      configs: [{
        '@type': TypeUrl.Cluster,
        name: 'c',
        connect_timeout: '1s',
        per_connection_buffer_limit_bytes: 32768,
        circuit_breakers: { thresholds: [{ max_connections: 100, max_retries: 0 }] },
        // envoy.type.v3.Percent is a message with one field `value`, not a wrapper: it stays.
        common_lb_config: { healthy_panic_threshold: { value: 50 } },
        typed_extension_protocol_options: {
          'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': {
            '@type': 'type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions',
            common_http_protocol_options: { idle_timeout: '0.250s', max_requests_per_connection: 7 },
          },
        },
      }],
    });
    assert.deepEqual(cluster.per_connection_buffer_limit_bytes, { value: 32768 }, 'its argument is not changed');
  });

  it('writes durations with 0, 3, 6 or 9 fractional digits, and keeps what it cannot type', () => {
    const timeout = (d: object) => (codec.toProto3Json({ '@type': TypeUrl.Cluster, connect_timeout: d }) as { connect_timeout: unknown }).connect_timeout;
    assert.equal(timeout({}), '0s');
    assert.equal(timeout({ seconds: '5', nanos: 500_000 }), '5.000500s');
    assert.equal(timeout({ seconds: '-1', nanos: -1 }), '-1.000000001s');
    assert.deepEqual(codec.toProto3Json({ '@type': 'type.googleapis.com/no.such.Type', weight: { value: 1 } }), { '@type': 'type.googleapis.com/no.such.Type', weight: { value: 1 } });
    assert.deepEqual(codec.toProto3Json({ weight: { value: 1 } }), { weight: { value: 1 } }, 'outside a typed object: as it is');
  });
});
