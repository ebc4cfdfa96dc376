/**
 * The injector's Kubernetes API calls: read a pod's namespace and the MeshConfig, create a
 * pod's bootstrap Secret, write the CA bundle into the MutatingWebhookConfiguration. Each is a
 * single request (no informer: an admission is rare next to the API server's own work, and a
 * fresh read never injects from a stale MeshConfig).
 */
import { AdmissionregistrationV1Api, CoreV1Api, CustomObjectsApi, PatchStrategy, setHeaderOptions, type KubeConfig, type V1Secret } from '@kubernetes/client-node';
import { PROXY_UUID_LABEL } from '../proxy/pod-check.js';
import type { MeshConfig } from '../store/objects.js';
import { apiClientConfig, apiErrorMessage, apiStatusCode } from '../util/kube-api.js';
import type { NamespaceMeta } from './inject.js';
import type { SecretCreation } from './secret-gate.js';

/** What the webhook needs from the cluster (see {@link kubernetesCluster}). */
export interface InjectorCluster {
  /** The namespace's labels and annotations; undefined when it does not exist. */
  readNamespace(name: string): Promise<NamespaceMeta | undefined>;
  /** The mesh's MeshConfig; undefined when there is none (OSM's defaults apply). */
  readMeshConfig(): Promise<MeshConfig | undefined>;
  /**
   * Creates a Secret.
   * @returns `exists` when a Secret of its name is there already (HTTP 409: the same admission
   *   delivered again, its name carries the request's proxy UUID), else `created`.
   * @throws Error naming it when the API refuses.
   */
  createSecret(secret: V1Secret): Promise<SecretCreation>;
  /**
   * The pods of `namespace` labelled {@link PROXY_UUID_LABEL} with one of `uuids` (at most
   * {@link MAX_UUIDS_PER_LIST} per call): each one's UUID, name and UID.
   * @throws Error naming the namespace when the API refuses.
   */
  listInjectedPods(namespace: string, uuids: readonly string[]): Promise<InjectedPod[]>;
  /**
   * Makes `owner` the only owner (`metadata.ownerReferences`) of the bootstrap Secret `name`,
   * if it still carries the label {@link PROXY_UUID_LABEL}=`uuid` (a JSON patch with a `test`).
   * @returns false when the Secret is gone (404).
   * @throws Error naming the Secret when the API refuses (a failed `test`: 422).
   */
  setSecretOwner(namespace: string, name: string, uuid: string, owner: InjectedPod): Promise<boolean>;
  /** Deletes the Secret `name`; a Secret already gone is no error. @throws Error naming it when the API refuses. */
  deleteSecret(namespace: string, name: string): Promise<void>;
}

/** A pod the injector injected, as {@link InjectorCluster.listInjectedPods} finds it. */
export interface InjectedPod {
  readonly uuid: string;
  readonly name: string;
  readonly uid: string;
}

/** UUIDs per `listInjectedPods` request at most (a label selector `osm-proxy-uuid in (…)`; 50 UUIDs are about 1.9 KB of query). */
export const MAX_UUIDS_PER_LIST = 50;

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
        return 'created';
      } catch (err) {
        if (apiStatusCode(err) === 409) return 'exists';
        throw new Error(`cannot create Secret ${namespace}/${secret.metadata?.name ?? ''}: ${apiErrorMessage(err)}`);
      }
    },
    async listInjectedPods(namespace, uuids) {
      if (uuids.length === 0) return [];
      if (uuids.length > MAX_UUIDS_PER_LIST) throw new Error(`listInjectedPods: ${uuids.length} UUIDs, at most ${MAX_UUIDS_PER_LIST} per request`);
      let list;
      try {
        list = await core.listNamespacedPod({ namespace, labelSelector: `${PROXY_UUID_LABEL} in (${uuids.join(',')})`, limit: uuids.length + 1 });
      } catch (err) {
        throw new Error(`cannot list the injected pods of namespace ${namespace}: ${apiErrorMessage(err)}`);
      }
      return list.items.flatMap((p) => {
        const uuid = p.metadata?.labels?.[PROXY_UUID_LABEL];
        return uuid && p.metadata?.name && p.metadata.uid ? [{ uuid, name: p.metadata.name, uid: p.metadata.uid }] : [];
      });
    },
    async setSecretOwner(namespace, name, uuid, owner) {
      const ownerReferences = [{ apiVersion: 'v1', kind: 'Pod', name: owner.name, uid: owner.uid }];
      const body = [
        { op: 'test', path: `/metadata/labels/${PROXY_UUID_LABEL}`, value: uuid },
        { op: 'add', path: '/metadata/ownerReferences', value: ownerReferences },
      ];
      try {
        await core.patchNamespacedSecret({ namespace, name, body }, setHeaderOptions('Content-Type', PatchStrategy.JsonPatch));
        return true;
      } catch (err) {
        if (apiStatusCode(err) === 404) return false;
        throw new Error(`cannot make Pod ${namespace}/${owner.name} the owner of Secret ${namespace}/${name}: ${apiErrorMessage(err)}`);
      }
    },
    async deleteSecret(namespace, name) {
      try {
        await core.deleteNamespacedSecret({ namespace, name });
      } catch (err) {
        if (apiStatusCode(err) === 404) return;
        throw new Error(`cannot delete Secret ${namespace}/${name}: ${apiErrorMessage(err)}`);
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
