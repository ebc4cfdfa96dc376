import { serviceKey } from '../catalog/names.js';
import { inboundServices } from '../catalog/traffic-policy.js';
import type { IngressBackendPolicy } from '../catalog/types.js';
import type { GenerationContext, ProxyProfile } from './context.js';
import { byKey } from '../util/order.js';

/**
 * What the ingress backends served by one proxy need on one target port and protocol: one
 * inbound filter chain. Backends of several services on the same pod port cannot be told
 * apart below HTTP, so they share a chain whose match is the union of theirs (an empty list
 * in any of them — any source, any SNI — makes the union empty, i.e. any).
 */
export interface IngressChainPlan {
  /** Chain name, OSM v1.2 `IngressTrafficMatchName`: `ingress_<ns>/<svc>_<port>_<protocol>` of the first backend. */
  readonly name: string;
  /** The target port: the destination port of the chain and the port of `rds-ingress.<port>`. */
  readonly port: number;
  readonly protocol: 'http' | 'https';
  readonly sourceIpRanges: readonly string[];
  readonly sniHosts: readonly string[];
  /** https: accept clients without validating a certificate (true when any backend on the chain skips it). */
  readonly skipClientCertValidation: boolean;
  /** https with client certificates: the allowed certificate SANs (RBAC principals). */
  readonly principals: readonly string[];
  readonly backends: readonly IngressBackendPolicy[];
}

function union(lists: readonly (readonly string[])[]): string[] {
  if (lists.some((l) => l.length === 0)) return [];
  return [...new Set(lists.flat())].sort();
}

/** The IngressBackend backends whose service the proxy serves (its identity backs the service). */
export function proxyIngressBackends(context: GenerationContext, profile: ProxyProfile): IngressBackendPolicy[] {
  const served = new Set(inboundServices(context.snapshot, profile.identity).map((s) => `${serviceKey(s)}|${s.port}`));
  return context.snapshot.ingressBackends.filter((b) => served.has(`${serviceKey(b.service)}|${b.service.port}`));
}

/**
 * The ingress filter chains a proxy needs, one per (target port, protocol), sorted by port
 * then protocol (OSM v1.2 `getIngressFilterChains`, one `IngressTrafficMatch` per backend).
 */
export function ingressChainPlans(context: GenerationContext, profile: ProxyProfile): IngressChainPlan[] {
  const groups = new Map<string, IngressBackendPolicy[]>();
  for (const b of proxyIngressBackends(context, profile)) {
    const key = `${String(b.service.targetPort).padStart(5, '0')}|${b.protocol}`;
    groups.set(key, [...(groups.get(key) ?? []), b]);
  }
  return [...groups.entries()]
    .sort(byKey)
    .map(([, backends]) => {
      const first = backends[0];
      const svc = first.service;
      return {
        name: `ingress_${serviceKey(svc)}_${svc.targetPort}_${first.protocol}`,
        port: svc.targetPort,
        protocol: first.protocol,
        sourceIpRanges: union(backends.map((b) => b.sourceIpRanges)),
        sniHosts: union(backends.map((b) => b.sniHosts)),
        skipClientCertValidation: backends.some((b) => b.skipClientCertValidation),
        principals: [...new Set(backends.flatMap((b) => b.principals))].sort(),
        backends,
      };
    });
}
