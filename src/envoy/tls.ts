import type { UpstreamTlsContext } from '../api/generated/envoy/extensions/transport_sockets/tls/v3/UpstreamTlsContext.js';
import type { DownstreamTlsContext } from '../api/generated/envoy/extensions/transport_sockets/tls/v3/DownstreamTlsContext.js';
import type { TlsParameters } from '../api/generated/envoy/extensions/transport_sockets/tls/v3/TlsParameters.js';
import type { TransportSocket } from '../api/generated/envoy/config/core/v3/TransportSocket.js';
import type { CertificateValidationContext } from '../api/generated/envoy/extensions/transport_sockets/tls/v3/CertificateValidationContext.js';
import type { ServiceIdentity } from '../proxy/types.js';
import {
  OUTBOUND_ROOT_CERT_SECRET_NAME,
  identitySpiffeId,
  inboundRootCertSecretName,
  SERVICE_CERT_SECRET_NAME,
  serviceFqdn,
} from '../catalog/names.js';
import type { MeshService, MeshSettings } from '../catalog/types.js';
import { ADS_CONFIG_SOURCE, ExtensionType, typedConfig } from './typed-config.js';

/** The MeshConfig settings the sidecars' TLS parameters are made of ({@link tlsParams}). */
export type TlsSettings = Pick<MeshSettings, 'tlsMinProtocolVersion' | 'tlsMaxProtocolVersion' | 'cipherSuites' | 'ecdhCurves'>;

/**
 * The TLS parameters of the sidecars' mTLS from MeshConfig: `sidecar.tlsMinProtocolVersion`,
 * `tlsMaxProtocolVersion` (OSM defaults TLS 1.2 to 1.3), `cipherSuites` and `ecdhCurves`
 * (Envoy `extensions.transport_sockets.tls.v3.TlsParameters`).
 */
export function tlsParams(settings: TlsSettings): TlsParameters {
  return {
    tls_minimum_protocol_version: settings.tlsMinProtocolVersion,
    tls_maximum_protocol_version: settings.tlsMaxProtocolVersion,
    ...(settings.cipherSuites.length > 0 ? { cipher_suites: [...settings.cipherSuites] } : {}),
    ...(settings.ecdhCurves.length > 0 ? { ecdh_curves: [...settings.ecdhCurves] } : {}),
  };
}

/**
 * URI SAN matchers (Envoy `CertificateValidationContext.match_typed_subject_alt_names`) accepting
 * exactly the SPIFFE IDs of `identities`, deduplicated and sorted.
 */
export function sanMatchers(identities: readonly ServiceIdentity[]): NonNullable<CertificateValidationContext['match_typed_subject_alt_names']> {
  return [...new Set(identities)].sort().map((id) => ({ san_type: 'URI' as const, matcher: { exact: identitySpiffeId(id) } }));
}

/**
 * The upstream (client side) TLS context every proxy uses towards `svc`: its own service
 * certificate over SDS (`service-cert`, the same name for every proxy, so the context names no
 * identity and is the same for every proxy); the mesh root over SDS (`root-cert-for-mtls-outbound`, one
 * Secret for every upstream) combined with URI SAN matchers for `backing`, the identities behind
 * the service (Envoy `CombinedCertificateValidationContext`: the same check OSM's per-service
 * `root-cert-for-mtls-outbound:<ns>/<svc>` Secret makes; with no identity behind it, the root
 * alone, as there); SNI = the service FQDN (Envoy `UpstreamTlsContext`).
 * @param sans `sanMatchers(backing)`, when the caller holds it already (one list shared by every
 *   proxy's context towards the service is compared by identity when checked).
 */
export function upstreamTlsContext(
  svc: MeshService,
  settings: MeshSettings,
  backing: readonly ServiceIdentity[] = [],
  sans: ReturnType<typeof sanMatchers> = sanMatchers(backing),
): UpstreamTlsContext {
  const root = { name: OUTBOUND_ROOT_CERT_SECRET_NAME, sds_config: ADS_CONFIG_SOURCE };
  return {
    common_tls_context: {
      tls_params: tlsParams(settings),
      tls_certificate_sds_secret_configs: [{ name: SERVICE_CERT_SECRET_NAME, sds_config: ADS_CONFIG_SOURCE }],
      ...(sans.length > 0
        ? { combined_validation_context: { default_validation_context: { match_typed_subject_alt_names: sans }, validation_context_sds_secret_config: root } }
        : { validation_context_sds_secret_config: root }),
    },
    sni: serviceFqdn(svc),
  };
}

/**
 * The downstream (server side) TLS context of the inbound listener of a proxy of `identity`:
 * its service certificate (`service-cert`) and `root-cert-for-mtls-inbound:<ns>/<sa>` over SDS, and a client
 * certificate required (Envoy `DownstreamTlsContext.require_client_certificate`).
 */
export function downstreamTlsContext(identity: ServiceIdentity, settings: TlsSettings): DownstreamTlsContext {
  return {
    common_tls_context: {
      tls_params: tlsParams(settings),
      tls_certificate_sds_secret_configs: [{ name: SERVICE_CERT_SECRET_NAME, sds_config: ADS_CONFIG_SOURCE }],
      validation_context_sds_secret_config: { name: inboundRootCertSecretName(identity), sds_config: ADS_CONFIG_SOURCE },
    },
    require_client_certificate: { value: true },
  };
}

/** Wraps a TLS context as the `envoy.transport_sockets.tls` transport socket. */
export function tlsTransportSocket(context: UpstreamTlsContext | DownstreamTlsContext, upstream: boolean): TransportSocket {
  return {
    name: 'envoy.transport_sockets.tls',
    typed_config: typedConfig(upstream ? ExtensionType.UpstreamTlsContext : ExtensionType.DownstreamTlsContext, context),
  };
}
