import type { EncodedAny } from '../../api/codec.js';
import type { ResourceName, TypeUrl } from '../../api/type-urls.js';

export type { ResourceName };

/** One resource of a proxy snapshot, encoded once. `version` is a hash of the encoded bytes. */
export interface CachedResource {
  readonly name: string;
  readonly version: string;
  readonly resource: EncodedAny;
  /**
   * Of a Listener or Cluster, when its generator said: the resources of other types it makes its
   * client fetch over ADS (RDS route configurations, an EDS cluster's ClusterLoadAssignment, SDS
   * secrets). Undefined: not said (read from the bytes when needed).
   */
  readonly references?: readonly ResourceName[];
}

/** The resources of one type in a proxy snapshot, by resource name. */
export type ResourceMap = ReadonlyMap<string, CachedResource>;

/**
 * Everything one proxy should have: for each type URL, the complete set of its resources.
 * `version` of a type is a hash over its resources' names and versions (the SotW `version_info`).
 */
export interface ProxySnapshot {
  readonly resources: ReadonlyMap<TypeUrl, ResourceMap>;
  readonly versions: ReadonlyMap<TypeUrl, string>;
}
