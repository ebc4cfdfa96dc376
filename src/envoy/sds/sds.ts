import type { Secret } from '../../api/generated/envoy/extensions/transport_sockets/tls/v3/Secret.js';
import { OUTBOUND_ROOT_CERT_SECRET_NAME, SERVICE_CERT_SECRET_NAME, inboundRootCertSecretName } from '../../catalog/names.js';
import { inboundTrafficTargets } from '../../catalog/traffic-policy.js';
import type { ServiceIdentity } from '../../proxy/types.js';
import type { GenerationContext, ProxyProfile } from '../context.js';
import type { NamedResource } from '../resource.js';
import { sanMatchers } from '../tls.js';
import { generateIngressSecrets } from './ingress.js';
import { byName } from '../../util/order.js';
import { meshChangeKind, type PushChange } from '../push-change.js';

/** The certificate material SDS serves to one proxy: its identity's service certificate and the mesh root. */
export interface ProxyCertificates {
  /** PEM certificate chain of the proxy identity's service certificate. */
  readonly certChainPem: string;
  /** PEM private key of that certificate. */
  readonly privateKeyPem: string;
  /** PEM of the mesh root CA, the trust anchor of every validation context. */
  readonly caPem: string;
}

/**
 * SDS for one proxy (Envoy `extensions.transport_sockets.tls.v3.Secret`, OSM v1.2 names):
 * - `service-cert`: the proxy identity's certificate and key (one name for every proxy, so no
 *   upstream Cluster names the identity; a proxy's snapshot holds only its own identity's);
 * - `root-cert-for-mtls-inbound:<ns>/<sa>`: the mesh root, and in SMI mode URI SAN matchers
 *   for the identities TrafficTargets allow in (none allowed → the root alone, RBAC denies);
 * - `root-cert-for-mtls-outbound`, when the proxy reaches any service: the mesh root alone, the
 *   trust anchor of every upstream cluster's TLS context, which names the identities backing its
 *   service itself (`combined_validation_context`, see `upstreamTlsContext`; OSM v1.2 sends one
 *   `root-cert-for-mtls-outbound:<ns>/<svc>` with the root and those SANs per upstream service);
 * - `root-cert-https:<ns>/<sa>` for HTTPS ingress with client certificates ({@link generateIngressSecrets}).
 * Sorted by name.
 */
export function generateSecrets(context: GenerationContext, profile: ProxyProfile, certs: ProxyCertificates): NamedResource<Secret>[] {
  const { snapshot } = context;
  const out: NamedResource<Secret>[] = [];
  // Per identity, and unchanged until the certificate rotates: one object across snapshots,
  // remembered under the identity (one name for all, so identities do not replace one another's).
  out.push({
    name: SERVICE_CERT_SECRET_NAME,
    resource: context.shared('Secret', profile.identity, [SERVICE_CERT_SECRET_NAME, certs.certChainPem, certs.privateKeyPem], (name, certChainPem, privateKeyPem) => ({
      name,
      tls_certificate: {
        certificate_chain: { inline_string: certChainPem },
        private_key: { inline_string: privateKeyPem },
      },
    })),
  });
  const inbound = inboundRootCertSecretName(profile.identity);
  const allowedIn = snapshot.settings.permissiveTrafficPolicyMode
    ? []
    : inboundTrafficTargets(snapshot, profile.identity).flatMap((tt) => tt.sources);
  const allowedSans = [...new Set(allowedIn)].sort();
  out.push({
    name: inbound,
    // The SANs as one string (identities `<ns>/<sa>` hold no space): compared by value.
    resource: context.shared('Secret', inbound, [inbound, certs.caPem, allowedSans.join(' ')], (name, caPem, sans) => ({
      name,
      validation_context: {
        trusted_ca: { inline_string: caPem },
        ...(sans !== '' ? { match_typed_subject_alt_names: sanMatchers(sans.split(' ') as ServiceIdentity[]) } : {}),
      },
    })),
  });
  if (context.outboundView(profile.identity).upstreams.length > 0) {
    // The same for every proxy (for one mesh root): one shared object.
    const name = OUTBOUND_ROOT_CERT_SECRET_NAME;
    const resource = context.shared('Secret', name, [name, certs.caPem], (secretName, caPem) => ({ name: secretName, validation_context: { trusted_ca: { inline_string: caPem } } }));
    out.push({ name, resource });
  }
  out.push(...generateIngressSecrets(context, profile, certs));
  return out.sort(byName);
}

/**
 * Whether `change` makes a sidecar's Secrets regenerate (Istio's `cdsNeedsPush` idea):
 * when the identity's service certificate rotated, and for any change but one that only moves
 * endpoints (EDS) or only re-weights TrafficSplits (RDS): trust bundles follow identities and TrafficTargets.
 */
export function secretsNeedPush(change: PushChange): boolean {
  return change.certificateRotated || meshChangeKind(change) === 'other';
}
