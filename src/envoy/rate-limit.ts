import type { LocalRateLimit as HttpLocalRateLimitConfig } from '../api/generated/envoy/extensions/filters/http/local_ratelimit/v3/LocalRateLimit.js';
import type { Filter } from '../api/generated/envoy/config/listener/v3/Filter.js';
import type { LocalRateLimit } from '../catalog/types.js';
import { durationMs, ExtensionType, typedConfig, type TypedConfig } from './typed-config.js';

/** Filter name of the HTTP local rate limit filter, the key of its per-host and per-route configuration. */
export const HTTP_LOCAL_RATE_LIMIT_FILTER = 'envoy.filters.http.local_ratelimit';

function tokenBucket(limit: LocalRateLimit) {
  return {
    max_tokens: limit.maxTokens,
    tokens_per_fill: { value: limit.tokensPerFill },
    fill_interval: durationMs(limit.fillIntervalMs),
  };
}

/**
 * The network local rate limit filter for inbound TCP connections of a service (OSM
 * UpstreamTrafficSetting `rateLimit.local.tcp`; Envoy
 * `extensions.filters.network.local_ratelimit.v3.LocalRateLimit`): a token bucket of
 * `connections + burst` tokens refilled with `connections` per unit.
 */
export function networkLocalRateLimitFilter(statPrefix: string, limit: LocalRateLimit): Filter {
  return {
    name: 'envoy.filters.network.local_ratelimit',
    typed_config: typedConfig(ExtensionType.NetworkLocalRateLimit, { stat_prefix: statPrefix, token_bucket: tokenBucket(limit) }),
  };
}

/**
 * The per-virtual-host or per-route configuration of the HTTP local rate limit filter (OSM
 * UpstreamTrafficSetting `rateLimit.local.http` and `httpRoutes[].rateLimit.local`; Envoy
 * `extensions.filters.http.local_ratelimit.v3.LocalRateLimit`): the token bucket, enabled and
 * enforced for 100 % of requests, the response status (Envoy's 429 when unset) and headers.
 */
export function httpLocalRateLimitConfig(statPrefix: string, limit: LocalRateLimit): TypedConfig<HttpLocalRateLimitConfig> {
  const all = (runtimeKey: string) => ({ default_value: { numerator: 100, denominator: 'HUNDRED' as const }, runtime_key: runtimeKey });
  return typedConfig<HttpLocalRateLimitConfig>(ExtensionType.HttpLocalRateLimit, {
    stat_prefix: statPrefix,
    token_bucket: tokenBucket(limit),
    filter_enabled: all('local_rate_limit_enabled'),
    filter_enforced: all('local_rate_limit_enforced'),
    ...(limit.responseStatusCode !== undefined ? { status: { code: limit.responseStatusCode as never } } : {}),
    ...(limit.responseHeadersToAdd.length > 0
      ? { response_headers_to_add: limit.responseHeadersToAdd.map((h) => ({ header: { key: h.name, value: h.value } })) }
      : {}),
  });
}
