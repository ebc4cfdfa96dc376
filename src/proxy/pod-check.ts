import type { Pod } from '../store/objects.js';
import type { StoreReader } from '../store/store.js';
import { identityParts, type Proxy } from './types.js';

/** The pod label holding the UUID of the proxy that runs in it (as OSM's sidecar injector sets it). */
export const PROXY_UUID_LABEL = 'osm-proxy-uuid';

/**
 * Why a proxy was refused (the `reason` label of `trellis_proxy_refusals_total`):
 * - `no_pod`: no pod in the certificate's namespace carries the proxy's UUID label;
 * - `multiple_pods`: more than one does (the UUID is ambiguous);
 * - `pod_not_running`: the pod is not in phase `Running`;
 * - `service_account_mismatch`: the pod runs as another service account than the certificate's.
 */
export type PodCheckFailure = 'no_pod' | 'multiple_pods' | 'pod_not_running' | 'service_account_mismatch';

/** The outcome of {@link checkProxyPod}. */
export type PodCheckResult =
  | { readonly ok: true; readonly pod: Pod }
  | { readonly ok: false; readonly reason: PodCheckFailure; readonly message: string };

/**
 * True for failures that the informer catching up may cure: the pod's ADD (or its phase moving to
 * `Running`) can reach the store after the proxy in it has already connected.
 */
export function isRetryablePodCheckFailure(reason: PodCheckFailure): boolean {
  return reason === 'no_pod' || reason === 'pod_not_running';
}

/**
 * Checks that a connecting proxy is who its certificate says, against the pods in the store
 * (OSM's `GetPodFromCertificate` rule): exactly one pod in the certificate's namespace carries
 * the label {@link PROXY_UUID_LABEL} = the certificate's UUID, that pod is `Running`, and its
 * `spec.serviceAccountName` (`default` when unset, as Kubernetes defaults it) is the
 * certificate's service account. Pure: reads the store only.
 */
export function checkProxyPod(store: StoreReader, proxy: Proxy): PodCheckResult {
  const { namespace, serviceAccount } = identityParts(proxy.identity);
  const pods = store
    .list<Pod>('Pod', namespace)
    .filter((p) => p.metadata.labels?.[PROXY_UUID_LABEL]?.toLowerCase() === proxy.uuid.toLowerCase());
  if (pods.length === 0) {
    return { ok: false, reason: 'no_pod', message: `no pod in namespace ${namespace} has label ${PROXY_UUID_LABEL}=${proxy.uuid}` };
  }
  if (pods.length > 1) {
    const names = pods.map((p) => p.metadata.name).join(', ');
    return { ok: false, reason: 'multiple_pods', message: `pods ${names} in namespace ${namespace} all have label ${PROXY_UUID_LABEL}=${proxy.uuid}` };
  }
  const pod = pods[0];
  const podAccount = pod.spec?.serviceAccountName || 'default';
  if (podAccount !== serviceAccount) {
    return {
      ok: false,
      reason: 'service_account_mismatch',
      message: `pod ${namespace}/${pod.metadata.name} runs as service account ${podAccount}, the certificate says ${serviceAccount}`,
    };
  }
  const phase = pod.status?.phase;
  if (phase !== 'Running') {
    return { ok: false, reason: 'pod_not_running', message: `pod ${namespace}/${pod.metadata.name} is ${phase ?? 'without a phase'}, not Running` };
  }
  return { ok: true, pod };
}
