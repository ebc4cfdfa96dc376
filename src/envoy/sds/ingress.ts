import type { Secret } from '../../api/generated/envoy/extensions/transport_sockets/tls/v3/Secret.js';
import { ingressRootCertSecretName } from '../../catalog/names.js';
import type { GenerationContext, ProxyProfile } from '../context.js';
import { ingressChainPlans } from '../ingress-plan.js';
import type { NamedResource } from '../resource.js';

/**
 * SDS for HTTPS ingress: `root-cert-https:<ns>/<sa>` (the mesh root as trusted CA, no SAN
 * pinning: the ingress chain's RBAC checks the principals) when the proxy has an https ingress
 * chain that validates client certificates; else nothing.
 * @param certs the mesh root (`caPem`), as in the proxy's other validation contexts.
 */
export function generateIngressSecrets(context: GenerationContext, profile: ProxyProfile, certs: { readonly caPem: string }): NamedResource<Secret>[] {
  const needed = ingressChainPlans(context, profile).some((p) => p.protocol === 'https' && !p.skipClientCertValidation);
  if (!needed) return [];
  const name = ingressRootCertSecretName(profile.identity);
  return [{ name, resource: { name, validation_context: { trusted_ca: { inline_string: certs.caPem } } } }];
}
