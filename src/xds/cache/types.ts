import type { EncodedAny } from '../../api/codec.js';
import type { TypeUrl } from '../../api/type-urls.js';

/** One resource of a proxy snapshot, encoded once. `version` is a hash of the encoded bytes. */
export interface CachedResource {
  readonly name: string;
  readonly version: string;
  readonly resource: EncodedAny;
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
