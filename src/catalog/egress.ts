import { isIP } from 'node:net';
import type { Egress, HTTPRouteGroup, UpstreamTrafficSetting } from '../store/objects.js';
import type { StoreReader } from '../store/store.js';
import { serviceIdentity, type ServiceIdentity } from '../proxy/types.js';
import { parseCidr } from './cidr.js';
import type { PolicyProblem } from './problems.js';
import type { EgressPolicy, EgressPort, HttpRouteMatch } from './types.js';
import { byName } from '../util/order.js';

/** The protocols an Egress port may name (OSM v1.2 `PortSpec.protocol`). */
const EGRESS_PROTOCOLS: readonly EgressPort['protocol'][] = ['http', 'https', 'tcp', 'tcp-server-first'];

/** A DNS name (labels of letters, digits and `-`), optionally with a leading `*.` wildcard label. */
const HOST_RE = /^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*\.?$/i;

/** True when `host` is usable as an Egress host: a DNS name, a `*.`-wildcard name, or an IPv4 literal. */
export function isEgressHost(host: string): boolean {
  return host.length <= 253 && (HOST_RE.test(host) || isIP(host) === 4);
}

/** The SMI HTTPRouteGroup matches as {@link HttpRouteMatch}es (no path → every path; `*` method → any). */
function groupMatches(ns: string, group: HTTPRouteGroup): HttpRouteMatch[] {
  return (group.spec.matches ?? []).map((m) => {
    const headers: Record<string, string> = {};
    const list = Array.isArray(m.headers) ? m.headers : m.headers ? [m.headers] : [];
    for (const h of list) Object.assign(headers, h);
    const methods = (m.methods ?? []).includes('*') ? [] : [...(m.methods ?? [])];
    return { name: `${ns}/${group.metadata.name}/${m.name}`, pathRegex: m.pathRegex || undefined, methods, headers };
  });
}

/**
 * Resolves the Egress policies of the monitored namespaces (OSM v1.2
 * `MeshCatalog.GetEgressTrafficPolicy`, `pkg/catalog/egress.go`): sources (ServiceAccounts),
 * hosts, IP ranges, ports with protocol, and the HTTP matches of the HTTPRouteGroups named in
 * `matches` (same namespace). UpstreamTrafficSettings named in `matches` are checked to exist
 * and recorded by name.
 *
 * Validation (each a {@link PolicyProblem} naming the Egress and field; the Egress is then
 * skipped whole, so it never allows more than written): no ServiceAccount source, a source
 * kind other than ServiceAccount, a host that is not a DNS name / `*.` wildcard / IPv4
 * literal, an `ipAddresses` entry that is not a CIDR, a port outside 1–65535 or listed twice,
 * an unknown protocol, an http port without hosts, a `matches` entry naming an HTTPRouteGroup
 * or UpstreamTrafficSetting that does not exist, or of another kind.
 */
export function resolveEgressPolicies(store: StoreReader, namespaces: ReadonlySet<string>, problems: PolicyProblem[]): EgressPolicy[] {
  const out: EgressPolicy[] = [];
  for (const eg of store.list<Egress>('Egress')) {
    const ns = eg.metadata.namespace ?? 'default';
    if (!namespaces.has(ns)) continue;
    let valid = true;
    const report = (field: string, message: string): void => {
      problems.push({ kind: 'Egress', namespace: ns, name: eg.metadata.name, field, message });
      valid = false;
    };
    const sources: ServiceIdentity[] = [];
    (eg.spec.sources ?? []).forEach((s, i) => {
      if (s.kind !== 'ServiceAccount') report(`spec.sources[${i}].kind`, `"${s.kind}" is not ServiceAccount`);
      else sources.push(serviceIdentity(s.namespace ?? ns, s.name));
    });
    if (sources.length === 0 && valid) report('spec.sources', 'no ServiceAccount source');

    const hosts: string[] = [];
    (eg.spec.hosts ?? []).forEach((h, i) => {
      if (!isEgressHost(h)) report(`spec.hosts[${i}]`, `"${h}" is not a DNS name, a *.wildcard name or an IPv4 address`);
      else {
        const host = h.toLowerCase().replace(/\.$/, '');
        if (!hosts.includes(host)) hosts.push(host);
      }
    });
    const ipRanges: string[] = [];
    (eg.spec.ipAddresses ?? []).forEach((r, i) => {
      if (!parseCidr(r)) report(`spec.ipAddresses[${i}]`, `"${r}" is not a CIDR range`);
      else if (!ipRanges.includes(r)) ipRanges.push(r);
    });

    const ports: EgressPort[] = [];
    (eg.spec.ports ?? []).forEach((p, i) => {
      const protocol = p.protocol.toLowerCase() as EgressPort['protocol'];
      if (!Number.isInteger(p.number) || p.number < 1 || p.number > 65535) {
        report(`spec.ports[${i}].number`, `${String(p.number)} is not a port number`);
      } else if (!EGRESS_PROTOCOLS.includes(protocol)) {
        report(`spec.ports[${i}].protocol`, `"${p.protocol}" is not one of ${EGRESS_PROTOCOLS.join(', ')}`);
      } else if (ports.some((q) => q.number === p.number)) {
        report(`spec.ports[${i}].number`, `port ${p.number} is listed twice`);
      } else if (protocol === 'http' && (eg.spec.hosts ?? []).length === 0) {
        report('spec.hosts', `port ${p.number} is http: HTTP egress is routed by host, so hosts are required`);
      } else ports.push({ number: p.number, protocol });
    });
    if ((eg.spec.ports ?? []).length === 0) report('spec.ports', 'no port');

    const httpMatches: HttpRouteMatch[] = [];
    const upstreamTrafficSettings: string[] = [];
    (eg.spec.matches ?? []).forEach((m, i) => {
      if (m.kind === 'HTTPRouteGroup') {
        const group = store.get<HTTPRouteGroup>('HTTPRouteGroup', ns, m.name);
        if (!group) report(`spec.matches[${i}].name`, `HTTPRouteGroup ${ns}/${m.name} does not exist`);
        else httpMatches.push(...groupMatches(ns, group));
      } else if (m.kind === 'UpstreamTrafficSetting') {
        if (!store.get<UpstreamTrafficSetting>('UpstreamTrafficSetting', ns, m.name)) {
          report(`spec.matches[${i}].name`, `UpstreamTrafficSetting ${ns}/${m.name} does not exist`);
        } else upstreamTrafficSettings.push(m.name);
      } else {
        report(`spec.matches[${i}].kind`, `"${m.kind}" is not HTTPRouteGroup or UpstreamTrafficSetting`);
      }
    });
    if (!valid) continue;
    out.push({ name: `${ns}/${eg.metadata.name}`, sources, hosts, ipRanges, ports, httpMatches, upstreamTrafficSettings });
  }
  return out.sort(byName);
}
