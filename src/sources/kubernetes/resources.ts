import type { ObjectKind } from '../../store/objects.js';

/** A Kubernetes resource type the source lists and watches. */
export interface WatchedResource {
  /** The store kind its objects become. */
  readonly kind: ObjectKind;
  /** API group; `''` for core. */
  readonly group: string;
  readonly version: string;
  /** URL name, e.g. `endpointslices`. */
  readonly plural: string;
  readonly namespaced: boolean;
  /**
   * Served by a CustomResourceDefinition that may not be installed: a 404 on list is logged
   * and the kind is treated as empty (it is retried at the longest backoff, so installing the
   * CRD later is picked up).
   */
  readonly optional?: boolean;
}

/**
 * Every resource type the Kubernetes source watches, one per store kind (see OBJECT_KINDS).
 * SMI and OSM versions are the ones OSM v1.2 serves.
 */
export const WATCHED_RESOURCES: readonly WatchedResource[] = [
  { kind: 'Namespace', group: '', version: 'v1', plural: 'namespaces', namespaced: false },
  { kind: 'Service', group: '', version: 'v1', plural: 'services', namespaced: true },
  { kind: 'Endpoints', group: '', version: 'v1', plural: 'endpoints', namespaced: true },
  { kind: 'EndpointSlice', group: 'discovery.k8s.io', version: 'v1', plural: 'endpointslices', namespaced: true },
  { kind: 'Pod', group: '', version: 'v1', plural: 'pods', namespaced: true },
  { kind: 'ServiceAccount', group: '', version: 'v1', plural: 'serviceaccounts', namespaced: true },
  { kind: 'Deployment', group: 'apps', version: 'v1', plural: 'deployments', namespaced: true },
  { kind: 'Ingress', group: 'networking.k8s.io', version: 'v1', plural: 'ingresses', namespaced: true },
  { kind: 'TrafficTarget', group: 'access.smi-spec.io', version: 'v1alpha3', plural: 'traffictargets', namespaced: true, optional: true },
  { kind: 'HTTPRouteGroup', group: 'specs.smi-spec.io', version: 'v1alpha4', plural: 'httproutegroups', namespaced: true, optional: true },
  { kind: 'TCPRoute', group: 'specs.smi-spec.io', version: 'v1alpha4', plural: 'tcproutes', namespaced: true, optional: true },
  { kind: 'TrafficSplit', group: 'split.smi-spec.io', version: 'v1alpha2', plural: 'trafficsplits', namespaced: true, optional: true },
  { kind: 'MeshConfig', group: 'config.openservicemesh.io', version: 'v1alpha2', plural: 'meshconfigs', namespaced: true, optional: true },
  { kind: 'IngressBackend', group: 'policy.openservicemesh.io', version: 'v1alpha1', plural: 'ingressbackends', namespaced: true, optional: true },
  { kind: 'Egress', group: 'policy.openservicemesh.io', version: 'v1alpha1', plural: 'egresses', namespaced: true, optional: true },
  { kind: 'Retry', group: 'policy.openservicemesh.io', version: 'v1alpha1', plural: 'retries', namespaced: true, optional: true },
  { kind: 'UpstreamTrafficSetting', group: 'policy.openservicemesh.io', version: 'v1alpha1', plural: 'upstreamtrafficsettings', namespaced: true, optional: true },
];

/** `v1` or `<group>/<version>`. */
export function apiVersionOf(resource: WatchedResource): string {
  return resource.group === '' ? resource.version : `${resource.group}/${resource.version}`;
}

/** The cluster-wide collection path: `/api/v1/pods`, `/apis/apps/v1/deployments`. */
export function collectionPath(resource: WatchedResource): string {
  return resource.group === '' ? `/api/${resource.version}/${resource.plural}` : `/apis/${resource.group}/${resource.version}/${resource.plural}`;
}
