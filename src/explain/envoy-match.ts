/**
 * How Envoy picks what handles a request, read from the very configuration objects the
 * generators send (listeners, route configurations, RBAC filters): the filter chain of a
 * listener for a connection, the virtual host and route of a route configuration for a request,
 * and whether an RBAC policy's principals admit a peer. `trellis explain` runs a request through
 * these instead of re-deriving access from the policies, so its answer is what Envoy does with
 * what it was sent. Only the matchers the generators write are understood; any other one never
 * matches (an explanation never says "allowed" on a guess).
 */
import { BlockList, isIP } from 'node:net';
import type { CidrRange } from '../api/generated/envoy/config/core/v3/CidrRange.js';
import type { FilterChain } from '../api/generated/envoy/config/listener/v3/FilterChain.js';
import type { Listener } from '../api/generated/envoy/config/listener/v3/Listener.js';
import type { Principal } from '../api/generated/envoy/config/rbac/v3/Principal.js';
import type { HeaderMatcher } from '../api/generated/envoy/config/route/v3/HeaderMatcher.js';
import type { Route } from '../api/generated/envoy/config/route/v3/Route.js';
import type { RouteConfiguration } from '../api/generated/envoy/config/route/v3/RouteConfiguration.js';
import type { VirtualHost } from '../api/generated/envoy/config/route/v3/VirtualHost.js';
import { compileRe2 } from '../util/re2.js';

/** What a listener sees of a connection (Envoy's filter chain match criteria, in its order). */
export interface ConnectionFacts {
  /** The original destination port (`original_dst`). */
  readonly destinationPort: number;
  /** The original destination IP; undefined when the client dials a name Envoy never sees as an IP (matches only chains without `prefix_ranges`). */
  readonly destinationIp: string | undefined;
  /** The TLS SNI (`tls_inspector`); undefined for plaintext. */
  readonly serverName: string | undefined;
  /** `tls` or `raw_buffer` (what `tls_inspector` detects). */
  readonly transportProtocol: 'tls' | 'raw_buffer';
  /** The peer's address; undefined when unknown (matches only chains without `source_prefix_ranges`). */
  readonly sourceIp: string | undefined;
}

/** What a route configuration sees of an HTTP request. */
export interface RequestFacts {
  /** `:authority` (the Host header). */
  readonly authority: string;
  /** `:path`, with its query string if any. */
  readonly path: string;
  /** `:method`. */
  readonly method: string;
  /** Other request headers, names lower case. */
  readonly headers: Readonly<Record<string, string>>;
}

/** The filter chain a connection lands on, or why none: Envoy's criteria in its order, most specific first, no backtracking. */
export type ChainSelection = { readonly chain: FilterChain } | { readonly chain: undefined; readonly reason: string };

function prefixLength(r: CidrRange): number {
  const len = r.prefix_len;
  return len && typeof len === 'object' && typeof len.value === 'number' ? len.value : 0;
}

/** The longest of `ranges` holding `ip`, as a prefix length; -1 when none does. */
function longestContaining(ranges: readonly CidrRange[], ip: string): number {
  const family = isIP(ip) === 6 ? 'ipv6' : 'ipv4';
  let best = -1;
  for (const r of ranges) {
    const address = r.address_prefix ?? '';
    if ((isIP(address) === 6 ? 'ipv6' : 'ipv4') !== family) continue;
    const list = new BlockList();
    list.addSubnet(address, prefixLength(r), family);
    if (list.check(ip, family)) best = Math.max(best, prefixLength(r));
  }
  return best;
}

/**
 * One step of Envoy's filter chain selection: of `chains`, those whose criterion matches most
 * specifically (a rank ≥ 0; higher is more specific), else those without the criterion (rank
 * `undefined`), else none.
 */
function narrow(chains: readonly FilterChain[], rank: (c: FilterChain) => number | undefined): FilterChain[] {
  let best = -1;
  const ranked = chains.map((c) => {
    const r = rank(c);
    if (r !== undefined && r > best) best = r;
    return r;
  });
  if (best >= 0) return chains.filter((_, i) => ranked[i] === best);
  return chains.filter((_, i) => ranked[i] === undefined);
}

/**
 * The filter chain of `listener` a connection with `facts` is handed to, as Envoy's filter chain
 * manager picks it (`FilterChainMatch`: destination port, destination IP (longest prefix),
 * server name, transport protocol, source IP (longest prefix); at each step the most specific
 * match wins and chains without the criterion are the fallback; a step that leaves nothing
 * ends the search); the listener's `default_filter_chain` when nothing matches.
 */
export function selectFilterChain(listener: Listener, facts: ConnectionFacts): ChainSelection {
  let chains: FilterChain[] = [...(listener.filter_chains ?? [])];
  const steps: [string, (c: FilterChain) => number | undefined][] = [
    [`destination port ${facts.destinationPort}`, (c) => {
      const port = c.filter_chain_match?.destination_port;
      const value = port && typeof port === 'object' ? port.value : undefined;
      return value === undefined ? undefined : value === facts.destinationPort ? 0 : -1;
    }],
    [`destination address ${facts.destinationIp ?? '(none)'}`, (c) => {
      const ranges = c.filter_chain_match?.prefix_ranges ?? [];
      if (ranges.length === 0) return undefined;
      return facts.destinationIp === undefined ? -1 : longestContaining(ranges, facts.destinationIp);
    }],
    [`server name ${facts.serverName ?? '(none)'}`, (c) => {
      const names = c.filter_chain_match?.server_names ?? [];
      if (names.length === 0) return undefined;
      return facts.serverName !== undefined && names.includes(facts.serverName) ? 0 : -1;
    }],
    [`transport protocol ${facts.transportProtocol}`, (c) => {
      const protocol = c.filter_chain_match?.transport_protocol;
      if (!protocol) return undefined;
      return protocol === facts.transportProtocol ? 0 : -1;
    }],
    [`source address ${facts.sourceIp ?? '(unknown)'}`, (c) => {
      const ranges = c.filter_chain_match?.source_prefix_ranges ?? [];
      if (ranges.length === 0) return undefined;
      return facts.sourceIp === undefined ? -1 : longestContaining(ranges, facts.sourceIp);
    }],
  ];
  for (const [criterion, rank] of steps) {
    chains = narrow(chains, rank);
    if (chains.length === 0) {
      const fallback = listener.default_filter_chain;
      if (fallback) return { chain: fallback };
      return { chain: undefined, reason: `no filter chain of ${listener.name ?? 'the listener'} matches ${criterion}` };
    }
  }
  return { chain: chains[0] };
}

/** A network filter's typed config (`typed_config` without `@type`), by filter name; undefined when the chain has none. */
export function filterConfig(chain: FilterChain, filterName: string): Record<string, unknown> | undefined {
  const filter = (chain.filters ?? []).find((f) => f.name === filterName);
  return filter?.typed_config as Record<string, unknown> | undefined;
}

/**
 * The virtual host of `config` serving `authority`, as Envoy picks it: an exact domain first,
 * then the longest suffix wildcard (`*.example.com`), then the longest prefix wildcard
 * (`example.*`), then `*`; domains are compared case-insensitively, with the port as written.
 */
export function selectVirtualHost(config: RouteConfiguration, authority: string): VirtualHost | undefined {
  const host = authority.toLowerCase();
  const hosts = config.virtual_hosts ?? [];
  const domains = (v: VirtualHost) => (v.domains ?? []).map((d) => d.toLowerCase());
  const exact = hosts.find((v) => domains(v).includes(host));
  if (exact) return exact;
  let best: { v: VirtualHost; len: number } | undefined;
  for (const v of hosts) {
    for (const d of domains(v)) {
      if (d.length > 1 && d.startsWith('*') && host.endsWith(d.slice(1)) && host.length > d.length - 1 && (!best || d.length > best.len)) best = { v, len: d.length };
    }
  }
  if (best) return best.v;
  for (const v of hosts) {
    for (const d of domains(v)) {
      if (d.length > 1 && d.endsWith('*') && host.startsWith(d.slice(0, -1)) && host.length > d.length - 1 && (!best || d.length > best.len)) best = { v, len: d.length };
    }
  }
  if (best) return best.v;
  return hosts.find((v) => domains(v).includes('*'));
}

/** Whether a route's match takes the request, and if not the first criterion that failed. */
export type RouteMatchResult = { readonly matched: true } | { readonly matched: false; readonly reason: string };

function fullMatch(regex: string, value: string): boolean | Error {
  const re = compileRe2(regex);
  return re instanceof Error ? re : re.fullMatch(value);
}

/** The request's value of a header matcher's name: the pseudo-headers from the request line, others from `headers`. */
function headerValue(request: RequestFacts, name: string): string | undefined {
  switch (name) {
    case ':authority':
    case 'host':
      return request.authority;
    case ':path':
      return request.path;
    case ':method':
      return request.method;
    default:
      return request.headers[name];
  }
}

function headerMatches(matcher: HeaderMatcher, request: RequestFacts): RouteMatchResult {
  const name = (matcher.name ?? '').toLowerCase();
  const value = headerValue(request, name);
  const shown = name === ':method' ? 'method' : name === ':authority' ? 'host' : `header ${name}`;
  const regex = matcher.string_match?.safe_regex?.regex ?? matcher.safe_regex_match?.regex;
  let ok: boolean;
  let wanted: string;
  if (regex !== undefined) {
    if (value === undefined) return { matched: false, reason: `${shown} is missing (the route wants it to match ${regex})` };
    const m = fullMatch(regex, value);
    if (m instanceof Error) return { matched: false, reason: `${shown}: the pattern ${regex} does not compile (${m.message})` };
    ok = m;
    wanted = `to match ${regex}`;
  } else if (matcher.string_match?.exact !== undefined || matcher.exact_match !== undefined) {
    const exact = matcher.string_match?.exact ?? matcher.exact_match ?? '';
    ok = value === exact;
    wanted = `to be ${JSON.stringify(exact)}`;
  } else if (matcher.present_match !== undefined) {
    ok = (value !== undefined) === matcher.present_match;
    wanted = matcher.present_match ? 'to be present' : 'to be absent';
  } else {
    return { matched: false, reason: `${shown}: a header matcher trellis explain does not read` };
  }
  if (matcher.invert_match) ok = !ok;
  if (ok) return { matched: true };
  return { matched: false, reason: value === undefined ? `${shown} is missing (the route wants it ${wanted})` : `${shown} ${JSON.stringify(value)} does not match (the route wants it ${wanted})` };
}

/**
 * Whether `route`'s match takes `request`, as Envoy's router decides: the path specifier
 * (`prefix` on the path with its query string; `path`, `safe_regex` (whole path, RE2) and
 * `path_separated_prefix` on the path without it; case-sensitive), then every header matcher
 * (`:method`, `:authority` and plain headers; regexes match the whole value).
 */
export function routeMatches(route: Route, request: RequestFacts): RouteMatchResult {
  const match = route.match ?? {};
  const pathOnly = request.path.split('?')[0];
  if (match.prefix !== undefined) {
    if (!request.path.startsWith(match.prefix)) return { matched: false, reason: `path ${request.path} does not start with ${match.prefix}` };
  } else if (match.path !== undefined) {
    if (pathOnly !== match.path) return { matched: false, reason: `path ${pathOnly} is not ${match.path}` };
  } else if (match.safe_regex?.regex !== undefined) {
    const m = fullMatch(match.safe_regex.regex, pathOnly);
    if (m instanceof Error) return { matched: false, reason: `the path pattern ${match.safe_regex.regex} does not compile (${m.message})` };
    if (!m) return { matched: false, reason: `path ${pathOnly} does not match ${match.safe_regex.regex}` };
  } else if (match.path_separated_prefix !== undefined) {
    const p = match.path_separated_prefix;
    if (pathOnly !== p && !pathOnly.startsWith(`${p}/`)) return { matched: false, reason: `path ${pathOnly} is not ${p} nor below ${p}/` };
  } else {
    return { matched: false, reason: 'a path matcher trellis explain does not read' };
  }
  // Every header that fails, not only the first: the request needs them all.
  const failures: string[] = [];
  for (const h of match.headers ?? []) {
    const r = headerMatches(h, request);
    if (!r.matched) failures.push(r.reason);
  }
  return failures.length === 0 ? { matched: true } : { matched: false, reason: failures.join('; ') };
}

/** An RBAC policy (`config.rbac.v3.Policy`) of the generators' shape: any permission, principals by authenticated name. */
export interface RbacPolicyView {
  readonly name: string;
  /** The principals' `authenticated.principal_name.exact` (or `any` for a principal matching every peer). */
  readonly principals: readonly string[];
}

/** The policies of an RBAC config (`rules.policies`) of action ALLOW, by name, sorted. */
export function rbacPolicies(rbac: { rules?: { action?: unknown; policies?: Record<string, { principals?: Principal[] }> } } | undefined): RbacPolicyView[] {
  const policies = rbac?.rules?.policies ?? {};
  return Object.keys(policies)
    .sort()
    .map((name) => ({
      name,
      principals: (policies[name]?.principals ?? []).map((p) => (p.any ? 'any' : (p.authenticated?.principal_name?.exact ?? '(a principal trellis explain does not read)'))),
    }));
}

/** The first of `policies` admitting a peer authenticated as `principal` (an ALLOW rule set: none admits = denied). */
export function rbacAdmitting(policies: readonly RbacPolicyView[], principal: string | undefined): RbacPolicyView | undefined {
  return policies.find((p) => p.principals.includes('any') || (principal !== undefined && p.principals.includes(principal)));
}
