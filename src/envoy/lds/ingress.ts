import { accessLogFields, tracingFields } from '../telemetry.js';
import type { DownstreamTlsContext } from '../../api/generated/envoy/extensions/transport_sockets/tls/v3/DownstreamTlsContext.js';
import type { Filter } from '../../api/generated/envoy/config/listener/v3/Filter.js';
import type { FilterChain } from '../../api/generated/envoy/config/listener/v3/FilterChain.js';
import { SERVICE_CERT_SECRET_NAME, ingressRootCertSecretName } from '../../catalog/names.js';
import type { GenerationContext, ProxyProfile } from '../context.js';
import { ingressChainPlans, type IngressChainPlan } from '../ingress-plan.js';
import { ingressRouteConfigName } from '../rds/ingress.js';
import { tlsParams, tlsTransportSocket } from '../tls.js';
import { ADS_CONFIG_SOURCE, ExtensionType, typedConfig } from '../typed-config.js';
import { cidrRange, uniqueChains } from './filter-chain-match.js';

/** Stat prefix of the network RBAC filter on HTTPS ingress chains (principals from AuthenticatedPrincipal sources). */
export const INGRESS_RBAC_STAT_PREFIX = 'ingress_rbac';

/**
 * The server-side TLS of an HTTPS ingress chain (OSM v1.2 `GetDownstreamTLSContext` for
 * ingress): the proxy's service certificate over SDS and, unless `skipClientCertValidation`,
 * a required client certificate validated by `root-cert-https:<ns>/<sa>` (the mesh root; the
 * inbound mesh context pins mesh identities, which an ingress controller is not).
 */
export function ingressTlsContext(context: GenerationContext, profile: ProxyProfile, plan: IngressChainPlan): DownstreamTlsContext {
  const validate = !plan.skipClientCertValidation;
  return {
    common_tls_context: {
      tls_params: tlsParams(context.snapshot.settings),
      tls_certificate_sds_secret_configs: [{ name: SERVICE_CERT_SECRET_NAME, sds_config: ADS_CONFIG_SOURCE }],
      ...(validate ? { validation_context_sds_secret_config: { name: ingressRootCertSecretName(profile.identity), sds_config: ADS_CONFIG_SOURCE } } : {}),
    },
    require_client_certificate: { value: validate },
  };
}

function ingressFilterChain(context: GenerationContext, profile: ProxyProfile, plan: IngressChainPlan): FilterChain {
  const https = plan.protocol === 'https';
  const filters: Filter[] = [];
  if (https && !plan.skipClientCertValidation) {
    filters.push({
      name: 'envoy.filters.network.rbac',
      typed_config: typedConfig(ExtensionType.NetworkRbac, {
        stat_prefix: INGRESS_RBAC_STAT_PREFIX,
        rules: {
          action: 'ALLOW',
          policies: {
            [plan.name]: {
              permissions: [{ any: true }],
              principals: plan.principals.map((p) => ({ authenticated: { principal_name: { exact: p } } })),
            },
          },
        },
      }),
    });
  }
  filters.push({
    name: 'envoy.filters.network.http_connection_manager',
    typed_config: typedConfig(ExtensionType.HttpConnectionManager, {
      stat_prefix: plan.name,
      rds: { config_source: ADS_CONFIG_SOURCE, route_config_name: ingressRouteConfigName(plan.port) },
      http_filters: [{ name: 'envoy.filters.http.router', typed_config: typedConfig(ExtensionType.Router, {}) }],
      ...accessLogFields(context.snapshot.settings),
      ...tracingFields(context.snapshot.settings),
    }),
  });
  return {
    name: plan.name,
    filter_chain_match: {
      destination_port: { value: plan.port },
      ...(plan.sourceIpRanges.length > 0 ? { source_prefix_ranges: plan.sourceIpRanges.map(cidrRange) } : {}),
      // The inbound listener's tls_inspector sets `tls`; anything else stays `raw_buffer`.
      transport_protocol: https ? 'tls' : 'raw_buffer',
      ...(https && plan.sniHosts.length > 0 ? { server_names: [...plan.sniHosts] } : {}),
    },
    ...(https ? { transport_socket: tlsTransportSocket(ingressTlsContext(context, profile, plan), false) } : {}),
    filters,
  };
}

/**
 * The ingress filter chains for a proxy's inbound listener (OSM v1.2
 * `pkg/envoy/lds/ingress.go`), one per target port and protocol of the IngressBackends naming
 * services it serves, named `ingress_<ns>/<svc>_<port>_<protocol>`: match the target port and
 * the sources' CIDRs (`source_prefix_ranges`, absent = any source); http matches
 * `transport_protocol: raw_buffer` (plain HTTP from the ingress controller) and goes to the
 * HCM with RDS `rds-ingress.<port>`; https matches `tls` and `server_names` = sniHosts,
 * terminates TLS with the service certificate ({@link ingressTlsContext}) and, when client
 * certificates are validated, allows only the AuthenticatedPrincipal SANs (network RBAC,
 * `authenticated.principal_name` exact). Without an IngressBackend there is no chain, so
 * ingress is denied. Chains are added after `existing` so that no match leaf repeats
 * (see {@link uniqueChains}): the mesh chains win.
 */
export function ingressFilterChains(context: GenerationContext, profile: ProxyProfile, existing: readonly FilterChain[]): FilterChain[] {
  const chains = ingressChainPlans(context, profile).map((plan) => ingressFilterChain(context, profile, plan));
  return uniqueChains(existing, chains);
}
