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
