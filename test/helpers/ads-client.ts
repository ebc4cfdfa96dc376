import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { PROTO_LOADER_OPTIONS, decodeAny } from '../../src/api/codec.js';
import type { DiscoveryRequest, DiscoveryResponse__Output } from '../../src/xds/server/discovery-types.js';
import { RecordedStream } from './recorded-stream.js';

/** A node.id that is a valid proxy CommonName (for `authenticateFromNodeId`). */
export const TEST_NODE_ID = '6ba7b810-9dad-11d1-80b4-00c04fd430c8.sidecar.bookbuyer.bookbuyer.cluster.local';

type AdsClientConstructor = new (address: string, credentials: grpc.ChannelCredentials, options?: grpc.ClientOptions) => grpc.Client;

let clientConstructor: AdsClientConstructor | undefined;

function adsClientConstructor(): AdsClientConstructor {
  if (clientConstructor) return clientConstructor;
  const def = protoLoader.loadSync('envoy/service/discovery/v3/ads.proto', {
    ...PROTO_LOADER_OPTIONS,
    includeDirs: [...PROTO_LOADER_OPTIONS.includeDirs],
  });
  const service = def['envoy.service.discovery.v3.AggregatedDiscoveryService'] as grpc.ServiceDefinition;
  clientConstructor = grpc.makeGenericClientConstructor(service, 'AggregatedDiscoveryService') as unknown as AdsClientConstructor;
  return clientConstructor;
}

/** Channel options that make a TLS client name `localhost`, whatever address it dials. */
export const TLS_LOCALHOST: grpc.ClientOptions = { 'grpc.ssl_target_name_override': 'localhost', 'grpc.default_authority': 'localhost' };

/** A test ADS client over real grpc-js: one channel, any number of streams. */
export class AdsTestClient {
  private readonly client: grpc.Client;

  /**
   * @param address `host:port` of the ADS server.
   * @param credentials TLS credentials: the server certificate is checked for the DNS name
   *   `localhost` (a TLS server name may not be an IP address, RFC 6066); plaintext by default.
   */
  constructor(address: string, credentials: grpc.ChannelCredentials = grpc.credentials.createInsecure()) {
    const Ctor = adsClientConstructor();
    this.client = new Ctor(address, credentials, credentials._isSecure() ? TLS_LOCALHOST : {});
  }

  /** Opens a `StreamAggregatedResources` stream whose first request will carry `node.id = nodeId`. */
  openStream(nodeId: string = TEST_NODE_ID): AdsTestStream {
    const call = (
      this.client as unknown as { StreamAggregatedResources(): grpc.ClientDuplexStream<DiscoveryRequest, DiscoveryResponse__Output> }
    ).StreamAggregatedResources();
    return new AdsTestStream(call, nodeId);
  }

  /** Opens a `DeltaAggregatedResources` stream (raw). */
  openDeltaStream(): grpc.ClientDuplexStream<unknown, unknown> {
    return (this.client as unknown as { DeltaAggregatedResources(): grpc.ClientDuplexStream<unknown, unknown> }).DeltaAggregatedResources();
  }

  /** Closes the channel. */
  close(): void {
    this.client.close();
  }
}

/** One ADS stream of {@link AdsTestClient}: sends requests, records every response in order. */
export class AdsTestStream extends RecordedStream<DiscoveryRequest, DiscoveryResponse__Output> {
  /** Last version accepted (ACKed) by type, used as `version_info` of ACKs and NACKs. */
  private readonly accepted = new Map<string, string>();
  /** Names last requested by type, repeated in ACKs and NACKs unless new ones are given. */
  private readonly subscribed = new Map<string, string[]>();

  protected sending(req: DiscoveryRequest): void {
    if (req.type_url && req.resource_names) this.subscribed.set(req.type_url, [...req.resource_names]);
  }

  /** Sends a first request (no nonce) for `typeUrl` with `names` (empty: wildcard for LDS/CDS). */
  request(typeUrl: string, names: string[] = [], nonce = '', versionInfo = ''): void {
    this.send({ type_url: typeUrl, resource_names: names, response_nonce: nonce, version_info: versionInfo });
  }

  /** ACKs `response` (its version and nonce), with the same names as before unless `names` is given. */
  ack(response: DiscoveryResponse__Output, names?: string[]): void {
    const typeUrl = response.type_url ?? '';
    this.accepted.set(typeUrl, response.version_info ?? '');
    this.send({
      type_url: typeUrl,
      version_info: response.version_info,
      response_nonce: response.nonce,
      resource_names: names ?? this.subscribed.get(typeUrl) ?? [],
    });
  }

  /** NACKs `response` with `message`: `version_info` stays the last accepted one, as Envoy does. */
  nack(response: DiscoveryResponse__Output, message: string, names?: string[]): void {
    const typeUrl = response.type_url ?? '';
    this.send({
      type_url: typeUrl,
      version_info: this.accepted.get(typeUrl) ?? '',
      response_nonce: response.nonce,
      resource_names: names ?? this.subscribed.get(typeUrl) ?? [],
      error_detail: { code: grpc.status.INVALID_ARGUMENT, message },
    });
  }

  /**
   * Resolves with the first response (from the start of the stream) matching `predicate`.
   * @throws Error after `timeoutMs` milliseconds, or when the stream ended first.
   */
  async waitFor(predicate: (r: DiscoveryResponse__Output) => boolean, timeoutMs = 5000): Promise<DiscoveryResponse__Output> {
    await this.until(() => this.responses.some(predicate), timeoutMs, 'a matching response');
    return this.responses.find(predicate)!;
  }

  /** Half-closes the stream (no more requests). */
  end(): void {
    this.call.end();
  }
}

/** Decodes every resource of a response (Envoy JSON-dump shape, with `@type`). */
export function decodeResources(response: DiscoveryResponse__Output): Record<string, unknown>[] {
  return (response.resources ?? []).map((r) => decodeAny({ type_url: r.type_url ?? '', value: r.value ?? Buffer.alloc(0) }));
}

/** Names of the resources of a response (their `name` or, for EDS, `cluster_name`). */
export function resourceNames(response: DiscoveryResponse__Output): string[] {
  return decodeResources(response).map((r) => String(r.name ?? r.cluster_name));
}
