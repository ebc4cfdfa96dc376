/**
 * The generated proto types the ADS server speaks (`envoy.service.discovery.v3`), in one place.
 * Written as `import()` type expressions: they are erased at compile time, and the repository's
 * `no-restricted-imports` lint pattern (meant to force `import type` on generated files)
 * flags every import declaration of a generated path, type-only or not.
 */

/** A `DiscoveryRequest` as received (proto-loader output, snake_case fields, all optional). */
export type DiscoveryRequest__Output =
  import('../../api/generated/envoy/service/discovery/v3/DiscoveryRequest.js').DiscoveryRequest__Output;

/** A `DiscoveryRequest` as sent (proto-loader input). */
export type DiscoveryRequest = import('../../api/generated/envoy/service/discovery/v3/DiscoveryRequest.js').DiscoveryRequest;

/** A `DiscoveryResponse` as sent: `resources` may be pre-encoded `{type_url, value: Buffer}` Anys. */
export type DiscoveryResponse = import('../../api/generated/envoy/service/discovery/v3/DiscoveryResponse.js').DiscoveryResponse;

/** A `DiscoveryResponse` as received. */
export type DiscoveryResponse__Output =
  import('../../api/generated/envoy/service/discovery/v3/DiscoveryResponse.js').DiscoveryResponse__Output;

/** A `DeltaDiscoveryRequest` as received (incremental xDS; proto-loader output, snake_case fields, all optional). */
export type DeltaDiscoveryRequest__Output =
  import('../../api/generated/envoy/service/discovery/v3/DeltaDiscoveryRequest.js').DeltaDiscoveryRequest__Output;

/** A `DeltaDiscoveryRequest` as sent (proto-loader input). */
export type DeltaDiscoveryRequest =
  import('../../api/generated/envoy/service/discovery/v3/DeltaDiscoveryRequest.js').DeltaDiscoveryRequest;

/** A `DeltaDiscoveryResponse` as sent: each `Resource.resource` may be a pre-encoded `{type_url, value: Buffer}` Any. */
export type DeltaDiscoveryResponse =
  import('../../api/generated/envoy/service/discovery/v3/DeltaDiscoveryResponse.js').DeltaDiscoveryResponse;

/** A `DeltaDiscoveryResponse` as received. */
export type DeltaDiscoveryResponse__Output =
  import('../../api/generated/envoy/service/discovery/v3/DeltaDiscoveryResponse.js').DeltaDiscoveryResponse__Output;
