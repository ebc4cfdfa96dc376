import type { ServiceIdentity } from '../proxy/types.js';
import { identityParts } from '../proxy/types.js';
import type { MeshService } from './types.js';

/** `<namespace>/<name>` of a Service. */
export function serviceKey(svc: { readonly namespace: string; readonly name: string }): string {
  return `${svc.namespace}/${svc.name}`;
}

/** Name of the upstream cluster of a MeshService: `<ns>/<svc>|<targetPort>` (OSM v1.2). */
export function clusterName(svc: Pick<MeshService, 'namespace' | 'name' | 'targetPort'>): string {
  return `${svc.namespace}/${svc.name}|${svc.targetPort}`;
}

/** Name of the local (inbound) cluster of a MeshService: `<ns>/<svc>|<targetPort>|local` (OSM v1.2). */
export function localClusterName(svc: Pick<MeshService, 'namespace' | 'name' | 'targetPort'>): string {
  return `${clusterName(svc)}|local`;
}

/** The FQDN of a Service, `<svc>.<ns>.svc.cluster.local`: the SNI of its upstream TLS. */
export function serviceFqdn(svc: { readonly namespace: string; readonly name: string }): string {
  return `${svc.name}.${svc.namespace}.svc.cluster.local`;
}

/**
 * SDS name of the proxy's own service certificate and key, `service-cert`: one name for every
 * proxy (as Istio's `default`), its content the certificate of the proxy's own identity (a
 * snapshot is per proxy; a proxy gets only its own identity's). So nothing but that Secret names
 * the identity on the outbound side, and an upstream Cluster is the same bytes for every proxy
 * reaching the service. (OSM v1.2 names it `service-cert:<ns>/<sa>`.)
 */
export const SERVICE_CERT_SECRET_NAME = 'service-cert';

/**
 * SDS name of the trust anchor of every upstream TLS context, `root-cert-for-mtls-outbound`: the
 * mesh root alone, one Secret for all upstream services. (OSM v1.2 sends one
 * `root-cert-for-mtls-outbound:<ns>/<svc>` per upstream service, each repeating the root and
 * holding the service's SAN matchers; Trellis puts those matchers in the cluster's
 * `combined_validation_context`, as Istio does, so a proxy reaching S services gets one root.)
 */
export const OUTBOUND_ROOT_CERT_SECRET_NAME = 'root-cert-for-mtls-outbound';

/** SDS name of the validation context for downstream mTLS: `root-cert-for-mtls-inbound:<ns>/<sa>`. */
export function inboundRootCertSecretName(identity: ServiceIdentity): string {
  return `root-cert-for-mtls-inbound:${identity}`;
}

/** The SPIFFE ID of an identity, `spiffe://cluster.local/ns/<ns>/sa/<sa>` (its service certificate's URI SAN). */
export function identitySpiffeId(identity: ServiceIdentity): string {
  const { namespace, serviceAccount } = identityParts(identity);
  return `spiffe://cluster.local/ns/${namespace}/sa/${serviceAccount}`;
}

/**
 * SDS name of the validation context for client certificates of HTTPS ingress:
 * `root-cert-https:<ns>/<sa>` (OSM's `root-cert-https` secret type). It holds the mesh root
 * only; which client may come in is decided by RBAC on the IngressBackend's principals.
 */
export function ingressRootCertSecretName(identity: ServiceIdentity): string {
  return `root-cert-https:${identity}`;
}
