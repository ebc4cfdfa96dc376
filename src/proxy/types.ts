/**
 * A service identity: the Kubernetes service account a workload runs as, written
 * `<namespace>/<serviceaccount>` (the form OSM's secret names use, `root-cert-for-mtls-inbound:<ns>/<sa>`).
 */
export type ServiceIdentity = string & { readonly __brand: 'ServiceIdentity' };

/**
 * The CommonName of a proxy's xDS client certificate:
 * `<uuid>.<kind>.<serviceaccount>.<namespace>.<trust domain>` (OSM `pkg/envoy/proxy.go`).
 */
export type CommonName = string & { readonly __brand: 'CommonName' };

/** Kinds of xDS client, as the second label of the CommonName. */
export type ProxyKind = 'sidecar' | 'gateway';

/** The trust domain of mesh certificates (OSM's default). */
export const TRUST_DOMAIN = 'cluster.local';

/**
 * The identity of the controller's xDS server: a URI Subject Alternative Name
 * (`spiffe://cluster.local/osm-controller`) that its server certificate carries and that every
 * proxy bootstrap requires of the ADS server (Envoy `match_typed_subject_alt_names`, URI, exact).
 * No workload certificate can carry it: a workload's SPIFFE ID always has the path
 * `/ns/<namespace>/sa/<serviceaccount>`, and this path has no `/ns/` segment. (A DNS name would
 * not do: service account `osm-controller.osm-system` in namespace `svc` is issued DNS SAN
 * `osm-controller.osm-system.svc.cluster.local`.)
 */
export const XDS_SERVER_SPIFFE_ID = `spiffe://${TRUST_DOMAIN}/osm-controller`;

/** Builds a {@link ServiceIdentity} from a namespace and service account name. */
export function serviceIdentity(namespace: string, serviceAccount: string): ServiceIdentity {
  return `${namespace}/${serviceAccount}` as ServiceIdentity;
}

/** Splits a {@link ServiceIdentity} into its namespace and service account. */
export function identityParts(identity: ServiceIdentity): { namespace: string; serviceAccount: string } {
  const i = identity.indexOf('/');
  return { namespace: identity.slice(0, i), serviceAccount: identity.slice(i + 1) };
}

/**
 * What software an xDS client is, which decides the configuration FORMAT it gets (never its
 * identity, which comes from the certificate): `envoy` (a sidecar: listeners on ports, mTLS
 * through SDS) or `grpc` (a proxyless gRPC client: `api_listener`s named by target, gRFC
 * A27/A28). See `detectClientType` in `client-type.ts`.
 */
export type XdsClientType = 'envoy' | 'grpc';

/** A connected (or connecting) xDS client, as identified by its verified certificate. */
export interface Proxy {
  /** The UUID of the proxy, first label of its CommonName. */
  readonly uuid: string;
  readonly kind: ProxyKind;
  readonly identity: ServiceIdentity;
  readonly commonName: CommonName;
  /** The client's software, from its first request's `node`; absent means `envoy`. */
  readonly clientType?: XdsClientType;
  /**
   * True when the identity is proven: the stream came with a client certificate the mesh CA
   * signed (the mTLS listener, `authenticateFromPeerCertificate`). Absent or false when it is only
   * claimed (the plaintext listener's `node.id`): such a proxy is never issued a certificate and
   * never sent a private key, and an identity outside the mesh is refused.
   */
  readonly verified?: boolean;
}

const UUID_RE = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;
const DNS_LABEL_RE = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

/**
 * Parses a proxy CommonName `<uuid>.<kind>.<sa>.<ns>.<trust domain>`.
 * @throws Error naming the part that is wrong (UUID, kind, service account, namespace, trust domain).
 */
export function parseCommonName(cn: string): Proxy {
  const parts = cn.split('.');
  if (parts.length < 5) throw new Error(`CommonName "${cn}": want <uuid>.<kind>.<serviceaccount>.<namespace>.${TRUST_DOMAIN}`);
  const [uuid, kind, serviceAccount, namespace, ...domain] = parts;
  if (!UUID_RE.test(uuid)) throw new Error(`CommonName "${cn}": "${uuid}" is not a UUID`);
  if (kind !== 'sidecar' && kind !== 'gateway') throw new Error(`CommonName "${cn}": kind "${kind}" is not sidecar or gateway`);
  if (!DNS_LABEL_RE.test(serviceAccount)) throw new Error(`CommonName "${cn}": service account "${serviceAccount}" is not a DNS label`);
  if (!DNS_LABEL_RE.test(namespace)) throw new Error(`CommonName "${cn}": namespace "${namespace}" is not a DNS label`);
  if (domain.join('.') !== TRUST_DOMAIN) throw new Error(`CommonName "${cn}": trust domain "${domain.join('.')}" is not ${TRUST_DOMAIN}`);
  return { uuid: uuid.toLowerCase(), kind, identity: serviceIdentity(namespace, serviceAccount), commonName: cn as CommonName };
}

/** Builds the CommonName of a proxy certificate (inverse of {@link parseCommonName}). */
export function proxyCommonName(uuid: string, kind: ProxyKind, namespace: string, serviceAccount: string): CommonName {
  return `${uuid}.${kind}.${serviceAccount}.${namespace}.${TRUST_DOMAIN}` as CommonName;
}
