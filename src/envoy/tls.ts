import type { UpstreamTlsContext } from '../api/generated/envoy/extensions/transport_sockets/tls/v3/UpstreamTlsContext.js';
import type { DownstreamTlsContext } from '../api/generated/envoy/extensions/transport_sockets/tls/v3/DownstreamTlsContext.js';
import type { TlsParameters } from '../api/generated/envoy/extensions/transport_sockets/tls/v3/TlsParameters.js';
import type { TransportSocket } from '../api/generated/envoy/config/core/v3/TransportSocket.js';
import type { ServiceIdentity } from '../proxy/types.js';
import {
  inboundRootCertSecretName,
  outboundRootCertSecretName,
  serviceCertSecretName,
  serviceFqdn,
} from '../catalog/names.js';
import type { MeshService, MeshSettings } from '../catalog/types.js';
import { ADS_CONFIG_SOURCE, ExtensionType, typedConfig } from './typed-config.js';

/**
 * The TLS parameters of the sidecars' mTLS from MeshConfig: `sidecar.tlsMinProtocolVersion`,
 * `tlsMaxProtocolVersion` (OSM defaults TLS 1.2 to 1.3), `cipherSuites` and `ecdhCurves`
 * (Envoy `extensions.transport_sockets.tls.v3.TlsParameters`).
 */
export function tlsParams(settings: MeshSettings): TlsParameters {
  return {
    tls_minimum_protocol_version: settings.tlsMinProtocolVersion,
    tls_maximum_protocol_version: settings.tlsMaxProtocolVersion,
    ...(settings.cipherSuites.length > 0 ? { cipher_suites: [...settings.cipherSuites] } : {}),
    ...(settings.ecdhCurves.length > 0 ? { ecdh_curves: [...settings.ecdhCurves] } : {}),
  };
}

/**
 * The upstream (client side) TLS context a proxy of `identity` uses towards `svc`: its own
 * service certificate over SDS, the validation context `root-cert-for-mtls-outbound:<ns>/<svc>`
 * over SDS, SNI = the service FQDN (Envoy `UpstreamTlsContext`).
 */
export function upstreamTlsContext(identity: ServiceIdentity, svc: MeshService, settings: MeshSettings): UpstreamTlsContext {
  return {
    common_tls_context: {
      tls_params: tlsParams(settings),
      tls_certificate_sds_secret_configs: [{ name: serviceCertSecretName(identity), sds_config: ADS_CONFIG_SOURCE }],
      validation_context_sds_secret_config: { name: outboundRootCertSecretName(svc), sds_config: ADS_CONFIG_SOURCE },
    },
    sni: serviceFqdn(svc),
  };
}

/**
 * The downstream (server side) TLS context of the inbound listener of a proxy of `identity`:
 * its service certificate and `root-cert-for-mtls-inbound:<ns>/<sa>` over SDS, and a client
 * certificate required (Envoy `DownstreamTlsContext.require_client_certificate`).
 */
export function downstreamTlsContext(identity: ServiceIdentity, settings: MeshSettings): DownstreamTlsContext {
  return {
    common_tls_context: {
      tls_params: tlsParams(settings),
      tls_certificate_sds_secret_configs: [{ name: serviceCertSecretName(identity), sds_config: ADS_CONFIG_SOURCE }],
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
