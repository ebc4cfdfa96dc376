import type { ClusterLoadAssignment } from '../../api/generated/envoy/config/endpoint/v3/ClusterLoadAssignment.js';
import { clusterName } from '../../catalog/names.js';
import { meshServicePorts } from '../../catalog/traffic-policy.js';
import type { MeshService, MeshSnapshot } from '../../catalog/types.js';
import type { Proxy } from '../../proxy/types.js';
import { outboundView } from '../outbound.js';
import type { NamedResource } from '../resource.js';
import { sharedResource } from '../shared-resources.js';
import { meshChangeKind, type PushChange } from '../push-change.js';

/**
 * The ClusterLoadAssignment of a MeshService: one locality group (zone = the namespace) with
 * an lb_endpoint per endpoint (IP literal, port, weight 1). A service without endpoints gets
 * a valid, empty assignment (Envoy `config.endpoint.v3.ClusterLoadAssignment`).
 */
export function clusterLoadAssignment(snapshot: MeshSnapshot, svc: MeshService): ClusterLoadAssignment {
  const name = clusterName(svc);
  const endpoints = snapshot.endpoints.get(name) ?? [];
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
 * the service and its endpoints are the same ({@link sharedResource}).
 */
export function sharedClusterLoadAssignment(snapshot: MeshSnapshot, svc: MeshService): NamedResource<ClusterLoadAssignment> {
  const name = clusterName(svc);
  return { name, resource: sharedResource(snapshot, `ClusterLoadAssignment ${name}`, [svc, snapshot.endpoints.get(name)], () => clusterLoadAssignment(snapshot, svc)) };
}

/** EDS for one proxy: a ClusterLoadAssignment for each of its upstream (EDS) clusters, sorted by name. */
export function generateClusterLoadAssignments(snapshot: MeshSnapshot, proxy: Proxy): NamedResource<ClusterLoadAssignment>[] {
  return outboundView(snapshot, proxy.identity).upstreams.map((svc) => sharedClusterLoadAssignment(snapshot, svc));
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
 */
export function clusterLoadAssignmentsChangedBy(change: PushChange): NamedResource<ClusterLoadAssignment>[] | undefined {
  if (change.change === 'all' || meshChangeKind(change) !== 'endpoints') return undefined;
  const out: NamedResource<ClusterLoadAssignment>[] = [];
  for (const key of change.change.services) {
    const [namespace, name] = key.split('/');
    for (const svc of meshServicePorts(change.after, namespace, name)) out.push(sharedClusterLoadAssignment(change.after, svc));
  }
  return out;
}
