import pino, { type Logger } from 'pino';
import { DEFAULT_MESH_CONFIG, MeshSnapshotBuilder } from '../catalog/build-snapshot.js';
import type { PolicyProblem } from '../catalog/problems.js';
import type { MeshSnapshot } from '../catalog/types.js';
import { ManifestsSource } from '../sources/manifests/manifests-source.js';
import { formatManifestError } from '../sources/manifests/parse.js';
import type { ManifestError, ManifestWarning } from '../sources/manifests/parse.js';
import { ObjectStore } from '../store/object-store.js';

/** Options of {@link loadMeshDirectory}: the controller's own (`trellis controller --manifests DIR`). */
export interface MeshDirectoryOptions {
  /** The manifests directory, read recursively as the controller reads it; errors name files as `path.join(dir, relativePath)`. */
  readonly dir: string;
  /** Mesh name matched against the namespaces' `openservicemesh.io/monitored-by` label (default `osm`, as `--mesh-name`). */
  readonly meshName?: string;
  /**
   * The controller's namespace, whose `osm-mesh-config` MeshConfig is read (default `osm-system`;
   * a command line passes `defaultControllerNamespace()` of `src/main.ts`, `$POD_NAMESPACE` else
   * `osm-system`, as `trellis controller` does).
   */
  readonly controllerNamespace?: string;
  /** The largest manifest file read, in bytes (default 4 MiB, as `--max-manifest-size`). */
  readonly maxFileBytes?: number;
  /** The most bytes of manifests loaded, all files together (default 64 MiB, as `--max-manifests-total-size`). */
  readonly maxTotalBytes?: number;
  /** Where the source's own log lines go (default: nowhere; the findings are returned). */
  readonly logger?: Logger;
}

/** A manifests directory loaded once: what a controller started on it would hold after its first build. */
export interface MeshDirectory {
  readonly dir: string;
  /** The store the directory was loaded into (the valid objects; the source id is `manifests:<dir>`). */
  readonly store: ObjectStore;
  /** The MeshSnapshot of generation 1, built as the controller builds it. */
  readonly snapshot: MeshSnapshot;
  /** The MeshConfig read (`osm-mesh-config` in the controller's namespace). */
  readonly meshConfig: { readonly namespace: string; readonly name: string };
  /** Documents rejected, YAML syntax errors, unreadable files, duplicates (as `ManifestsSource.errors`). */
  readonly manifestErrors: readonly ManifestError[];
  /** Unknown fields, ambiguous scalars, loopback endpoints: the objects are loaded (as `ManifestsSource.warnings`). */
  readonly manifestWarnings: readonly ManifestWarning[];
  /** The policies and objects the snapshot builder had to skip (as `MeshController.policyProblems`). */
  readonly problems: readonly PolicyProblem[];
  /** Where an object loaded comes from: its file (as errors name it) and its document's line (`ManifestsSource.locate`). */
  locate(kind: string, namespace: string | undefined, name: string): { readonly file: string; readonly line: number } | undefined;
}

/**
 * Loads the manifests directory `dir` once, with the controller's own {@link ManifestsSource}
 * (`watch: false`: the same parser, schema checks, limits and error texts), into an
 * {@link ObjectStore}, and builds its MeshSnapshot with the controller's
 * {@link MeshSnapshotBuilder} and options (mesh name, the MeshConfig of the controller's
 * namespace, permissive mode off while that MeshConfig's file has an error). No CA, no state
 * directory, no network: for `trellis validate` and `trellis explain --manifests`.
 * @throws Error `manifests directory DIR: ENOENT` (or `not a directory`) when `dir` is not a readable directory.
 */
export async function loadMeshDirectory(options: MeshDirectoryOptions): Promise<MeshDirectory> {
  const logger = options.logger ?? pino({ level: 'silent' });
  const store = new ObjectStore({ logger });
  const source = new ManifestsSource({ dir: options.dir, store, logger, watch: false, maxFileBytes: options.maxFileBytes, maxTotalBytes: options.maxTotalBytes });
  try {
    await source.start();
  } finally {
    await source.stop();
  }
  const meshConfig = { ...DEFAULT_MESH_CONFIG, namespace: options.controllerNamespace ?? DEFAULT_MESH_CONFIG.namespace };
  const unreadable = source.errorHiding('MeshConfig', meshConfig.namespace, meshConfig.name);
  const { snapshot, problems } = new MeshSnapshotBuilder().build(store, {
    meshName: options.meshName ?? 'osm',
    meshConfig,
    meshConfigUnreadable: unreadable && formatManifestError(unreadable),
    generation: 1,
  });
  return { dir: options.dir, store, snapshot, meshConfig, manifestErrors: source.errors(), manifestWarnings: source.warnings(), problems, locate: (kind, namespace, name) => source.locate(kind, namespace, name) };
}
