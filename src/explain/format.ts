import type { Explanation, InboundExplanation, RbacVerdict, RouteHop } from './explain.js';

function clusters(list: readonly { name: string; weight: number }[]): string {
  return list.map((c) => (list.length > 1 || c.weight !== 1 ? `${c.name} (weight ${c.weight})` : c.name)).join(', ');
}

function routeLines(hop: RouteHop, indent: string): string[] {
  const lines = [`${indent}route configuration ${hop.routeConfiguration} → virtual host ${hop.virtualHost ?? '(none)'} → route ${hop.route ?? '(none matches)'}`];
  for (const miss of hop.misses) lines.push(`${indent}  not ${hop.route ? 'taken' : 'matched'}: ${miss.route}: ${miss.reason}`);
  return lines;
}

function rbacLines(label: string, rbac: RbacVerdict, indent: string): string[] {
  const lines = rbac.policies.length === 0 ? [`${indent}${label}: no policy (admits nobody)`] : rbac.policies.map((p) => `${indent}${label} policy ${p.name}: principals ${p.principals.join(', ') || '(none)'}`);
  lines.push(`${indent}  ${rbac.admittedBy ? `admits ${rbac.principal ?? 'the peer'} (policy ${rbac.admittedBy})` : `admits none of ${rbac.principal ?? '(no client certificate)'}`}`);
  return lines;
}

function inboundLines(i: InboundExplanation): string[] {
  const verdict = !i.reached ? 'not reached' : i.allowed ? 'ALLOWED' : 'DENIED';
  const lines = [
    `destination ${i.service} as ${i.identity} (cluster ${i.cluster}${i.weight !== 1 ? `, weight ${i.weight}` : ''}, ${i.via === 'mesh' ? 'mTLS from the source sidecar' : 'plaintext'}${i.reached ? '' : ': what its inbound side holds'}): ${verdict}`,
    `  listener inbound-listener, filter chain ${i.filterChain ?? '(none)'}`,
  ];
  if (i.networkRbac) lines.push(...rbacLines(i.networkRbac.filter, i.networkRbac, '  '));
  if (i.route) lines.push(...routeLines(i.route, '  '));
  if (i.httpRbac) lines.push(...rbacLines('http RBAC', i.httpRbac, '  '));
  if (i.localCluster) lines.push(`  local cluster ${i.localCluster}`);
  for (const p of i.policies) lines.push(`  by ${p}`);
  if (i.denied) lines.push(`  denied: ${i.denied}`);
  return lines;
}

/**
 * The text form of an {@link Explanation} (`trellis explain --output text`): the verdict and
 * request, the reasons, then the source proxy's outbound side (listener, filter chain, route
 * configuration, virtual host, route, clusters, TrafficSplit) and each destination identity's
 * inbound side (filter chain, network RBAC, route, per-route RBAC, policies).
 */
export function formatExplanation(e: Explanation): string {
  const r = e.request;
  const headers = Object.entries(r.headers).map(([k, v]) => `${k}: ${v}`);
  const lines = [
    `${e.decision.toUpperCase()}: ${r.sourcePod ? `pod ${r.sourcePod} (${r.source})` : r.source} → ${r.destination} ${r.protocol === 'http' || r.protocol === 'grpc' ? `${r.method} ${r.path}` : `(${r.protocol})`}`,
    `  ${e.mode === 'permissive' ? 'permissive mode' : 'SMI mode'}${e.meshConfig ? ` (MeshConfig ${e.meshConfig})` : ''}, snapshot generation ${e.generation}; host ${r.authority}${headers.length > 0 ? `; headers ${headers.join(', ')}` : ''}`,
    'why:',
    ...e.reasons.map((x) => `  - ${x}`),
  ];
  const o = e.outbound;
  if (o) {
    lines.push(`source proxy ${r.source} (outbound):`);
    lines.push(`  listener ${o.listener ?? '(none)'}, filter chain ${o.filterChain ?? '(none)'} for ${o.address}`);
    if (o.route) lines.push(...routeLines(o.route, '  '));
    if (o.clusters.length > 0) lines.push(`  clusters ${clusters(o.clusters)}`);
    if (o.trafficSplit) lines.push(`  TrafficSplit ${o.trafficSplit.name}: ${o.trafficSplit.backends.map((b) => `${b.service} ${b.weight}`).join(', ')}`);
    if (e.mode === 'smi') lines.push(`  TrafficTargets letting ${r.source} reach ${r.service}: ${o.trafficTargets.join(', ') || 'none'}`);
    if (o.denied) lines.push(`  denied: ${o.denied}`);
  } else {
    lines.push(`source ${r.source}: outside the mesh (no sidecar)${r.sourceIps.length > 0 ? `, address ${r.sourceIps[0]}` : ', no address known'}`);
  }
  for (const i of e.inbound) lines.push(...inboundLines(i));
  return `${lines.join('\n')}\n`;
}
