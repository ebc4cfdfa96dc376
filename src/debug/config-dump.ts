import { decodeAny } from '../api/codec.js';
import { TypeUrl } from '../api/type-urls.js';
import type { ProxySnapshot } from '../xds/cache/types.js';

/** What Envoy's admin `/config_dump` shows for a private key. */
export const REDACTED = '[redacted]';

type Json = Record<string, unknown>;

function redactSecret(secret: Json): Json {
  const tls = secret.tls_certificate as Json | undefined;
  if (!tls?.private_key) return secret;
  return { ...secret, tls_certificate: { ...tls, private_key: { inline_string: REDACTED } } };
}

/**
 * A proxy snapshot as Envoy's admin `config_dump` shows it (`envoy.admin.v3.ConfigDump`):
 * one entry per type — `ClustersConfigDump.dynamic_active_clusters`,
 * `EndpointsConfigDump.dynamic_endpoint_configs`, `ListenersConfigDump.dynamic_listeners`,
 * `RoutesConfigDump.dynamic_route_configs`, `SecretsConfigDump.dynamic_active_secrets` — each
 * resource decoded with Envoy's field names, every nested Any decoded with its `@type`, and
 * private keys redacted as Envoy does.
 */
export function configDump(snapshot: ProxySnapshot): { configs: Json[] } {
  const list = (type: TypeUrl) => [...(snapshot.resources.get(type)?.values() ?? [])].map((r) => ({ name: r.name, version_info: r.version, decoded: decodeAny(r.resource) }));
  return {
    configs: [
      {
        '@type': 'type.googleapis.com/envoy.admin.v3.ClustersConfigDump',
        version_info: snapshot.versions.get(TypeUrl.Cluster),
        dynamic_active_clusters: list(TypeUrl.Cluster).map((r) => ({ version_info: r.version_info, cluster: r.decoded })),
      },
      {
        '@type': 'type.googleapis.com/envoy.admin.v3.EndpointsConfigDump',
        dynamic_endpoint_configs: list(TypeUrl.ClusterLoadAssignment).map((r) => ({ version_info: r.version_info, endpoint_config: r.decoded })),
      },
      {
        '@type': 'type.googleapis.com/envoy.admin.v3.ListenersConfigDump',
        version_info: snapshot.versions.get(TypeUrl.Listener),
        dynamic_listeners: list(TypeUrl.Listener).map((r) => ({ name: r.name, active_state: { version_info: r.version_info, listener: r.decoded } })),
      },
      {
        '@type': 'type.googleapis.com/envoy.admin.v3.RoutesConfigDump',
        dynamic_route_configs: list(TypeUrl.RouteConfiguration).map((r) => ({ version_info: r.version_info, route_config: r.decoded })),
      },
      {
        '@type': 'type.googleapis.com/envoy.admin.v3.SecretsConfigDump',
        dynamic_active_secrets: list(TypeUrl.Secret).map((r) => ({ name: r.name, version_info: r.version_info, secret: redactSecret(r.decoded) })),
      },
    ],
  };
}
