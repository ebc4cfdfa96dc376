import type { MeshService } from '../../catalog/types.js';

/**
 * The host names a client may use for a service port, as OSM v1.2 lists them in a virtual
 * host's `domains`: `<svc>.<ns>`, `<svc>.<ns>.svc`, `<svc>.<ns>.svc.cluster`,
 * `<svc>.<ns>.svc.cluster.local` and each ClusterIP, every one also with `:<port>`; and the
 * bare `<svc>` (with `:<port>`) only when the client is in the service's namespace, since a
 * bare name resolves there.
 */
export function serviceHostnames(svc: MeshService, clientNamespace: string | undefined): string[] {
  const base = `${svc.name}.${svc.namespace}`;
  const names = [base, `${base}.svc`, `${base}.svc.cluster`, `${base}.svc.cluster.local`, ...svc.clusterIPs];
  if (clientNamespace === svc.namespace) names.unshift(svc.name);
  return names.flatMap((n) => [n, `${n.includes(':') ? `[${n}]` : n}:${svc.port}`]);
}
