/**
 * Type URLs of the xDS resource types Trellis serves, named after their proto messages
 * (Envoy `xds_protocol`, "Resource types").
 */
export const TypeUrl = {
  Listener: 'type.googleapis.com/envoy.config.listener.v3.Listener',
  RouteConfiguration: 'type.googleapis.com/envoy.config.route.v3.RouteConfiguration',
  Cluster: 'type.googleapis.com/envoy.config.cluster.v3.Cluster',
  ClusterLoadAssignment: 'type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment',
  Secret: 'type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret',
} as const;

/** One of the five xDS resource type URLs in {@link TypeUrl}. */
export type TypeUrl = (typeof TypeUrl)[keyof typeof TypeUrl];

/** A resource named by type URL and name. */
export interface ResourceName {
  readonly typeUrl: TypeUrl;
  readonly name: string;
}

/**
 * The order in which a push sends the types: make before break
 * (CDS, EDS, LDS, RDS, SDS; Envoy `xds_protocol`, "Eventual consistency considerations").
 */
export const PUSH_ORDER: readonly TypeUrl[] = [
  TypeUrl.Cluster,
  TypeUrl.ClusterLoadAssignment,
  TypeUrl.Listener,
  TypeUrl.RouteConfiguration,
  TypeUrl.Secret,
];

/** Short xDS names of the type URLs (`CDS`, `EDS`, …), for logs, metrics and the debug API. */
export const TYPE_SHORT_NAME: Readonly<Record<TypeUrl, string>> = {
  [TypeUrl.Cluster]: 'CDS',
  [TypeUrl.ClusterLoadAssignment]: 'EDS',
  [TypeUrl.Listener]: 'LDS',
  [TypeUrl.RouteConfiguration]: 'RDS',
  [TypeUrl.Secret]: 'SDS',
};

/** Prefix of every `google.protobuf.Any` type URL Envoy uses. */
export const TYPE_URL_PREFIX = 'type.googleapis.com/';

/** Builds the type URL of a fully-qualified proto message name, e.g. `envoy.config.cluster.v3.Cluster`. */
export function typeUrlOf(messageName: string): string {
  return TYPE_URL_PREFIX + messageName;
}
