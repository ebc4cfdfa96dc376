import type * as grpc from '@grpc/grpc-js';
import { decodeAny } from '../../src/api/codec.js';
import type { DeltaDiscoveryRequest, DeltaDiscoveryResponse__Output } from '../../src/xds/server/discovery-types.js';
import { TEST_NODE_ID, type AdsTestClient } from './ads-client.js';
import { RecordedStream } from './recorded-stream.js';

/** A raw `DeltaAggregatedResources` client call. */
export type DeltaClientCall = grpc.ClientDuplexStream<DeltaDiscoveryRequest, DeltaDiscoveryResponse__Output>;

/** What a delta client keeps per type: its subscription and the resources it holds. */
export interface DeltaTypeView {
  /** Subscribed to every resource of the type (first request with no names, or `*`). */
  wildcard: boolean;
  /** Names subscribed explicitly. */
  readonly names: Set<string>;
  /** Resources held: name → version (from applied responses, or carried over on reconnect). */
  readonly held: Map<string, string>;
  /** Whether this stream sent a request of the type yet. */
  requested: boolean;
}

/**
 * Opens a delta stream on `client`'s channel. With `resumeFrom`, the new stream continues that
 * stream's session, as a client does after a reconnect: its subscriptions and held resources are
 * carried over, and the first request of each type sends them back (`resource_names_subscribe`
 * and `initial_resource_versions`, xds_protocol "Incremental xDS").
 */
export function openDeltaTestStream(client: AdsTestClient, nodeId: string = TEST_NODE_ID, resumeFrom?: DeltaTestStream): DeltaTestStream {
  const stream = new DeltaTestStream(client.openDeltaStream() as unknown as DeltaClientCall, nodeId);
  if (resumeFrom) {
    for (const [typeUrl, v] of resumeFrom.types) {
      stream.types.set(typeUrl, { wildcard: v.wildcard, names: new Set(v.names), held: new Map(v.held), requested: false });
    }
  }
  return stream;
}

/**
 * The client side of incremental xDS, for tests: subscribes and unsubscribes, applies responses
 * to a local map of name → version (updates and `removed_resources`), ACKs and NACKs by nonce,
 * and records every response in order.
 */
export class DeltaTestStream extends RecordedStream<DeltaDiscoveryRequest, DeltaDiscoveryResponse__Output> {
  /** The subscription and held resources of each type URL. */
  readonly types = new Map<string, DeltaTypeView>();

  /** The view of `typeUrl` (created empty on first use). */
  view(typeUrl: string): DeltaTypeView {
    let v = this.types.get(typeUrl);
    if (!v) {
      v = { wildcard: false, names: new Set(), held: new Map(), requested: false };
      this.types.set(typeUrl, v);
    }
    return v;
  }

  /** Resources held of `typeUrl`, name → version, sorted by name. */
  held(typeUrl: string): Record<string, string> {
    return Object.fromEntries([...this.view(typeUrl).held].sort(([a], [b]) => a.localeCompare(b)));
  }

  protected sending(req: DeltaDiscoveryRequest): void {
    if (req.type_url) this.view(req.type_url).requested = true;
  }

  /**
   * Subscribes to `names` of `typeUrl` (`*` for wildcard). The stream's first request of a
   * type with no names is a (legacy) wildcard subscription; after a reconnect
   * ({@link openDeltaTestStream} with `resumeFrom`), that first request also carries the
   * carried-over subscription and `initial_resource_versions`.
   */
  subscribe(typeUrl: string, names: readonly string[] = []): void {
    const v = this.view(typeUrl);
    const first = !v.requested;
    const subscribe = [...names];
    let initial: Record<string, string> | undefined;
    if (first) {
      if (names.length === 0 && v.names.size === 0) v.wildcard = true;
      // A resumed session subscribes again to what it had, and says what it holds.
      for (const n of v.names) if (!subscribe.includes(n)) subscribe.push(n);
      if (v.wildcard && v.names.size > 0 && !subscribe.includes('*')) subscribe.push('*');
      if (v.held.size > 0) initial = Object.fromEntries(v.held);
    }
    for (const n of names) {
      if (n === '*') v.wildcard = true;
      else v.names.add(n);
    }
    this.send({ type_url: typeUrl, resource_names_subscribe: subscribe, initial_resource_versions: initial });
  }

  /** Unsubscribes from `names` (`*` ends the wildcard) and drops the resources it no longer wants. */
  unsubscribe(typeUrl: string, names: readonly string[]): void {
    const v = this.view(typeUrl);
    for (const n of names) {
      if (n === '*') {
        v.wildcard = false;
        for (const held of [...v.held.keys()]) if (!v.names.has(held)) v.held.delete(held);
      } else {
        v.names.delete(n);
        if (!v.wildcard) v.held.delete(n);
      }
    }
    this.send({ type_url: typeUrl, resource_names_unsubscribe: [...names] });
  }

  /** Applies `response` to the held resources: its resources are added or updated, its `removed_resources` dropped. */
  apply(response: DeltaDiscoveryResponse__Output): void {
    const v = this.view(response.type_url ?? '');
    for (const r of response.resources ?? []) v.held.set(r.name ?? '', r.version ?? '');
    for (const name of response.removed_resources ?? []) v.held.delete(name);
  }

  /** Applies `response` and ACKs it (its nonce, no error), optionally with subscription changes. */
  ack(response: DeltaDiscoveryResponse__Output, changes: { subscribe?: string[]; unsubscribe?: string[] } = {}): void {
    this.apply(response);
    const typeUrl = response.type_url ?? '';
    const v = this.view(typeUrl);
    for (const n of changes.subscribe ?? []) v.names.add(n);
    for (const n of changes.unsubscribe ?? []) {
      v.names.delete(n);
      if (!v.wildcard) v.held.delete(n);
    }
    this.send({
      type_url: typeUrl,
      response_nonce: response.nonce,
      resource_names_subscribe: changes.subscribe,
      resource_names_unsubscribe: changes.unsubscribe,
    });
  }

  /** NACKs `response` with `message`, keeping the resources held before it (as Envoy does). */
  nack(response: DeltaDiscoveryResponse__Output, message: string): void {
    this.send({
      type_url: response.type_url,
      response_nonce: response.nonce,
      error_detail: { code: 3 /* INVALID_ARGUMENT */, message },
    });
  }
}

/** Names of the resources of a delta response, in order. */
export function deltaNames(response: DeltaDiscoveryResponse__Output): string[] {
  return (response.resources ?? []).map((r) => r.name ?? '');
}

/** Decodes the resources of a delta response (Envoy JSON-dump shape, with `@type`). */
export function decodeDeltaResources(response: DeltaDiscoveryResponse__Output): Record<string, unknown>[] {
  return (response.resources ?? []).map((r) =>
    decodeAny({ type_url: r.resource?.type_url ?? '', value: r.resource?.value ?? Buffer.alloc(0) }),
  );
}
