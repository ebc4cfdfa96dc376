/**
 * The gRPC service definition of ADS (`envoy.service.discovery.v3.AggregatedDiscoveryService`),
 * loaded with `@grpc/proto-loader`, field names kept in snake_case.
 */
import type * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { PROTO_LOADER_OPTIONS } from './codec.js';

/** The ADS service's fully-qualified name. */
export const ADS_SERVICE_NAME = 'envoy.service.discovery.v3.AggregatedDiscoveryService';

let loaded: grpc.ServiceDefinition | undefined;

/**
 * The ADS service definition, loaded on first use and shared by the process (a function of the
 * proto files alone). proto-loader serializes a `google.protobuf.Any` given as
 * `{type_url, value: Buffer}` as it is, so pre-encoded resources go on the wire without being
 * decoded and encoded again.
 * @throws Error when the protos cannot be found or parsed.
 */
export function adsServiceDefinition(): grpc.ServiceDefinition {
  if (loaded) return loaded;
  const def = protoLoader.loadSync('envoy/service/discovery/v3/ads.proto', { ...PROTO_LOADER_OPTIONS, includeDirs: [...PROTO_LOADER_OPTIONS.includeDirs] });
  loaded = def[ADS_SERVICE_NAME] as grpc.ServiceDefinition;
  return loaded;
}
