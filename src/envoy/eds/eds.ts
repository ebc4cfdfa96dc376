import type { ClusterLoadAssignment } from '../../api/generated/envoy/config/endpoint/v3/ClusterLoadAssignment.js';
import { clusterName } from '../../catalog/names.js';
import type { MeshEndpoint, MeshService } from '../../catalog/types.js';
import type { GenerationContext, ProxyProfile } from '../context.js';
import type { NamedResource } from '../resource.js';

/**
 * The ClusterLoadAssignment of a MeshService: one locality group (zone = the namespace) with
 * an lb_endpoint per endpoint of `serviceEndpoints` (the snapshot's, by cluster name: IP literal, port, weight 1). A service without endpoints gets
 * a valid, empty assignment (Envoy `config.endpoint.v3.ClusterLoadAssignment`).
 */
export function clusterLoadAssignment(svc: MeshService, serviceEndpoints: readonly MeshEndpoint[] | undefined): ClusterLoadAssignment {
  const name = clusterName(svc);
  const endpoints = serviceEndpoints ?? [];
  if (endpoints.length === 0) return { cluster_name: name, endpoints: [] };
  return {
    cluster_name: name,
    endpoints: [
      {
        locality: { zone: svc.namespace },
        load_balancing_weight: { value: endpoints.length },
        lb_endpoints: endpoints.map((e) => ({
          endpoint: { address: { socket_address: { address: e.ip, port_value: e.port } } },
          load_balancing_weight: { value: 1 },
        })),
      },
    ],
  };
}

/**
 * The ClusterLoadAssignment of `svc` as every proxy that reaches it gets it: one object while
 * the service and its endpoints are the same (`GenerationContext.shared`).
 */
export function sharedClusterLoadAssignment(context: GenerationContext, svc: MeshService): NamedResource<ClusterLoadAssignment> {
  const name = clusterName(svc);
  return { name, resource: context.shared('ClusterLoadAssignment', name, [svc, context.snapshot.endpoints.get(name)], clusterLoadAssignment) };
}

/** EDS for one proxy: a ClusterLoadAssignment for each of its upstream (EDS) clusters, sorted by name. */
export function generateClusterLoadAssignments(context: GenerationContext, profile: ProxyProfile): NamedResource<ClusterLoadAssignment>[] {
  return context.outboundView(profile.identity).upstreams.map((svc) => sharedClusterLoadAssignment(context, svc));
}
