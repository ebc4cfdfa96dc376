import { KubeConfig } from '@kubernetes/client-node';
import { existsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Logger } from 'pino';
import type { ObjectStore } from '../../store/object-store.js';
import type { ObjectKind } from '../../store/objects.js';
import { apiClientConfig } from '../../util/kube-api.js';
import { Reflector, type BackoffOptions } from './reflector.js';
import { WATCHED_RESOURCES, type WatchedResource } from './resources.js';

/** The label that puts a namespace in a mesh (`osm namespace add` sets it). */
export const MONITORED_BY_LABEL = 'openservicemesh.io/monitored-by';

/** Where a pod's service-account token is mounted. */
const IN_CLUSTER_TOKEN = '/var/run/secrets/kubernetes.io/serviceaccount/token';

/**
 * The API server credentials: `file` when given; else in-cluster (the pod's service account)
 * when running in a pod; else the default kubeconfig (`$KUBECONFIG`, `~/.kube/config`).
 * @throws Error when the file cannot be read or has no current cluster, or when there is no
 *   kubeconfig at all (client-node would otherwise fall back to `http://localhost:8080`).
 */
export function loadKubeConfig(file?: string): KubeConfig {
  const kc = new KubeConfig();
  if (file) kc.loadFromFile(file);
  else if (process.env.KUBERNETES_SERVICE_HOST && existsSync(IN_CLUSTER_TOKEN)) kc.loadFromCluster();
  else {
    const defaults = process.env.KUBECONFIG ? process.env.KUBECONFIG.split(path.delimiter).filter((f) => f !== '') : [path.join(os.homedir(), '.kube', 'config')];
    if (!defaults.some((f) => existsSync(f))) {
      throw new Error(`no kubeconfig: not in a pod, and no ${process.env.KUBECONFIG ? `file of $KUBECONFIG (${defaults.join(', ')})` : defaults[0]}; give --kubeconfig`);
    }
    kc.loadFromDefault();
  }
  if (!kc.getCurrentCluster()) throw new Error(`no current cluster in the kubeconfig${file ? ` ${file}` : ''}`);
  return apiClientConfig(kc);
}

/** Options of {@link KubernetesSource}. */
export interface KubernetesSourceOptions {
  store: Pick<ObjectStore, 'replaceAll' | 'upsert' | 'delete'>;
  kubeConfig: KubeConfig;
  /** Namespaces are watched with the label selector `openservicemesh.io/monitored-by=<meshName>`. */
  meshName: string;
  logger: Logger;
  backoff?: BackoffOptions;
  /** `timeoutSeconds` of each watch (default 300). */
  watchTimeoutSeconds?: number;
  /** The resource types to watch (default {@link WATCHED_RESOURCES}). */
  resources?: readonly WatchedResource[];
}

/** One kind's state, for `/debug` views and tests. */
export interface KindStatus {
  kind: ObjectKind;
  synced: boolean;
  /** The list answers 404 (an optional CRD not installed): treated as empty. */
  missing: boolean;
  resourceVersion: string;
  lastError?: string;
}

/**
 * The Kubernetes source: one {@link Reflector} (list + watch with bookmarks, relist on 410,
 * backoff on failures) per watched resource type, writing into the same store as the
 * manifests source, each kind as its own contribution (`kubernetes:<Kind>`), so a relist
 * replaces exactly that kind's objects and deletions made while the watch was down are
 * reconciled. While the API server is unreachable the store keeps what it had, so proxies keep
 * their last configuration.
 */
export class KubernetesSource {
  readonly #reflectors: Reflector[];
  readonly #logger: Logger;

  /** Creates a stopped source; call {@link KubernetesSource.start}. */
  constructor(options: KubernetesSourceOptions) {
    this.#logger = options.logger;
    const { store } = options;
    this.#reflectors = (options.resources ?? WATCHED_RESOURCES).map((resource) => {
      const sourceId = `kubernetes:${resource.kind}`;
      return new Reflector({
        kubeConfig: options.kubeConfig,
        resource,
        logger: options.logger,
        backoff: options.backoff,
        watchTimeoutSeconds: options.watchTimeoutSeconds,
        labelSelector: resource.kind === 'Namespace' ? `${MONITORED_BY_LABEL}=${options.meshName}` : undefined,
        sink: {
          replace: (objects) => store.replaceAll(sourceId, objects),
          upsert: (object) => store.upsert(sourceId, object),
          delete: (namespace, name) => store.delete(resource.kind, namespace, name),
        },
      });
    });
  }

  /** True once every kind has been listed once (an optional kind whose CRD is missing counts). */
  get synced(): boolean {
    return this.#reflectors.every((r) => r.synced);
  }

  /** Resolves once {@link KubernetesSource.synced}. */
  async whenSynced(): Promise<void> {
    await Promise.all(this.#reflectors.map((r) => r.whenSynced()));
  }

  /** Each kind's state. */
  status(): KindStatus[] {
    return this.#reflectors.map((r) => ({
      kind: r.resource.kind,
      synced: r.synced,
      missing: r.missing,
      resourceVersion: r.resourceVersion,
      ...(r.lastError ? { lastError: r.lastError } : {}),
    }));
  }

  /** The reflector of one kind (for tests and diagnostics). */
  reflector(kind: ObjectKind): Reflector | undefined {
    return this.#reflectors.find((r) => r.resource.kind === kind);
  }

  /** Starts every reflector in the background; see {@link KubernetesSource.whenSynced}. */
  start(): void {
    this.#logger.info({ kinds: this.#reflectors.length }, 'watching the Kubernetes API server');
    for (const r of this.#reflectors) r.start();
  }

  /** Stops every reflector and closes their watches. */
  async stop(): Promise<void> {
    await Promise.all(this.#reflectors.map((r) => r.stop()));
  }
}
