/** The Kubernetes source: list + watch the API server into the object store. */
export { KubernetesSource, loadKubeConfig, MONITORED_BY_LABEL } from './kubernetes-source.js';
export type { KubernetesSourceOptions, KindStatus } from './kubernetes-source.js';
export { Reflector } from './reflector.js';
export type { ReflectorOptions, ReflectorSink, ReflectorStats, BackoffOptions } from './reflector.js';
export { WATCHED_RESOURCES, apiVersionOf, collectionPath } from './resources.js';
export type { WatchedResource } from './resources.js';
export { normalizeObject, toPlainJson } from './normalize.js';
