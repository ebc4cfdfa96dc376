/**
 * Rules over one proxy's whole resource set that no `validate.rules` annotation states, but
 * that Envoy or gRPC clients enforce (or that break traffic silently): unique names, unique
 * filter-chain matches, unique virtual-host domains, references that resolve, weighted
 * clusters that add up, IP-literal endpoints, and regexes that compile.
 *
 * Input form: the DECODED form (see `pgv-rules.ts`): what `decodeMessage` returns for the
 * encoded bytes, with nested `Any` values carrying `@type`.
 *
 * Sources: Envoy docs (`config/listener/v3/listener_components.proto` "FilterChainMatch":
 * a listener rejects two chains with the same match; `config/route/v3/route_components.proto`
 * "VirtualHost.domains": a domain must be unique across the virtual hosts of one route
 * configuration; `xds_protocol` "Resource warming"), gRFC A28 (weighted clusters: the sum must
 * be > 0 and, gRPC C-core, equal `total_weight` when set) and A27 (EDS endpoints must be IPs).
 *
 * Pure: no I/O. What is found per resource is kept in a {@link ResourceFactsCache} the caller
 * owns, not in this module.
 */
import { TypeUrl } from '../../api/type-urls.js';
import { RE2_UNSUPPORTED, re2Problem } from '../../util/re2.js';
import { canonicalJson, ipVersion } from './pgv-rules.js';

/** A decoded resource with its xDS name. */
export interface DecodedResource {
  readonly name: string;
  readonly decoded: Record<string, unknown>;
  /**
   * `decoded` as parts setting disjoint fields (`NamedResource.parts`): the single-resource
   * rules and references are read part by part, so a part shared by many resources is walked once.
   */
  readonly parts?: readonly Record<string, unknown>[];
}

/** Every decoded resource of one proxy, by type URL. */
export type DecodedResources = ReadonlyMap<TypeUrl, readonly DecodedResource[]>;

/**
 * A broken cross-resource rule, on the resource `typeUrl`/`name` at field `path` (same
 * format as `RuleViolation.path`). Rules: `name.unique`, `name.mismatch`,
 * `listener.unique_filter_chain_match`, `route_configuration.unique_domains`,
 * `route_configuration.unique_virtual_host_names`, `reference.cluster`,
 * `reference.route_configuration`, `reference.cluster_load_assignment`, `reference.secret`,
 * `weighted_clusters.total_weight`, `weighted_clusters.zero_sum`,
 * `weighted_clusters.overflow`, `endpoint.ip_literal`, `regex.compile`,
 * `regex.re2_unsupported`.
 */
export interface CrossViolation {
  readonly typeUrl: TypeUrl;
  readonly name: string;
  readonly path: string;
  readonly rule: string;
  readonly message: string;
}

/** A name one resource uses that must exist as a resource of `typeUrl` in the same set. */
export interface ResourceReference {
  readonly typeUrl: TypeUrl;
  readonly name: string;
  /** Where the name is written in the referring resource. */
  readonly path: string;
}

type Obj = Record<string, unknown>;

const HCM = 'type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager';
const TCP_PROXY = 'type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy';
const UINT32_MAX = 4_294_967_295;

function obj(v: unknown): Obj | undefined {
  return v && typeof v === 'object' && !Array.isArray(v) ? (v as Obj) : undefined;
}
function arr(v: unknown): unknown[] {
  return Array.isArray(v) ? v : [];
}
function str(v: unknown): string | undefined {
  return typeof v === 'string' ? v : undefined;
}
function num(v: unknown): number {
  const o = obj(v);
  const x = o ? o['value'] : v; // UInt32Value in the decoded form is {value}
  return typeof x === 'number' ? x : typeof x === 'string' ? Number(x) : 0;
}
/** `<MessageName>` for a decoded `Any` (an object with `@type`), as `pgv-rules.ts` writes paths. */
function anySuffix(o: Obj): string {
  const t = o['@type'];
  return typeof t === 'string' ? `<${t.slice(t.lastIndexOf('.') + 1)}>` : '';
}
function isAds(configSource: unknown): boolean {
  const c = obj(configSource);
  return c !== undefined && obj(c['ads']) !== undefined;
}

/** Whether a resource's own name field (`name`, a ClusterLoadAssignment's `cluster_name`) is `name`, its xDS name (rule `name.mismatch`). */
export function servedAsNamed(typeUrl: TypeUrl, decoded: Record<string, unknown>, name: string): boolean {
  return decoded[NAME_FIELD[typeUrl]] === name;
}

/** The name field each resource type carries, compared with the xDS resource name. */
const NAME_FIELD: Readonly<Record<TypeUrl, string>> = {
  [TypeUrl.Listener]: 'name',
  [TypeUrl.RouteConfiguration]: 'name',
  [TypeUrl.Cluster]: 'name',
  [TypeUrl.ClusterLoadAssignment]: 'cluster_name',
  [TypeUrl.Secret]: 'name',
};

/** Listener filter chains (and the default one) with their paths. */
function filterChains(listener: Obj): [Obj, string][] {
  const out: [Obj, string][] = arr(listener['filter_chains']).map((c, i) => [obj(c) ?? {}, `filter_chains[${i}]`]);
  const d = obj(listener['default_filter_chain']);
  if (d) out.push([d, 'default_filter_chain']);
  return out;
}

/** Network filters' typed configs of a listener (and its `api_listener`'s HCM), with their paths. */
function networkFilters(listener: Obj): [Obj, string][] {
  const out: [Obj, string][] = [];
  for (const [chain, at] of filterChains(listener)) {
    arr(chain['filters']).forEach((f, j) => {
      const tc = obj(obj(f)?.['typed_config']);
      if (tc) out.push([tc, `${at}.filters[${j}].typed_config`]);
    });
  }
  const api = obj(obj(listener['api_listener'])?.['api_listener']); // proxyless gRPC (gRFC A27)
  if (api) out.push([api, 'api_listener.api_listener']);
  return out;
}

/** Route actions of a route configuration (or an HCM's inline `route_config`). */
function routeActions(rc: Obj, base: string): [Obj, string][] {
  const out: [Obj, string][] = [];
  arr(rc['virtual_hosts']).forEach((vh, i) => {
    arr(obj(vh)?.['routes']).forEach((r, j) => {
      const action = obj(obj(r)?.['route']);
      if (action) out.push([action, `${base}virtual_hosts[${i}].routes[${j}].route`]);
    });
  });
  return out;
}

function clusterRefsOfAction(action: Obj, at: string, out: ResourceReference[]): void {
  const c = str(action['cluster']);
  if (c !== undefined) out.push({ typeUrl: TypeUrl.Cluster, name: c, path: `${at}.cluster` });
  arr(obj(action['weighted_clusters'])?.['clusters']).forEach((wc, k) => {
    const n = str(obj(wc)?.['name']);
    if (n !== undefined) out.push({ typeUrl: TypeUrl.Cluster, name: n, path: `${at}.weighted_clusters.clusters[${k}].name` });
  });
}

/**
 * The names a decoded resource refers to that must exist in the same proxy's set: clusters
 * named by routes (`route.cluster`, `route.weighted_clusters.clusters[].name`) and TCP proxies
 * (`cluster`, `weighted_clusters.clusters[].name`); route configurations named by an HCM's
 * `rds.route_config_name` (when fetched over ADS); an EDS cluster's ClusterLoadAssignment
 * (`eds_cluster_config.service_name`, else the cluster's name, when fetched over ADS); and
 * every secret named by an `SdsSecretConfig` fetched over ADS.
 */
export function resourceReferences(typeUrl: TypeUrl, decoded: Record<string, unknown>, facts: ResourceFactsCache = new ResourceFactsCache()): readonly ResourceReference[] {
  return facts.of(typeUrl, decoded).references;
}

function findReferences(typeUrl: TypeUrl, decoded: Record<string, unknown>): ResourceReference[] {
  const out: ResourceReference[] = [];
  if (typeUrl === TypeUrl.Listener) {
    for (const [tc, at] of networkFilters(decoded)) {
      if (tc['@type'] === HCM) {
        const rds = obj(tc['rds']);
        const rcName = str(rds?.['route_config_name']);
        if (rcName !== undefined && isAds(rds?.['config_source'])) {
          out.push({ typeUrl: TypeUrl.RouteConfiguration, name: rcName, path: `${at}<HttpConnectionManager>.rds.route_config_name` });
        }
        const inline = obj(tc['route_config']);
        if (inline) for (const [a, p] of routeActions(inline, `${at}<HttpConnectionManager>.route_config.`)) clusterRefsOfAction(a, p, out);
      } else if (tc['@type'] === TCP_PROXY) {
        clusterRefsOfAction(tc, `${at}<TcpProxy>`, out);
      }
    }
  } else if (typeUrl === TypeUrl.RouteConfiguration) {
    for (const [a, p] of routeActions(decoded, '')) clusterRefsOfAction(a, p, out);
  } else if (typeUrl === TypeUrl.Cluster) {
    const eds = obj(decoded['eds_cluster_config']);
    if (decoded['type'] === 'EDS' && isAds(eds?.['eds_config'])) {
      const service = str(eds?.['service_name']);
      out.push({
        typeUrl: TypeUrl.ClusterLoadAssignment,
        name: service || str(decoded['name']) || '',
        path: service ? 'eds_cluster_config.service_name' : 'name',
      });
    }
  }
  return out;
}

/**
 * Checks the cross-resource rules listed on {@link CrossViolation} over one proxy's set.
 * `others`: names of the proxy's resources of types not in `resources` (a partial update checked
 * against the rest of its configuration), which references may name.
 * `safe_regex.regex` being empty is left to the `string.min_len` annotation on
 * `RegexMatcher.regex`, and a virtual host without domains to `repeated.min_items` on
 * `VirtualHost.domains` (both checked by `pgv-rules.ts`); here regexes are compiled with
 * RE2 itself (`re2-wasm`): what RE2 rejects is `regex.compile`, or `regex.re2_unsupported` for
 * a lookaround or backreference.
 * @param facts what was found before in the same resource objects (a fresh cache by default;
 *   pass the one you keep so that a resource many proxies get is walked once).
 * @returns the violations, grouped by resource in the order given.
 */
export function validateCrossResource(
  resources: DecodedResources,
  others?: ReadonlyMap<TypeUrl, Iterable<string>>,
  facts: ResourceFactsCache = new ResourceFactsCache(),
): CrossViolation[] {
  const out: CrossViolation[] = [];
  const names = new Map<TypeUrl, Set<string>>();
  for (const [typeUrl, list] of others ?? []) if (!resources.has(typeUrl)) names.set(typeUrl, new Set(list));
  for (const [typeUrl, list] of resources) {
    const seen = new Set<string>();
    for (const r of list) {
      if (seen.has(r.name)) out.push({ typeUrl, name: r.name, path: '', rule: 'name.unique', message: `more than one ${typeName(typeUrl)} is named "${r.name}"` });
      seen.add(r.name);
      const own = r.decoded[NAME_FIELD[typeUrl]];
      if (own !== r.name) {
        out.push({ typeUrl, name: r.name, path: NAME_FIELD[typeUrl], rule: 'name.mismatch', message: `is ${JSON.stringify(own)}, but the resource is served as "${r.name}"` });
      }
    }
    names.set(typeUrl, seen);
  }

  for (const [typeUrl, list] of resources) {
    for (const r of list) {
      const found = r.parts && r.parts.length > 0 ? facts.ofParts(typeUrl, r.parts) : facts.of(typeUrl, r.decoded);
      for (const ref of found.references) {
        if (names.get(ref.typeUrl)?.has(ref.name)) continue;
        out.push({ typeUrl, name: r.name, path: ref.path, rule: REFERENCE_RULE[ref.typeUrl], message: `${typeName(ref.typeUrl)} "${ref.name}" is not in this proxy's resources` });
      }
      for (const v of found.violations) out.push({ typeUrl, name: r.name, ...v });
    }
  }
  return out;
}

/** What a resource says on its own, whatever else the proxy gets: the names it refers to and the rules it breaks by itself. */
export interface ResourceFacts {
  readonly references: readonly ResourceReference[];
  /** Single-resource rules: filter-chain matches, domains, weights, endpoint addresses, regexes. */
  readonly violations: readonly { readonly path: string; readonly rule: string; readonly message: string }[];
}

/**
 * What each resource says on its own (the names it refers to, the single-resource rules it
 * breaks), by resource object: generated objects are never mutated, and a resource many proxies
 * get (a ClusterLoadAssignment, a shared route configuration, a cluster's base part) is one
 * object, so it is walked once. Held weakly: a resource no proxy holds any more is forgotten.
 * The caller owns one (`ResourceCheckCache` holds one) for as long as it validates.
 */
export class ResourceFactsCache {
  private readonly byObject = new WeakMap<object, ResourceFacts>();
  /** What resources have in common below their top level, walked once (see {@link NestedFacts}). */
  private readonly nested: NestedFacts = { barren: new WeakSet(), matchKeys: new WeakMap() };

  /** The facts of `decoded`, a resource of `typeUrl`: found once per object. */
  of(typeUrl: TypeUrl, decoded: Record<string, unknown>): ResourceFacts {
    let found = this.byObject.get(decoded);
    if (!found) {
      found = resourceFacts(typeUrl, decoded, this.nested);
      this.byObject.set(decoded, found);
    }
    return found;
  }

  /** The facts of a resource given as parts with disjoint fields (every rule reads fields of one part): each part's, in order. */
  ofParts(typeUrl: TypeUrl, parts: readonly Record<string, unknown>[]): ResourceFacts {
    if (parts.length === 1) return this.of(typeUrl, parts[0]!);
    const each = parts.map((p) => this.of(typeUrl, p));
    return { references: each.flatMap((f) => f.references), violations: each.flatMap((f) => f.violations) };
  }
}

/**
 * Facts of nested objects that hold wherever the object sits, kept by object (generated objects
 * are never mutated; a typed config carried over from a push before, or shared by many
 * resources, is then walked once). Held weakly.
 */
interface NestedFacts {
  /** Objects whose walk (`walkNested`, collecting secret references) found nothing, and which have no `regex` of their own (whose check reads where the object sits). */
  readonly barren: WeakSet<object>;
  /** By `filter_chain_match` object: its `canonicalJson`. */
  readonly matchKeys: WeakMap<object, string>;
}

function resourceFacts(typeUrl: TypeUrl, decoded: Record<string, unknown>, nested: NestedFacts): ResourceFacts {
  const violations: { path: string; rule: string; message: string }[] = [];
  const add: Add = (path, rule, message) => void violations.push({ path, rule, message });
  if (typeUrl === TypeUrl.Listener) {
    checkFilterChainMatches(decoded, add, nested.matchKeys);
    for (const [tc, at] of networkFilters(decoded)) {
      if (tc['@type'] === TCP_PROXY) checkWeights(obj(tc['weighted_clusters']), `${at}<TcpProxy>.weighted_clusters`, false, add);
      if (tc['@type'] === HCM && obj(tc['route_config'])) checkRouteConfiguration(obj(tc['route_config'])!, `${at}<HttpConnectionManager>.route_config.`, add);
    }
  }
  if (typeUrl === TypeUrl.RouteConfiguration) checkRouteConfiguration(decoded, '', add);
  if (typeUrl === TypeUrl.ClusterLoadAssignment) checkEndpoints(decoded, '', add);
  if (typeUrl === TypeUrl.Cluster) {
    const type = decoded['type'] ?? 'STATIC';
    if (!decoded['cluster_type'] && (type === 'STATIC' || type === 'EDS') && obj(decoded['load_assignment'])) checkEndpoints(obj(decoded['load_assignment'])!, 'load_assignment.', add);
  }
  const references = findReferences(typeUrl, decoded);
  // One walk of the whole resource for the secrets it names (not a Secret's own) and its regexes.
  const walk: NestedWalk = typeUrl === TypeUrl.Secret ? { refs: undefined, add, barren: undefined, found: 0 } : { refs: references, add, barren: nested.barren, found: 0 };
  walkNested(decoded, [], '', walk);
  return { references, violations };
}

type Add = (path: string, rule: string, message: string) => void;

const REFERENCE_RULE: Readonly<Record<TypeUrl, string>> = {
  [TypeUrl.Cluster]: 'reference.cluster',
  [TypeUrl.RouteConfiguration]: 'reference.route_configuration',
  [TypeUrl.ClusterLoadAssignment]: 'reference.cluster_load_assignment',
  [TypeUrl.Secret]: 'reference.secret',
  [TypeUrl.Listener]: 'reference.listener',
};

function typeName(typeUrl: TypeUrl): string {
  return typeUrl.slice(typeUrl.lastIndexOf('.') + 1);
}

function checkFilterChainMatches(listener: Obj, add: Add, keys: WeakMap<object, string>): void {
  const seen = new Map<string, number>();
  arr(listener['filter_chains']).forEach((c, i) => {
    const match = obj(obj(c)?.['filter_chain_match']);
    let key = match && keys.get(match);
    if (key === undefined) {
      key = canonicalJson(match ?? {});
      if (match) keys.set(match, key);
    }
    const first = seen.get(key);
    if (first !== undefined) {
      add(`filter_chains[${i}].filter_chain_match`, 'listener.unique_filter_chain_match', `is the same as filter_chains[${first}]'s: ${key}`);
    } else seen.set(key, i);
  });
}

function checkRouteConfiguration(rc: Obj, base: string, add: Add): void {
  const domains = new Map<string, number>();
  const vhNames = new Map<string, number>();
  arr(rc['virtual_hosts']).forEach((v, i) => {
    const vh = obj(v) ?? {};
    const n = str(vh['name']) ?? '';
    const firstName = vhNames.get(n);
    if (firstName !== undefined) add(`${base}virtual_hosts[${i}].name`, 'route_configuration.unique_virtual_host_names', `"${n}" is also virtual_hosts[${firstName}]'s name`);
    else vhNames.set(n, i);
    arr(vh['domains']).forEach((d, j) => {
      const domain = String(d).toLowerCase(); // Envoy matches hosts case-insensitively
      const first = domains.get(domain);
      if (first !== undefined && first !== i) {
        add(`${base}virtual_hosts[${i}].domains[${j}]`, 'route_configuration.unique_domains', `"${String(d)}" is also a domain of virtual_hosts[${first}]`);
      } else if (first === undefined) domains.set(domain, i);
    });
    arr(vh['routes']).forEach((r, j) => {
      const action = obj(obj(r)?.['route']);
      if (action) checkWeights(obj(action['weighted_clusters']), `${base}virtual_hosts[${i}].routes[${j}].route.weighted_clusters`, true, add);
    });
  });
}

/**
 * Weighted clusters: the weights must sum to more than 0 and fit in a uint32, and to
 * `total_weight` when that (deprecated, still honoured by gRPC C-core) field is set.
 */
function checkWeights(wc: Obj | undefined, at: string, route: boolean, add: Add): void {
  if (!wc) return;
  const clusters = arr(wc['clusters']);
  const sum = clusters.reduce<number>((s, c) => s + num(obj(c)?.['weight']), 0);
  if (sum <= 0) add(`${at}.clusters`, 'weighted_clusters.zero_sum', 'weights sum to 0: no traffic can be routed');
  if (sum > UINT32_MAX) add(`${at}.clusters`, 'weighted_clusters.overflow', `weights sum to ${sum}, more than a uint32 holds`);
  if (route && wc['total_weight'] !== undefined) {
    const total = num(wc['total_weight']);
    if (total !== sum) add(`${at}.total_weight`, 'weighted_clusters.total_weight', `is ${total}, but the weights sum to ${sum}`);
  }
}

function checkEndpoints(cla: Obj, base: string, add: Add): void {
  arr(cla['endpoints']).forEach((l, i) => {
    arr(obj(l)?.['lb_endpoints']).forEach((e, j) => {
      const endpoint = obj(obj(e)?.['endpoint']);
      if (!endpoint) return;
      const at = `${base}endpoints[${i}].lb_endpoints[${j}].endpoint`;
      const check = (address: unknown, p: string): void => {
        const sa = obj(obj(address)?.['socket_address']);
        if (!sa) return;
        const a = str(sa['address']) ?? '';
        if (ipVersion(a) === 0) add(`${p}.socket_address.address`, 'endpoint.ip_literal', `must be an IP address, got ${JSON.stringify(a)}`);
      };
      check(endpoint['address'], `${at}.address`);
      arr(endpoint['additional_addresses']).forEach((x, k) => check(obj(x)?.['address'], `${at}.additional_addresses[${k}].address`));
    });
  });
}

/** Finds every `RegexMatcher` (an object with a string `regex` and `google_re2`, or under `safe_regex`/`pattern`). */
/**
 * A step of a field path (`pgv-rules.ts`'s format), formatted only where something is found:
 * a field name, `<MessageName>` after a decoded `Any`, or an index.
 */
type Step = string | number;

function formatSteps(steps: readonly Step[], last: string): string {
  let s = '';
  for (const step of [...steps, last]) s += typeof step === 'number' ? `[${step}]` : step.startsWith('<') || s === '' ? step : `.${step}`;
  return s;
}

/** What one `walkNested` walk adds to, and the objects it may skip. */
interface NestedWalk {
  /** The secret references found; undefined: none collected (a Secret's own walk). */
  readonly refs: ResourceReference[] | undefined;
  readonly add: Add;
  /** {@link NestedFacts.barren}, when `refs` are collected (what is barren is so for such a walk). */
  readonly barren: WeakSet<object> | undefined;
  /** How many references and violations this walk found so far. */
  found: number;
}

/**
 * Walks every nested object and `Any` of `value`: adds to `walk.refs` (unless undefined) every
 * `SdsSecretConfig` fetched over ADS (the secrets the resource names; not walked further), and
 * reports regexes (`safe_regex`, `pattern`, `google_re2`) that RE2 rejects. An object in
 * `walk.barren` is skipped; one whose walk found nothing (and that has no `regex` of its own) is added to it.
 * `steps` is the path so far (restored on return).
 */
function walkNested(value: unknown, steps: Step[], parentKey: string, walk: NestedWalk): void {
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      steps.push(i);
      walkNested(value[i], steps, parentKey, walk);
      steps.pop();
    }
    return;
  }
  const o = obj(value);
  if (!o) return;
  const { refs, barren } = walk;
  if (barren?.has(o)) return;
  if (refs) {
    const name = str(o['name']);
    if (name !== undefined && 'sds_config' in o && isAds(o['sds_config'])) {
      refs.push({ typeUrl: TypeUrl.Secret, name, path: formatSteps(steps, 'name') });
      walk.found++;
      return;
    }
  }
  const found = walk.found;
  const regex = o['regex'];
  if (typeof regex === 'string' && (parentKey === 'safe_regex' || parentKey === 'pattern' || 'google_re2' in o) && regex !== '') {
    const at = formatSteps(steps, 'regex');
    const problem = re2Problem(regex);
    if (problem) {
      walk.add(at, RE2_UNSUPPORTED.test(regex) ? 'regex.re2_unsupported' : 'regex.compile', problem);
      walk.found++;
    }
  }
  const suffix = anySuffix(o);
  if (suffix) steps.push(suffix);
  for (const k in o) {
    const v = o[k];
    if (!v || typeof v !== 'object') continue;
    steps.push(k);
    walkNested(v, steps, k, walk);
    steps.pop();
  }
  if (suffix) steps.pop();
  if (barren && walk.found === found && typeof regex !== 'string') barren.add(o);
}
