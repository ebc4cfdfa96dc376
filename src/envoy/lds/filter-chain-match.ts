import type { CidrRange } from '../../api/generated/envoy/config/core/v3/CidrRange.js';
import type { FilterChain } from '../../api/generated/envoy/config/listener/v3/FilterChain.js';
import type { FilterChainMatch } from '../../api/generated/envoy/config/listener/v3/FilterChainMatch.js';
import { parseCidr } from '../../catalog/cidr.js';

/** A `config.core.v3.CidrRange` from `a.b.c.d/n` text (the caller has validated it). */
export function cidrRange(text: string): CidrRange {
  const parts = parseCidr(text);
  if (!parts) throw new Error(`not a CIDR range: ${text}`);
  return { address_prefix: parts.address, prefix_len: { value: parts.prefixLength } };
}

function cidrKey(r: CidrRange): string {
  const len = r.prefix_len && typeof r.prefix_len === 'object' ? r.prefix_len.value : undefined;
  return `${r.address_prefix ?? ''}/${len ?? ''}`;
}

function values<T>(list: readonly T[] | undefined, key: (v: T) => string): string[] {
  return list && list.length > 0 ? list.map(key) : ['*'];
}

/**
 * The match "leaves" of a filter chain: every combination of one value per criterion
 * (destination port, destination range, server name, transport protocol, application
 * protocol, direct source range, source type, source range, source port; an empty criterion
 * is `*`). Envoy's filter chain manager builds its matching tree from exactly these and
 * rejects a listener in which two chains share a leaf ("multiple filter chains with the same
 * matching rules are defined"), even when their matches differ as a whole.
 */
export function filterChainLeaves(match: FilterChainMatch | null | undefined): string[] {
  const m = match ?? {};
  const port = m.destination_port && typeof m.destination_port === 'object' ? String(m.destination_port.value ?? '') : '*';
  const dims: string[][] = [
    [port],
    values(m.prefix_ranges, cidrKey),
    values(m.server_names, (s) => s),
    [m.transport_protocol || '*'],
    values(m.application_protocols, (s) => s),
    values(m.direct_source_prefix_ranges, cidrKey),
    [m.source_type ? String(m.source_type) : 'ANY'],
    values(m.source_prefix_ranges, cidrKey),
    values(m.source_ports, (p) => String(p)),
  ];
  let out = [''];
  for (const dim of dims) out = out.flatMap((prefix) => dim.map((v) => `${prefix}|${v}`));
  return out;
}

type ListCriterion = 'server_names' | 'prefix_ranges' | 'source_prefix_ranges';
const PRUNABLE: readonly ListCriterion[] = ['server_names', 'prefix_ranges', 'source_prefix_ranges'];

function collides(match: FilterChainMatch, taken: ReadonlySet<string>): boolean {
  return filterChainLeaves(match).some((leaf) => taken.has(leaf));
}

/**
 * Adds `added` chains after `existing` ones so that no two chains of the listener share a
 * match leaf ({@link filterChainLeaves}): an added chain that collides loses the server
 * names, destination ranges or source ranges that collide (never all of them, which would
 * widen its match); a chain that still collides, or has nothing left, is left out. The
 * existing chains, and earlier added ones, win.
 * @returns the added chains that remain, possibly with narrower matches.
 */
export function uniqueChains(existing: readonly FilterChain[], added: readonly FilterChain[]): FilterChain[] {
  const taken = new Set(existing.flatMap((c) => filterChainLeaves(c.filter_chain_match)));
  const out: FilterChain[] = [];
  for (const chain of added) {
    let match: FilterChainMatch = { ...(chain.filter_chain_match ?? {}) };
    let dropped = false;
    for (const criterion of PRUNABLE) {
      if (!collides(match, taken)) break;
      const list = match[criterion] as readonly (string | CidrRange)[] | undefined;
      if (!list || list.length < 1) continue;
      const kept = list.filter((v) => !collides({ ...match, [criterion]: [v] }, taken));
      if (kept.length === 0) {
        dropped = true;
        break;
      }
      match = { ...match, [criterion]: kept };
    }
    if (dropped || collides(match, taken)) continue;
    for (const leaf of filterChainLeaves(match)) taken.add(leaf);
    out.push({ ...chain, filter_chain_match: match });
  }
  return out;
}
