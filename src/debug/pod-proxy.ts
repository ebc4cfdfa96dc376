/**
 * Which proxy runs in a pod, from the controller's store (`/debug/pod-proxy`, `trellis proxy
 * config POD -n NS`): in either mode, without a kubeconfig on the caller's side.
 */
import { PROXY_UUID_LABEL } from '../proxy/pod-check.js';
import { serviceIdentity, type Proxy } from '../proxy/types.js';
import type { Pod } from '../store/objects.js';
import type { StoreReader } from '../store/store.js';

/** The proxy of a pod, and how it was found: the pod's {@link PROXY_UUID_LABEL} label, or the one connected proxy of its identity. */
export interface PodProxy {
  readonly namespace: string;
  readonly pod: string;
  readonly identity: string;
  readonly uuid: string;
  readonly via: 'label' | 'identity';
}

/** Why a pod's proxy cannot be named: HTTP status (404 unknown, 409 ambiguous) and message. */
export interface PodProxyError {
  readonly status: 404 | 409;
  readonly error: string;
}

/**
 * The proxy of pod `namespace`/`name` in `store`: the UUID of its `osm-proxy-uuid` label (as the
 * sidecar injector sets it); a pod without one (manifests mode, where proxies are bootstrapped by
 * hand) is matched to the connected proxy of its identity (`<ns>/<serviceAccountName or default>`)
 * when exactly one is connected; several are an error listing them (never a guess).
 */
export function podProxy(store: StoreReader, connected: readonly Proxy[], namespace: string, name: string): PodProxy | PodProxyError {
  const pod = store.get<Pod>('Pod', namespace, name);
  if (!pod) return { status: 404, error: `pod ${namespace}/${name} is not in the controller's store` };
  const identity = serviceIdentity(namespace, pod.spec?.serviceAccountName || 'default');
  const label = pod.metadata.labels?.[PROXY_UUID_LABEL];
  if (label) return { namespace, pod: name, identity, uuid: label, via: 'label' };
  const candidates = connected.filter((p) => p.identity === identity).map((p) => p.uuid).sort();
  if (candidates.length === 1) return { namespace, pod: name, identity, uuid: candidates[0], via: 'identity' };
  if (candidates.length === 0) return { status: 404, error: `pod ${namespace}/${name} has no ${PROXY_UUID_LABEL} label and no proxy of its identity ${identity} is connected` };
  const shown = candidates.slice(0, 10).join(', ') + (candidates.length > 10 ? `, … (${candidates.length})` : '');
  return { status: 409, error: `pod ${namespace}/${name} has no ${PROXY_UUID_LABEL} label and ${candidates.length} proxies of its identity ${identity} are connected (${shown}): give a UUID` };
}
