/**
 * The injector's Kubernetes API calls: read a pod's namespace and the MeshConfig, create a
 * pod's bootstrap Secret, write the CA bundle into the MutatingWebhookConfiguration. Each is a
 * single request (no informer: an admission is rare next to the API server's own work, and a
 * fresh read never injects from a stale MeshConfig).
 */
import { AdmissionregistrationV1Api, CoreV1Api, CustomObjectsApi, PatchStrategy, setHeaderOptions, type KubeConfig, type V1Secret } from '@kubernetes/client-node';
import type { MeshConfig } from '../store/objects.js';
import { apiClientConfig, apiErrorMessage, apiStatusCode } from '../util/kube-api.js';
import type { NamespaceMeta } from './inject.js';

/** What the webhook needs from the cluster (see {@link kubernetesCluster}). */
export interface InjectorCluster {
  /** The namespace's labels and annotations; undefined when it does not exist. */
  readNamespace(name: string): Promise<NamespaceMeta | undefined>;
  /** The mesh's MeshConfig; undefined when there is none (OSM's defaults apply). */
  readMeshConfig(): Promise<MeshConfig | undefined>;
  /** Creates a Secret. @throws Error naming it when the API refuses. */
  createSecret(secret: V1Secret): Promise<void>;
}

/** Where the MeshConfig is. */
export interface MeshConfigRef {
  readonly namespace: string;
  readonly name: string;
}

/** The {@link InjectorCluster} of a kubeconfig. */
export function kubernetesCluster(kubeConfig: KubeConfig, meshConfig: MeshConfigRef): InjectorCluster {
  const config = apiClientConfig(kubeConfig);
  const core = config.makeApiClient(CoreV1Api);
  const custom = config.makeApiClient(CustomObjectsApi);
  return {
    async readNamespace(name) {
      try {
        const ns = await core.readNamespace({ name });
        return { name, labels: ns.metadata?.labels, annotations: ns.metadata?.annotations };
      } catch (err) {
        if (apiStatusCode(err) === 404) return undefined;
        throw new Error(`cannot read namespace ${name}: ${apiErrorMessage(err)}`);
      }
    },
    async readMeshConfig() {
      try {
        return (await custom.getNamespacedCustomObject({
          group: 'config.openservicemesh.io',
          version: 'v1alpha2',
          namespace: meshConfig.namespace,
          plural: 'meshconfigs',
          name: meshConfig.name,
        })) as MeshConfig;
      } catch (err) {
        if (apiStatusCode(err) === 404) return undefined;
        throw new Error(`cannot read MeshConfig ${meshConfig.namespace}/${meshConfig.name}: ${apiErrorMessage(err)}`);
      }
    },
    async createSecret(secret) {
      const namespace = secret.metadata?.namespace ?? '';
      try {
        await core.createNamespacedSecret({ namespace, body: secret });
      } catch (err) {
        throw new Error(`cannot create Secret ${namespace}/${secret.metadata?.name ?? ''}: ${apiErrorMessage(err)}`);
      }
    },
  };
}

/**
 * Writes `caPem` (base64) as `clientConfig.caBundle` of every webhook of the
 * MutatingWebhookConfiguration `name` (a JSON patch, each replace guarded by a `test` of the
 * webhook's name, so a concurrent edit of the list fails instead of patching the wrong one).
 * Nothing is sent when every bundle is already `caPem`.
 * @returns how many webhooks were changed.
 * @throws Error naming the configuration when it does not exist (deploy/30-injector.yaml ships
 *   it), has no webhooks, or the API refuses.
 */
export async function writeWebhookCaBundle(kubeConfig: KubeConfig, name: string, caPem: string): Promise<number> {
  const api = apiClientConfig(kubeConfig).makeApiClient(AdmissionregistrationV1Api);
  let current;
  try {
    current = await api.readMutatingWebhookConfiguration({ name });
  } catch (err) {
    throw new Error(
      apiStatusCode(err) === 404
        ? `MutatingWebhookConfiguration ${name} not found: apply deploy/30-injector.yaml (or give --webhook-config-name)`
        : `cannot read MutatingWebhookConfiguration ${name}: ${apiErrorMessage(err)}`,
    );
  }
  const webhooks = current.webhooks ?? [];
  if (webhooks.length === 0) throw new Error(`MutatingWebhookConfiguration ${name} has no webhooks`);
  const bundle = Buffer.from(caPem).toString('base64');
  const ops = webhooks.flatMap((w, i) =>
    w.clientConfig.caBundle === bundle
      ? []
      : [
          { op: 'test', path: `/webhooks/${i}/name`, value: w.name },
          { op: 'add', path: `/webhooks/${i}/clientConfig/caBundle`, value: bundle },
        ],
  );
  if (ops.length === 0) return 0;
  try {
    await api.patchMutatingWebhookConfiguration({ name, body: ops }, setHeaderOptions('Content-Type', PatchStrategy.JsonPatch));
  } catch (err) {
    throw new Error(`cannot write the CA bundle into MutatingWebhookConfiguration ${name}: ${apiErrorMessage(err)}`);
  }
  return ops.length / 2;
}
