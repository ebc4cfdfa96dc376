/**
 * True when every key/value of `selector` is in `labels` (Kubernetes equality-based label
 * selector). An empty or missing selector selects nothing, as for a Service.
 */
export function selectorMatches(selector: Readonly<Record<string, string>> | undefined, labels: Readonly<Record<string, string>> | undefined): boolean {
  if (!selector) return false;
  const entries = Object.entries(selector);
  if (entries.length === 0) return false;
  return entries.every(([k, v]) => labels?.[k] === v);
}

/** Label on a Namespace naming the mesh that monitors it (OSM `openservicemesh.io/monitored-by`). */
export const MONITORED_BY_LABEL = 'openservicemesh.io/monitored-by';

/** Label on an EndpointSlice naming its Service (discovery.k8s.io/v1). */
export const SERVICE_NAME_LABEL = 'kubernetes.io/service-name';
