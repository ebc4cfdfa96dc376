/** The manifests-directory source: parse, validate and watch a directory of Kubernetes/SMI manifests. */
export { ManifestsSource, listManifestFiles, MANIFEST_EXTENSIONS } from './manifests-source.js';
export type { ManifestsSourceOptions } from './manifests-source.js';
export { parseManifests, formatManifestError, formatFieldPath } from './parse.js';
export type { ManifestError, ManifestWarning, IgnoredManifest, ParsedManifests } from './parse.js';
export { SchemaValidator, loadCrdSchemas, CRD_DIRECTORY } from './schemas.js';
export type { FieldPath, SchemaViolation } from './schemas.js';
