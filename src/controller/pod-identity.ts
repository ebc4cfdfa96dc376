import type { Timers } from '../messaging/debouncer.js';
import { checkProxyPod, isRetryablePodCheckFailure, type PodCheckResult } from '../proxy/pod-check.js';
import type { Proxy } from '../proxy/types.js';
import type { ObjectChange, StoreReader } from '../store/store.js';

/**
 * How long a connecting proxy whose pod is not (yet) in the store, or not yet `Running`, is held
 * before it is refused, in ms. The pod informer and the proxy race: Envoy can connect before the
 * pod's ADD event (or its move to `Running`) reaches the store. OSM refuses at once and relies on
 * Envoy reconnecting; holding the stream a few seconds instead avoids a refusal (and a reconnect
 * back-off) for the common case, and still refuses a proxy that has no pod.
 */
export const DEFAULT_POD_IDENTITY_GRACE_MS = 5_000;

/** Options of {@link awaitProxyPod}. */
export interface AwaitProxyPodOptions {
  /** Longest wait for a retryable failure to clear, in ms; 0 checks once. */
  readonly graceMs: number;
  readonly timers: Timers;
}

/**
 * Checks `proxy` against the pods in the store ({@link checkProxyPod}); while the failure is one
 * the store catching up may cure (`no_pod`, `pod_not_running`), checks again on every store
 * change, for at most `graceMs`. A definite failure (`service_account_mismatch`,
 * `multiple_pods`) is returned at once.
 * @returns the first success, a definite failure, or the last result when the grace ran out.
 */
export function awaitProxyPod(
  store: StoreReader & { onChange(listener: (changes: readonly ObjectChange[]) => void): () => void },
  proxy: Proxy,
  options: AwaitProxyPodOptions,
): Promise<PodCheckResult> {
  const first = checkProxyPod(store, proxy);
  if (first.ok || !isRetryablePodCheckFailure(first.reason) || options.graceMs <= 0) return Promise.resolve(first);
  return new Promise((resolve) => {
    let done = false;
    const finish = (result: PodCheckResult): void => {
      if (done) return;
      done = true;
      unsubscribe();
      options.timers.clearTimeout(timer);
      resolve(result);
    };
    const unsubscribe = store.onChange((changes) => {
      if (!changes.some((c) => c.kind === 'Pod')) return;
      const result = checkProxyPod(store, proxy);
      if (result.ok || !isRetryablePodCheckFailure(result.reason)) finish(result);
    });
    const timer = options.timers.setTimeout(() => finish(checkProxyPod(store, proxy)), options.graceMs);
  });
}
