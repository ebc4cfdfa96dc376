import type { HTTPLocalRateLimitSpec, Retry, UpstreamTrafficSetting } from '../store/objects.js';
import type { StoreReader } from '../store/store.js';
import { serviceIdentity, type ServiceIdentity } from '../proxy/types.js';
import { parseGoDuration } from './duration.js';
import type { PolicyProblem } from './problems.js';
import { re2Problem } from '../util/re2.js';

/** A Retry policy, resolved (OSM policy.openservicemesh.io/v1alpha1 `Retry`). */
export interface RetryPolicy {
  /** `<namespace>/<name>` of the Retry. */
  readonly name: string;
  readonly source: ServiceIdentity;
  /** Destination services as `<namespace>/<name>`. */
  readonly destinations: readonly string[];
  /** Envoy `retry_on` conditions, e.g. `5xx,reset`. */
  readonly retryOn: string;
  readonly numRetries: number;
  /** Per-try timeout, in ms. */
  readonly perTryTimeoutMs: number;
  /** Base interval of the exponential back-off, in ms. */
  readonly backoffBaseIntervalMs: number;
}

/** A local rate limit, resolved: a token bucket (Envoy `type.v3.TokenBucket`) and the response when limited. */
export interface LocalRateLimit {
  /** Bucket size: requests (or connections) plus burst. */
  readonly maxTokens: number;
  /** Tokens added per fill: the requests (or connections) per unit. */
  readonly tokensPerFill: number;
  /** Fill interval: the unit, in ms. */
  readonly fillIntervalMs: number;
  /** HTTP status of a limited request (HTTP only; Envoy's default 429 when unset). */
  readonly responseStatusCode?: number;
  /** Headers added to a limited response (HTTP only). */
  readonly responseHeadersToAdd: readonly { readonly name: string; readonly value: string }[];
}

/** An UpstreamTrafficSetting, resolved (OSM policy.openservicemesh.io/v1alpha1). */
export interface UpstreamTrafficSettingPolicy {
  /** `<namespace>/<name>` of the UpstreamTrafficSetting. */
  readonly name: string;
  readonly namespace: string;
  /** The upstream host: a service FQDN `<svc>.<ns>.svc.cluster.local` or an egress host. */
  readonly host: string;
  /** The mesh service it applies to (`<ns>/<svc>`), when `host` is a service FQDN of its namespace. */
  readonly service: string | undefined;
  readonly tcp?: { readonly maxConnections?: number; readonly connectTimeoutMs?: number };
  readonly http?: {
    readonly maxRequests?: number;
    readonly maxRequestsPerConnection?: number;
    readonly maxPendingRequests?: number;
    readonly maxRetries?: number;
  };
  readonly tcpRateLimit?: LocalRateLimit;
  readonly httpRateLimit?: LocalRateLimit;
  /** Per-route HTTP rate limits: `path` is a regex matched against the request path. */
  readonly httpRoutes: readonly { readonly path: string; readonly rateLimit: LocalRateLimit }[];
}

const UNIT_MS = { second: 1000, minute: 60_000, hour: 3_600_000 } as const;

type Report = (field: string, message: string) => void;

/** The largest value of the Envoy fields counts and limits go to (`uint32` circuit breakers, token buckets). */
const MAX_UINT32 = 4_294_967_295;

/** True for an integer in 1..{@link MAX_UINT32}. */
function isCount(value: number): boolean {
  return Number.isInteger(value) && value > 0 && value <= MAX_UINT32;
}

const NOT_A_COUNT = `is not a positive integer up to ${MAX_UINT32}`;

/** True when `value` with `burst` added still fits the token bucket (`max_tokens`, uint32); reports it otherwise. */
function bucketFits(value: number, burst: number | undefined, field: string, report: Report): boolean {
  if (burst !== undefined && (!Number.isInteger(burst) || burst < 0 || value + burst > MAX_UINT32)) {
    report(`${field}.burst`, `${String(burst)} is not an integer from 0 that keeps the bucket (${value} + burst) up to ${MAX_UINT32}`);
    return false;
  }
  return true;
}

function durationMs(text: string | undefined, field: string, report: Report): number | undefined | null {
  if (text === undefined) return undefined;
  const seconds = parseGoDuration(text);
  if (seconds === undefined || seconds <= 0) {
    report(field, `"${text}" is not a positive duration such as 1s or 250ms`);
    return null;
  }
  return Math.round(seconds * 1000);
}

function httpRateLimit(spec: HTTPLocalRateLimitSpec, field: string, report: Report): LocalRateLimit | null {
  if (!isCount(spec.requests)) {
    report(`${field}.requests`, `${String(spec.requests)} ${NOT_A_COUNT}`);
    return null;
  }
  if (!bucketFits(spec.requests, spec.burst, field, report)) return null;
  const code = spec.responseStatusCode;
  // Envoy's `type.v3.HttpStatus` allows 100-599 only; codes below 400 would tell a client it was not limited.
  if (code !== undefined && (!Number.isInteger(code) || code < 400 || code > 599)) {
    report(`${field}.responseStatusCode`, `${String(code)} is not an HTTP error status (400-599)`);
    return null;
  }
  return {
    maxTokens: spec.requests + (spec.burst ?? 0),
    tokensPerFill: spec.requests,
    fillIntervalMs: UNIT_MS[spec.unit],
    responseStatusCode: code,
    responseHeadersToAdd: spec.responseHeadersToAdd ?? [],
  };
}


/**
 * Resolves the Retry policies of monitored namespaces. A Retry whose source is not a
 * ServiceAccount, whose destinations are not Services, or whose durations or retry count are
 * impossible is reported and skipped.
 */
export function resolveRetryPolicies(store: StoreReader, namespaces: ReadonlySet<string>, problems: PolicyProblem[]): RetryPolicy[] {
  const out: RetryPolicy[] = [];
  for (const retry of store.list<Retry>('Retry')) {
    const ns = retry.metadata.namespace ?? 'default';
    if (!namespaces.has(ns)) continue;
    let valid = true;
    const report: Report = (field, message) => {
      valid = false;
      problems.push({ kind: 'Retry', namespace: ns, name: retry.metadata.name, field, message });
    };
    const { source, destinations, retryPolicy } = retry.spec;
    if (source.kind !== 'ServiceAccount') report('spec.source.kind', `"${source.kind}" is not ServiceAccount`);
    destinations.forEach((d, i) => {
      if (d.kind !== 'Service') report(`spec.destinations[${i}].kind`, `"${d.kind}" is not Service`);
    });
    if (!Number.isInteger(retryPolicy.numRetries) || retryPolicy.numRetries < 0) {
      report('spec.retryPolicy.numRetries', `${String(retryPolicy.numRetries)} is not a non-negative integer`);
    }
    if (!retryPolicy.retryOn.trim()) report('spec.retryPolicy.retryOn', 'is empty');
    const perTry = durationMs(retryPolicy.perTryTimeout, 'spec.retryPolicy.perTryTimeout', report);
    const backoff = durationMs(retryPolicy.retryBackoffBaseInterval, 'spec.retryPolicy.retryBackoffBaseInterval', report);
    if (!valid || perTry == null || backoff == null) continue;
    out.push({
      name: `${ns}/${retry.metadata.name}`,
      source: serviceIdentity(source.namespace ?? ns, source.name),
      destinations: destinations.map((d) => `${d.namespace}/${d.name}`),
      retryOn: retryPolicy.retryOn.replace(/\s+/g, ''),
      numRetries: retryPolicy.numRetries,
      perTryTimeoutMs: perTry,
      backoffBaseIntervalMs: backoff,
    });
  }
  return out;
}

/**
 * Resolves the UpstreamTrafficSettings of monitored namespaces. `host` is the FQDN of a
 * Service in the policy's namespace (`<svc>.<ns>.svc.cluster.local`), or else an egress host
 * (OSM's rule); two policies for one host conflict (the second, by name, is skipped). Limits
 * must be positive, durations valid, route paths valid regexes.
 */
export function resolveUpstreamTrafficSettings(
  store: StoreReader,
  namespaces: ReadonlySet<string>,
  serviceKeys: ReadonlySet<string>,
  problems: PolicyProblem[],
): UpstreamTrafficSettingPolicy[] {
  const out: UpstreamTrafficSettingPolicy[] = [];
  const byHost = new Map<string, string>();
  for (const ust of store.list<UpstreamTrafficSetting>('UpstreamTrafficSetting')) {
    const ns = ust.metadata.namespace ?? 'default';
    if (!namespaces.has(ns)) continue;
    let valid = true;
    const report: Report = (field, message) => {
      valid = false;
      problems.push({ kind: 'UpstreamTrafficSetting', namespace: ns, name: ust.metadata.name, field, message });
    };
    const { host, connectionSettings, rateLimit, httpRoutes } = ust.spec;
    const fqdn = /^([a-z0-9-]+)\.([a-z0-9-]+)\.svc\.cluster\.local$/.exec(host);
    let service: string | undefined;
    // OSM's rule: the host is a Service of the policy's own namespace, or else an egress host
    // (possibly a service FQDN of another namespace reached through an Egress policy).
    if (fqdn && fqdn[2] === ns && serviceKeys.has(`${ns}/${fqdn[1]}`)) service = `${ns}/${fqdn[1]}`;
    const taken = byHost.get(host);
    if (taken) report('spec.host', `host "${host}" already has UpstreamTrafficSetting ${taken}`);
    const positive = (value: number | undefined, field: string): void => {
      if (value !== undefined && !isCount(value)) report(field, `${String(value)} ${NOT_A_COUNT}`);
    };
    const tcp = connectionSettings?.tcp;
    const http = connectionSettings?.http;
    positive(tcp?.maxConnections, 'spec.connectionSettings.tcp.maxConnections');
    positive(http?.maxRequests, 'spec.connectionSettings.http.maxRequests');
    positive(http?.maxRequestsPerConnection, 'spec.connectionSettings.http.maxRequestsPerConnection');
    positive(http?.maxPendingRequests, 'spec.connectionSettings.http.maxPendingRequests');
    positive(http?.maxRetries, 'spec.connectionSettings.http.maxRetries');
    const connectTimeoutMs = durationMs(tcp?.connectTimeout, 'spec.connectionSettings.tcp.connectTimeout', report);
    let tcpRateLimit: LocalRateLimit | undefined;
    const tcpLimit = rateLimit?.local?.tcp;
    if (tcpLimit) {
      if (!isCount(tcpLimit.connections)) {
        report('spec.rateLimit.local.tcp.connections', `${String(tcpLimit.connections)} ${NOT_A_COUNT}`);
      } else if (bucketFits(tcpLimit.connections, tcpLimit.burst, 'spec.rateLimit.local.tcp', report)) {
        tcpRateLimit = {
          maxTokens: tcpLimit.connections + (tcpLimit.burst ?? 0),
          tokensPerFill: tcpLimit.connections,
          fillIntervalMs: UNIT_MS[tcpLimit.unit],
          responseHeadersToAdd: [],
        };
      }
    }
    const httpLimit = rateLimit?.local?.http ? httpRateLimit(rateLimit.local.http, 'spec.rateLimit.local.http', report) : undefined;
    const routes: { path: string; rateLimit: LocalRateLimit }[] = [];
    (httpRoutes ?? []).forEach((r, i) => {
      const regexProblem = re2Problem(r.path);
      if (regexProblem) report(`spec.httpRoutes[${i}].path`, regexProblem);
      const limit = r.rateLimit?.local ? httpRateLimit(r.rateLimit.local, `spec.httpRoutes[${i}].rateLimit.local`, report) : undefined;
      if (limit) routes.push({ path: r.path, rateLimit: limit });
    });
    if (!valid || connectTimeoutMs === null || httpLimit === null) continue;
    byHost.set(host, `${ns}/${ust.metadata.name}`);
    out.push({
      name: `${ns}/${ust.metadata.name}`,
      namespace: ns,
      host,
      service,
      ...(tcp ? { tcp: { maxConnections: tcp.maxConnections, connectTimeoutMs } } : {}),
      ...(http ? { http: { ...http } } : {}),
      ...(tcpRateLimit ? { tcpRateLimit } : {}),
      ...(httpLimit ? { httpRateLimit: httpLimit } : {}),
      httpRoutes: routes,
    });
  }
  return out;
}
