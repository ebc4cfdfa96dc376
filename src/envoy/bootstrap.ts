import type { Bootstrap } from '../api/generated/envoy/config/bootstrap/v3/Bootstrap.js';
import type { Cluster } from '../api/generated/envoy/config/cluster/v3/Cluster.js';
import type { ConfigSource } from '../api/generated/envoy/config/core/v3/ConfigSource.js';
import type { HttpProtocolOptions } from '../api/generated/envoy/extensions/upstreams/http/v3/HttpProtocolOptions.js';
import type { Struct } from '../api/generated/google/protobuf/Struct.js';
import type { UpstreamTlsContext } from '../api/generated/envoy/extensions/transport_sockets/tls/v3/UpstreamTlsContext.js';
import { identityParts, parseCommonName, XDS_SERVER_SPIFFE_ID, type CommonName } from '../proxy/types.js';
import { MAX_RE2_PROGRAM_SIZE } from '../util/re2.js';
import { STDOUT_ACCESS_LOG } from './telemetry.js';
import { ExtensionType, typedConfig } from './typed-config.js';

/** Name of the static cluster through which Envoy reaches the controller's ADS server (as in OSM). */
export const XDS_CLUSTER_NAME = 'osm-controller';
/** Default port of the Envoy admin interface. */
export const DEFAULT_ADMIN_PORT = 15000;
/** Default port of the controller's ADS server (OSM's). */
export const DEFAULT_XDS_PORT = 15128;


/** Inputs of {@link envoyBootstrap}. File paths are as the proxy sees them (its own file system). */
export interface EnvoyBootstrapOptions {
  /** The proxy's xDS client certificate CommonName, `<uuid>.<kind>.<sa>.<ns>.cluster.local`; becomes `node.id`. */
  nodeId: CommonName;
  /** `node.cluster`; defaults to `<serviceaccount>.<namespace>` taken from `nodeId`. */
  nodeCluster?: string;
  /** Host of the ADS server: an IPv4/IPv6 literal (cluster type STATIC) or a DNS name (LOGICAL_DNS). */
  xdsHost: string;
  /** Port of the ADS server (default {@link DEFAULT_XDS_PORT}). */
  xdsPort?: number;
  /** PEM file holding the proxy's xDS client certificate (chain). */
  certFile: string;
  /** PEM file holding the private key of that certificate. */
  keyFile: string;
  /** PEM file holding the mesh root certificate that the ADS server's certificate must chain to. */
  caFile: string;
  /** Port of the admin interface on 127.0.0.1 (default {@link DEFAULT_ADMIN_PORT}). */
  adminPort?: number;
  /**
   * A Unix domain socket path for the admin interface instead of `127.0.0.1:<adminPort>`
   * (`Pipe` address, mode 0600): reachable from the host's file system whatever network
   * namespace Envoy runs in, and by no other network peer.
   */
  adminSocketPath?: string;
  /** Incremental xDS: `ads_config.api_type` `DELTA_GRPC` instead of `GRPC` (state of the world). */
  delta?: boolean;
}

/** Whether `host` is an IPv4 or IPv6 literal (textual forms of RFC 791 / RFC 4291 §2.2); pure, no DNS. */
export function isIpLiteral(host: string): boolean {
  const ipv4 = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/;
  if (ipv4.test(host)) return true;
  // An IPv6 literal: hex groups and colons, at least two colons, optionally a dotted IPv4 tail or a zone.
  return /^[0-9a-fA-F:]*:[0-9a-fA-F:]*:[0-9a-fA-F:.]*(%[\w.-]+)?$/.test(host);
}

function checkPort(name: string, port: number): number {
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new Error(`envoyBootstrap: ${name} ${port} is not a TCP port (1–65535)`);
  return port;
}

/**
 * The bootstrap's static runtime layer, in proto3's JSON mapping of `google.protobuf.Struct`
 * (a plain object: what Envoy reads from a YAML bootstrap), not protobufjs's `fields` form.
 */
const RUNTIME_STATIC_LAYER = { 're2.max_program_size.error_level': MAX_RE2_PROGRAM_SIZE } as unknown as Struct;

/**
 * Builds the Envoy v3 bootstrap (`envoy.config.bootstrap.v3.Bootstrap`, snake_case field names as
 * in Envoy's YAML) of a sidecar, modelled on OSM's bootstrap:
 *
 * - `node`: `id` = the proxy's certificate CommonName, `cluster` = `<sa>.<ns>`;
 * - `admin` on `127.0.0.1:<adminPort>` (or the Unix socket `adminSocketPath`) with access logs to stdout;
 * - `dynamic_resources`: `ads_config` (GRPC, or DELTA_GRPC with `delta`; transport V3, node on first message only, via the
 *   `osm-controller` cluster), with `cds_config` and `lds_config` from ADS (resource API V3);
 * - `static_resources.clusters`: `osm-controller`, STATIC for an IP literal else LOGICAL_DNS,
 *   HTTP/2 via `typed_extension_protocol_options` (`HttpProtocolOptions.explicit_http_config`),
 *   mTLS via an `UpstreamTlsContext` whose `common_tls_context` names the certificate, key and
 *   CA files inline (OSM uses file-based SDS instead; the effect is the same), requires the
 *   server certificate to carry the URI SAN {@link XDS_SERVER_SPIFFE_ID} (exact match; chaining
 *   to the mesh CA is not enough, every workload's certificate does), ALPN `h2`,
 *   TLS 1.2 to 1.3, and SNI = `xdsHost` when it is a DNS name;
 * - `layered_runtime`: a static layer raising `re2.max_program_size.error_level` to
 *   {@link MAX_RE2_PROGRAM_SIZE} (Envoy's default, 100, refuses `[a-z0-9]{1,120}`; the
 *   controller refuses larger patterns itself), then an admin layer.
 *
 * Pure: does no I/O; the caller serialises it (YAML or JSON) and writes it.
 * @returns a plain object that `encodeMessage('envoy.config.bootstrap.v3.Bootstrap', …)` accepts.
 * @throws Error when `nodeId` is not a proxy CommonName and `nodeCluster` is not given, or a port is out of range.
 */
export function envoyBootstrap(options: EnvoyBootstrapOptions): Bootstrap {
  const adminPort = checkPort('adminPort', options.adminPort ?? DEFAULT_ADMIN_PORT);
  const xdsPort = checkPort('xdsPort', options.xdsPort ?? DEFAULT_XDS_PORT);
  const xdsHost = options.xdsHost.replace(/^\[(.*)\]$/, '$1'); // accept "[::1]"
  if (!xdsHost) throw new Error('envoyBootstrap: xdsHost is empty');
  let nodeCluster = options.nodeCluster;
  if (nodeCluster === undefined) {
    const { namespace, serviceAccount } = identityParts(parseCommonName(options.nodeId).identity);
    nodeCluster = `${serviceAccount}.${namespace}`;
  }
  const ipLiteral = isIpLiteral(xdsHost);

  const adsSource: ConfigSource = { ads: {}, resource_api_version: 'V3' };

  const tlsContext: UpstreamTlsContext = {
    common_tls_context: {
      alpn_protocols: ['h2'],
      tls_params: { tls_minimum_protocol_version: 'TLSv1_2', tls_maximum_protocol_version: 'TLSv1_3' },
      tls_certificates: [{ certificate_chain: { filename: options.certFile }, private_key: { filename: options.keyFile } }],
      validation_context: {
        trusted_ca: { filename: options.caFile },
        // The mesh CA also signs every workload's service certificate: the chain alone would let
        // any workload holding its own key pose as the controller. Only the controller's carries this.
        match_typed_subject_alt_names: [{ san_type: 'URI', matcher: { exact: XDS_SERVER_SPIFFE_ID } }],
      },
    },
    ...(ipLiteral ? {} : { sni: xdsHost }),
  };
  const http2: HttpProtocolOptions = { explicit_http_config: { http2_protocol_options: {} } };

  const xdsCluster: Cluster = {
    name: XDS_CLUSTER_NAME,
    type: ipLiteral ? 'STATIC' : 'LOGICAL_DNS',
    load_assignment: {
      cluster_name: XDS_CLUSTER_NAME,
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: xdsHost, port_value: xdsPort } } } }] }],
    },
    typed_extension_protocol_options: {
      [ExtensionType.HttpProtocolOptions]: typedConfig(ExtensionType.HttpProtocolOptions, http2),
    },
    transport_socket: {
      name: 'envoy.transport_sockets.tls',
      typed_config: typedConfig(ExtensionType.UpstreamTlsContext, tlsContext),
    },
  };

  return {
    node: { id: options.nodeId, cluster: nodeCluster },
    admin: {
      access_log: [...STDOUT_ACCESS_LOG],
      address: options.adminSocketPath !== undefined
        ? { pipe: { path: options.adminSocketPath, mode: 0o600 } }
        : { socket_address: { address: '127.0.0.1', port_value: adminPort } },
    },
    dynamic_resources: {
      ads_config: {
        api_type: options.delta === true ? 'DELTA_GRPC' : 'GRPC',
        transport_api_version: 'V3',
        set_node_on_first_message_only: true,
        grpc_services: [{ envoy_grpc: { cluster_name: XDS_CLUSTER_NAME } }],
      },
      cds_config: adsSource,
      lds_config: { ...adsSource },
    },
    static_resources: { clusters: [xdsCluster] },
    layered_runtime: {
      layers: [
        { name: 'static', static_layer: RUNTIME_STATIC_LAYER },
        { name: 'admin', admin_layer: {} },
      ],
    },
  };
}
