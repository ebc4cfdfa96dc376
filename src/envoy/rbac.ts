import type { Principal } from '../api/generated/envoy/config/rbac/v3/Principal.js';
import { identitySpiffeId } from '../catalog/names.js';
import type { ServiceIdentity } from '../proxy/types.js';

/**
 * RBAC principals for source identities: the peer certificate's URI SAN
 * (`authenticated.principal_name` exact `spiffe://cluster.local/ns/<ns>/sa/<sa>`), sorted and
 * deduplicated (Envoy `config.rbac.v3.Principal.Authenticated`).
 */
export function identityPrincipals(identities: readonly ServiceIdentity[]): Principal[] {
  return [...new Set(identities)].sort().map((id) => ({ authenticated: { principal_name: { exact: identitySpiffeId(id) } } }));
}
