import { isIP } from 'node:net';
import type { EndpointSlice, Endpoints, HTTPIngressPath, Ingress, IngressBackend, IngressServiceBackend, Pod, Service } from '../store/objects.js';
import type { StoreReader } from '../store/store.js';
import { hostCidr, parseCidr } from './cidr.js';
import { SERVICE_NAME_LABEL, selectorMatches } from './labels.js';
import type { PolicyProblem } from './problems.js';
import { re2Problem } from '../util/re2.js';
import type { IngressBackendPolicy, IngressPathMatch, IngressRoute, MeshService } from './types.js';

/**
 * Characters that make an `ImplementationSpecific` Ingress path a regular expression rather
 * than a plain prefix (what ingress-nginx's `use-regex` paths look like). `.` alone is not
 * one: it is common in literal paths (`/robots.txt`).
 */
const REGEX_CHARS = /[\^$*+?()[\]{}|\\]/;

/**
 * Resolves one Ingress path (networking.k8s.io/v1 `HTTPIngressPath`) into a match:
 * `Exact` → exact path; `Prefix` → segment-wise prefix without its trailing `/` (Kubernetes:
 * `/foo` and `/foo/` both match `/foo` and `/foo/bar`, not `/foobar`); `ImplementationSpecific`
 * → an RE2 regex when the path contains regex syntax, else a plain string prefix.
 * @returns the match, or an error message when the path is not usable.
 */
export function ingressPathMatch(path: HTTPIngressPath): IngressPathMatch | string {
  const text = path.path ?? '';
  switch (path.pathType) {
    case 'Exact':
    case 'Prefix': {
      if (!text.startsWith('/')) return `"${text}" does not start with "/" (required for pathType ${path.pathType})`;
      if (/[?#]/.test(text)) return `"${text}" contains "?" or "#"`;
      if (path.pathType === 'Exact') return { kind: 'exact', path: text };
      const trimmed = text.replace(/\/+$/, '');
      return { kind: 'prefix', path: trimmed === '' ? '/' : trimmed };
    }
    case 'ImplementationSpecific': {
      if (text === '') return { kind: 'string-prefix', path: '/' };
      if (!REGEX_CHARS.test(text)) {
        return text.startsWith('/') ? { kind: 'string-prefix', path: text } : `"${text}" does not start with "/"`;
      }
      const problem = re2Problem(text);
      if (problem) return problem;
      return { kind: 'regex', path: text };
    }
    default:
      return `pathType "${String(path.pathType)}" is not Exact, Prefix or ImplementationSpecific`;
  }
}

/** An Ingress reduced to the service backends its paths name, with their routes. */
interface ResolvedIngress {
  readonly name: string;
  readonly namespace: string;
  readonly paths: readonly { backend: IngressServiceBackend; route: IngressRoute }[];
}

/**
 * Resolves the Ingress objects of the monitored namespaces. An Ingress with an unusable path
 * is reported (field `spec.rules[i].http.paths[j].path`) and left out entirely.
 */
function resolveIngresses(store: StoreReader, namespaces: ReadonlySet<string>, problems: PolicyProblem[]): ResolvedIngress[] {
  const out: ResolvedIngress[] = [];
  for (const ing of store.list<Ingress>('Ingress')) {
    const ns = ing.metadata.namespace ?? 'default';
    if (!namespaces.has(ns)) continue;
    const name = `${ns}/${ing.metadata.name}`;
    const paths: { backend: IngressServiceBackend; route: IngressRoute }[] = [];
    let valid = true;
    const def = ing.spec?.defaultBackend?.service;
    if (def) paths.push({ backend: def, route: { ingress: name, host: undefined, match: { kind: 'prefix', path: '/' } } });
    (ing.spec?.rules ?? []).forEach((rule, i) => {
      const host = rule.host && rule.host !== '*' ? rule.host.toLowerCase() : undefined;
      (rule.http?.paths ?? []).forEach((p, j) => {
        const match = ingressPathMatch(p);
        if (typeof match === 'string') {
          problems.push({ kind: 'Ingress', namespace: ns, name: ing.metadata.name, field: `spec.rules[${i}].http.paths[${j}].path`, message: match });
          valid = false;
          return;
        }
        if (p.backend.service) paths.push({ backend: p.backend.service, route: { ingress: name, host, match } });
      });
    });
    if (valid) out.push({ name, namespace: ns, paths });
  }
  return out;
}

/** True when an Ingress service backend names `svc` (by service name, and port number or port name when given). */
function namesService(backend: IngressServiceBackend, svc: MeshService): boolean {
  if (backend.name !== svc.name) return false;
  if (backend.port?.number !== undefined) return backend.port.number === svc.port;
  if (backend.port?.name !== undefined) return backend.port.name === svc.portName;
  return true;
}

/**
 * The IPs of a Service's endpoints, in any namespace (an ingress controller usually runs
 * outside the mesh): from its Endpoints, else its EndpointSlices (ready endpoints), else the
 * running Pods its selector matches. Undefined when the Service does not exist.
 */
function sourceServiceIps(store: StoreReader, namespace: string, name: string): string[] | undefined {
  const svc = store.get<Service>('Service', namespace, name);
  if (!svc) return undefined;
  const ips = new Set<string>();
  const ep = store.get<Endpoints>('Endpoints', namespace, name);
  for (const subset of ep?.subsets ?? []) for (const a of subset.addresses ?? []) if (isIP(a.ip)) ips.add(a.ip);
  const slices = store.list<EndpointSlice>('EndpointSlice', namespace).filter((s) => s.metadata.labels?.[SERVICE_NAME_LABEL] === name);
  for (const slice of slices) {
    if (slice.addressType === 'FQDN') continue;
    for (const e of slice.endpoints ?? []) {
      if (e.conditions?.ready === false) continue;
      for (const ip of e.addresses) if (isIP(ip)) ips.add(ip);
    }
  }
  if (!ep && slices.length === 0) {
    for (const pod of store.list<Pod>('Pod', namespace)) {
      const phase = pod.status?.phase;
      if (phase === 'Failed' || phase === 'Succeeded' || !selectorMatches(svc.spec.selector, pod.metadata.labels)) continue;
      const ip = pod.status?.podIP ?? pod.status?.podIPs?.[0]?.ip;
      if (ip && isIP(ip)) ips.add(ip);
    }
  }
  return [...ips];
}

/**
 * Resolves the IngressBackends of the monitored namespaces (OSM v1.2
 * `MeshCatalog.GetIngressTrafficPolicy`, `pkg/catalog/ingress.go`): one
 * {@link IngressBackendPolicy} per backend, for the MeshService of that name whose target
 * port is `port.number`, with its sources turned into CIDRs (`Service` → `<ip>/32` of each
 * endpoint, `IPRange` → the CIDR) and principals (`AuthenticatedPrincipal`), and routes from
 * the Ingress objects naming that service port.
 *
 * Validation (each a {@link PolicyProblem} naming the IngressBackend and field; the whole
 * IngressBackend is then skipped, so nothing it would have allowed is allowed): a backend
 * service or target port that does not exist, a protocol other than http/https, an
 * `IPRange` that is not a CIDR, a `Service` source that does not exist or has no endpoints
 * (allowing it anyway would widen the source match to every address), an unknown source
 * kind, an https backend needing client certificates with no `AuthenticatedPrincipal`, and
 * a backend already exposed by another IngressBackend (the first by namespace/name wins).
 */
export function resolveIngressBackends(
  store: StoreReader,
  namespaces: ReadonlySet<string>,
  services: readonly MeshService[],
  problems: PolicyProblem[],
): IngressBackendPolicy[] {
  const ingresses = resolveIngresses(store, namespaces, problems);
  const out: IngressBackendPolicy[] = [];
  const taken = new Map<string, string>();
  const policies = [...store.list<IngressBackend>('IngressBackend')].sort((a, b) => {
    const ka = `${a.metadata.namespace ?? ''}/${a.metadata.name}`;
    const kb = `${b.metadata.namespace ?? ''}/${b.metadata.name}`;
    return ka < kb ? -1 : ka > kb ? 1 : 0;
  });
  for (const ib of policies) {
    const ns = ib.metadata.namespace ?? 'default';
    if (!namespaces.has(ns)) continue;
    const name = `${ns}/${ib.metadata.name}`;
    let valid = true;
    const report = (field: string, message: string): void => {
      problems.push({ kind: 'IngressBackend', namespace: ns, name: ib.metadata.name, field, message });
      valid = false;
    };

    const ranges = new Set<string>();
    const principals = new Set<string>();
    (ib.spec.sources ?? []).forEach((src, i) => {
      switch (src.kind) {
        case 'Service': {
          const srcNs = src.namespace ?? ns;
          const ips = sourceServiceIps(store, srcNs, src.name);
          if (ips === undefined) report(`spec.sources[${i}].name`, `Service ${srcNs}/${src.name} does not exist`);
          else if (ips.length === 0) report(`spec.sources[${i}].name`, `Service ${srcNs}/${src.name} has no endpoints`);
          else for (const ip of ips) ranges.add(hostCidr(ip));
          break;
        }
        case 'IPRange':
          if (!parseCidr(src.name)) report(`spec.sources[${i}].name`, `"${src.name}" is not a CIDR range`);
          else ranges.add(src.name);
          break;
        case 'AuthenticatedPrincipal':
          if (!src.name) report(`spec.sources[${i}].name`, 'empty principal');
          else principals.add(src.name);
          break;
        default:
          report(`spec.sources[${i}].kind`, `"${src.kind}" is not Service, IPRange or AuthenticatedPrincipal`);
      }
    });

    const backends: IngressBackendPolicy[] = [];
    const seen = new Set<string>();
    (ib.spec.backends ?? []).forEach((b, i) => {
      const protocol = b.port.protocol.toLowerCase();
      if (protocol !== 'http' && protocol !== 'https') {
        report(`spec.backends[${i}].port.protocol`, `"${b.port.protocol}" is not http or https`);
        return;
      }
      const ports = services.filter((s) => s.namespace === ns && s.name === b.name);
      if (ports.length === 0) {
        report(`spec.backends[${i}].name`, `Service ${ns}/${b.name} does not exist in the mesh`);
        return;
      }
      // OSM: port.number is the service's target port; several service ports may share it.
      const svc = ports.find((s) => s.targetPort === b.port.number);
      if (!svc) {
        report(`spec.backends[${i}].port.number`, `Service ${ns}/${b.name} has no port with target port ${b.port.number}`);
        return;
      }
      const key = `${ns}/${b.name}|${b.port.number}`;
      const other = taken.get(key);
      if (seen.has(key) || other) {
        report(`spec.backends[${i}]`, `${ns}/${b.name} port ${b.port.number} is already exposed by IngressBackend ${other ?? name}`);
        return;
      }
      seen.add(key);
      const skip = protocol === 'https' && (b.tls?.skipClientCertValidation ?? false);
      if (protocol === 'https' && !skip && principals.size === 0) {
        report('spec.sources', `backend ${b.name} is https with client certificate validation: an AuthenticatedPrincipal source is required`);
        return;
      }
      const routes = ingresses
        .filter((ing) => ing.namespace === ns)
        .flatMap((ing) => ing.paths.filter((p) => namesService(p.backend, svc)).map((p) => p.route));
      backends.push({
        name,
        service: svc,
        protocol,
        skipClientCertValidation: skip,
        sniHosts: protocol === 'https' ? [...new Set(b.tls?.sniHosts ?? [])] : [],
        sourceIpRanges: [...ranges].sort(),
        principals: protocol === 'https' ? [...principals].sort() : [],
        routes,
      });
    });
    if (!valid) continue;
    for (const b of backends) taken.set(`${ns}/${b.service.name}|${b.service.targetPort}`, name);
    out.push(...backends);
  }
  return out;
}
