/** The manifests-directory source: parse, validate and watch a directory of Kubernetes/SMI manifests. */
export { ManifestsSource, listManifestFiles, MANIFEST_EXTENSIONS } from './manifests-source.js';
export type { ManifestsSourceOptions } from './manifests-source.js';
export { parseManifests, parseManifestSteps, formatManifestError, formatFieldPath, MAX_NESTING_DEPTH, MAX_DOCUMENT_NODES, MAX_DOCUMENT_TOKENS } from './parse.js';
export { readManifestFile, readSettledManifestFile, DEFAULT_MAX_MANIFEST_BYTES, DEFAULT_MAX_MANIFESTS_TOTAL_BYTES } from './read-file.js';
export type { ManifestRead } from './read-file.js';
export type { ManifestError, ManifestWarning, IgnoredManifest, ParsedManifests } from './parse.js';
export { SchemaValidator, loadCrdSchemas, CRD_DIRECTORY } from './schemas.js';
export type { FieldPath, SchemaViolation } from './schemas.js';
