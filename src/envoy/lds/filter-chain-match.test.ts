import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { FilterChain } from '../../api/generated/envoy/config/listener/v3/FilterChain.js';
import { cidrRange, filterChainLeaves, uniqueChains } from './filter-chain-match.js';

const port = (value: number) => ({ destination_port: { value } });

describe('filter chain match leaves', () => {
  it('expands every combination of criteria', () => {
    const leaves = filterChainLeaves({ ...port(80), prefix_ranges: [cidrRange('10.0.0.1/32'), cidrRange('10.0.0.2/32')], server_names: ['a', 'b'] });
    assert.equal(leaves.length, 4);
    assert.equal(new Set(leaves).size, 4);
  });

  const cases: { name: string; existing: FilterChain[]; added: FilterChain[]; expected: (FilterChain['filter_chain_match'] | 'dropped')[] }[] = [
    {
      name: 'a chain that differs only by having no ranges is kept',
      existing: [{ name: 'mesh', filter_chain_match: { ...port(80), prefix_ranges: [cidrRange('10.96.0.1/32')] } }],
      added: [{ name: 'egress', filter_chain_match: port(80) }],
      expected: [port(80)],
    },
    {
      name: 'a shared range is pruned, the rest kept',
      existing: [{ name: 'mesh', filter_chain_match: { ...port(80), prefix_ranges: [cidrRange('10.96.0.1/32')] } }],
      added: [{ name: 'egress', filter_chain_match: { ...port(80), prefix_ranges: [cidrRange('10.96.0.1/32'), cidrRange('1.2.3.0/24')] } }],
      expected: [{ ...port(80), prefix_ranges: [cidrRange('1.2.3.0/24')] }],
    },
    {
      name: 'a chain whose only range collides is dropped, never widened',
      existing: [{ name: 'mesh', filter_chain_match: { ...port(80), prefix_ranges: [cidrRange('10.96.0.1/32')] } }],
      added: [{ name: 'egress', filter_chain_match: { ...port(80), prefix_ranges: [cidrRange('10.96.0.1/32')] } }],
      expected: ['dropped'],
    },
    {
      name: 'an identical match without list criteria is dropped',
      existing: [{ name: 'a', filter_chain_match: { ...port(80), transport_protocol: 'raw_buffer' } }],
      added: [{ name: 'b', filter_chain_match: { ...port(80), transport_protocol: 'raw_buffer' } }],
      expected: ['dropped'],
    },
    {
      name: 'a colliding server name is pruned',
      existing: [{ name: 'mesh', filter_chain_match: { ...port(443), server_names: ['svc.ns.svc.cluster.local'], transport_protocol: 'tls' } }],
      added: [{ name: 'in', filter_chain_match: { ...port(443), server_names: ['svc.ns.svc.cluster.local', 'x.example.com'], transport_protocol: 'tls' } }],
      expected: [{ ...port(443), server_names: ['x.example.com'], transport_protocol: 'tls' }],
    },
    {
      name: 'added chains also stay unique among themselves (the first wins)',
      existing: [],
      added: [
        { name: 'x', filter_chain_match: port(25) },
        { name: 'y', filter_chain_match: port(25) },
      ],
      expected: [port(25), 'dropped'],
    },
  ];
  for (const tc of cases) {
    it(tc.name, () => {
      const out = uniqueChains(tc.existing, tc.added);
      const byName = new Map(out.map((c) => [c.name, c.filter_chain_match]));
      assert.deepEqual(
        tc.added.map((c) => byName.get(c.name) ?? 'dropped'),
        tc.expected,
      );
    });
  }
});
