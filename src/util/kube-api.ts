/**
 * Small helpers around `@kubernetes/client-node` errors, shared by the modules that call the
 * Kubernetes API (the CA Secret, leader election, the CLI).
 */
import { KubeConfig } from '@kubernetes/client-node';

/**
 * The kubeconfig to build client-node's typed API clients (`makeApiClient`) from: `kubeConfig`
 * itself, or, when a cluster's server is `http://` (as `kubectl proxy` serves), a copy in which
 * that cluster is marked `insecure-skip-tls-verify`. The typed clients refuse a plain-HTTP server
 * otherwise ("HTTP protocol is not allowed when skipTLSVerify is not set or false") although the
 * library's `Watch` and the reflector's list requests accept it; over `http://` there is no TLS
 * to verify, so the mark changes nothing else (an `https://` cluster keeps its verification).
 */
export function apiClientConfig(kubeConfig: KubeConfig): KubeConfig {
  if (!kubeConfig.clusters.some((c) => c.server.startsWith('http:') && !c.skipTLSVerify)) return kubeConfig;
  const copy = new KubeConfig();
  copy.loadFromOptions({
    clusters: kubeConfig.clusters.map((c) => (c.server.startsWith('http:') ? { ...c, skipTLSVerify: true } : c)),
    users: kubeConfig.users,
    contexts: kubeConfig.contexts,
    currentContext: kubeConfig.currentContext,
  });
  return copy;
}

/**
 * The HTTP status of a failed Kubernetes API call: `ApiException.code` (client-node 1.x), or
 * `statusCode` / `response.statusCode` of older shapes; undefined for a transport error
 * (refused connection, DNS, TLS), which has no status.
 */
export function apiStatusCode(err: unknown): number | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const e = err as { code?: unknown; statusCode?: unknown; response?: { statusCode?: unknown } };
  for (const candidate of [e.code, e.statusCode, e.response?.statusCode]) {
    if (typeof candidate === 'number' && candidate >= 100 && candidate < 600) return candidate;
  }
  return undefined;
}

/** A short, one-line description of a failed Kubernetes API call (the Status `message` when there is one). */
export function apiErrorMessage(err: unknown): string {
  const status = apiStatusCode(err);
  const body = (err as { body?: unknown } | null)?.body;
  let message: string | undefined;
  if (typeof body === 'string') {
    try {
      message = (JSON.parse(body) as { message?: string }).message;
    } catch {
      message = body;
    }
  } else if (typeof body === 'object' && body !== null) {
    message = (body as { message?: string }).message;
  }
  if (message === undefined) message = err instanceof Error ? err.message.split('\n')[0] : String(err);
  return status === undefined ? message : `${status}: ${message}`;
}
