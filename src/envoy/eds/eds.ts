import type { ClusterLoadAssignment } from '../../api/generated/envoy/config/endpoint/v3/ClusterLoadAssignment.js';
import { clusterName } from '../../catalog/names.js';
import { meshServicePorts } from '../../catalog/traffic-policy.js';
import type { MeshEndpoint, MeshService } from '../../catalog/types.js';
import type { GenerationContext, ProxyProfile } from '../context.js';
import type { NamedResource } from '../resource.js';
import { meshChangeKind, type PushChange } from '../push-change.js';

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

/**
 * Whether `change` makes a sidecar's ClusterLoadAssignments regenerate (Istio's `cdsNeedsPush` idea):
 * for a change of endpoints and any change but one that only re-weights TrafficSplits (RDS) or
 * only rotates the certificate (SDS).
 */
export function clusterLoadAssignmentsNeedPush(change: PushChange): boolean {
  const kind = meshChangeKind(change);
  return kind === 'endpoints' || kind === 'other';
}

/**
 * The ClusterLoadAssignments `change` alters, as every proxy that has them gets them, when it
 * changes endpoints only (`onlyEndpointsChanged`): those of every port of the changed services.
 * A proxy's other ClusterLoadAssignments are the same as before. Undefined for any other change
 * (a proxy's ClusterLoadAssignments are then generated again, all of them).
 * @param context the generation context of `change.after`.
 */
export function clusterLoadAssignmentsChangedBy(change: PushChange, context: GenerationContext): NamedResource<ClusterLoadAssignment>[] | undefined {
  if (change.change === 'all' || meshChangeKind(change) !== 'endpoints') return undefined;
  const out: NamedResource<ClusterLoadAssignment>[] = [];
  for (const key of change.change.services) {
    const [namespace, name] = key.split('/');
    for (const svc of meshServicePorts(change.after, namespace, name)) out.push(sharedClusterLoadAssignment(context, svc));
  }
  return out;
}
