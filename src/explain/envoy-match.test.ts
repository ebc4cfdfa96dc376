import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Listener } from '../api/generated/envoy/config/listener/v3/Listener.js';
import type { RouteConfiguration } from '../api/generated/envoy/config/route/v3/RouteConfiguration.js';
import { rbacAdmitting, rbacPolicies, routeMatches, selectFilterChain, selectVirtualHost, type ConnectionFacts, type RequestFacts } from './envoy-match.js';

const cidr = (address: string, len: number) => ({ address_prefix: address, prefix_len: { value: len } });
const facts = (over: Partial<ConnectionFacts>): ConnectionFacts => ({ destinationPort: 80, destinationIp: '10.0.0.5', serverName: undefined, transportProtocol: 'raw_buffer', sourceIp: undefined, ...over });
const request = (over: Partial<RequestFacts>): RequestFacts => ({ authority: 'a.example', path: '/', method: 'GET', headers: {}, ...over });

describe('explain/envoy-match: Envoy\'s selection over generated configuration', () => {
  const listener: Listener = {
    name: 'l',
    filter_chains: [
      { name: 'port-only', filter_chain_match: { destination_port: { value: 80 } } },
      { name: 'wide', filter_chain_match: { destination_port: { value: 80 }, prefix_ranges: [cidr('10.0.0.0', 8)] } },
      { name: 'narrow', filter_chain_match: { destination_port: { value: 80 }, prefix_ranges: [cidr('10.0.0.0', 24)] } },
      { name: 'sni', filter_chain_match: { destination_port: { value: 443 }, server_names: ['a.example'], transport_protocol: 'tls' } },
      { name: 'from-ingress', filter_chain_match: { destination_port: { value: 8080 }, source_prefix_ranges: [cidr('10.244.9.1', 32)] } },
    ],
  };

  it('picks the longest destination prefix, falls back to chains without one, and does not backtrack past a port that matched', () => {
    assert.equal(selectFilterChain(listener, facts({})).chain?.name, 'narrow');
    assert.equal(selectFilterChain(listener, facts({ destinationIp: '10.9.0.1' })).chain?.name, 'wide');
    assert.equal(selectFilterChain(listener, facts({ destinationIp: '192.168.0.1' })).chain?.name, 'port-only');
    const none = selectFilterChain(listener, facts({ destinationPort: 81 }));
    assert.equal(none.chain, undefined);
    assert.match((none as { reason: string }).reason, /no filter chain of l matches destination port 81/);
    assert.equal(selectFilterChain({ ...listener, default_filter_chain: { name: 'default' } }, facts({ destinationPort: 81 })).chain?.name, 'default');
  });

  it('matches server names and transport protocol, and source ranges', () => {
    assert.equal(selectFilterChain(listener, facts({ destinationPort: 443, serverName: 'a.example', transportProtocol: 'tls' })).chain?.name, 'sni');
    assert.equal(selectFilterChain(listener, facts({ destinationPort: 443, serverName: 'b.example', transportProtocol: 'tls' })).chain, undefined);
    assert.equal(selectFilterChain(listener, facts({ destinationPort: 443, serverName: 'a.example', transportProtocol: 'raw_buffer' })).chain, undefined);
    assert.equal(selectFilterChain(listener, facts({ destinationPort: 8080, sourceIp: '10.244.9.1' })).chain?.name, 'from-ingress');
    assert.equal(selectFilterChain(listener, facts({ destinationPort: 8080, sourceIp: '10.244.9.2' })).chain, undefined);
    assert.equal(selectFilterChain(listener, facts({ destinationPort: 8080, sourceIp: undefined })).chain, undefined);
  });

  it('picks virtual hosts exact first, then suffix, prefix and * wildcards, case-insensitively', () => {
    const config: RouteConfiguration = {
      virtual_hosts: [
        { name: 'any', domains: ['*'] },
        { name: 'suffix', domains: ['*.example'] },
        { name: 'longer-suffix', domains: ['*.b.example'] },
        { name: 'prefix', domains: ['api.*'] },
        { name: 'exact', domains: ['a.b.example'] },
      ],
    };
    assert.equal(selectVirtualHost(config, 'A.B.example')?.name, 'exact');
    assert.equal(selectVirtualHost(config, 'c.b.example')?.name, 'longer-suffix');
    assert.equal(selectVirtualHost(config, 'c.example')?.name, 'suffix');
    assert.equal(selectVirtualHost(config, 'api.other')?.name, 'prefix');
    assert.equal(selectVirtualHost(config, 'elsewhere')?.name, 'any');
    assert.equal(selectVirtualHost({ virtual_hosts: [{ name: 'x', domains: ['x'] }] }, 'y'), undefined);
  });

  it('matches routes as Envoy: prefix with the query, regex and path-separated prefix on the path alone, whole-value header regexes', () => {
    assert.deepEqual(routeMatches({ match: { prefix: '/a' } }, request({ path: '/abc?x=1' })), { matched: true });
    assert.deepEqual(routeMatches({ match: { safe_regex: { regex: '/books' } } }, request({ path: '/books?x=1' })), { matched: true });
    assert.equal(routeMatches({ match: { safe_regex: { regex: '/books' } } }, request({ path: '/books-bought' })).matched, false, 'the whole path');
    assert.equal(routeMatches({ match: { path_separated_prefix: '/foo' } }, request({ path: '/foo/bar' })).matched, true);
    assert.equal(routeMatches({ match: { path_separated_prefix: '/foo' } }, request({ path: '/foobar' })).matched, false);
    const withHeaders = { match: { prefix: '/', headers: [{ name: ':method', string_match: { safe_regex: { regex: '^(GET)$' } } }, { name: 'x-app', string_match: { safe_regex: { regex: 'buy' } } }] } };
    assert.deepEqual(routeMatches(withHeaders, request({ headers: { 'x-app': 'buy' } })), { matched: true });
    assert.deepEqual(routeMatches(withHeaders, request({ headers: { 'x-app': 'buyer' } })), { matched: false, reason: 'header x-app "buyer" does not match (the route wants it to match buy)' });
    assert.deepEqual(routeMatches(withHeaders, request({ method: 'PUT', headers: { 'x-app': 'buy' } })), { matched: false, reason: 'method "PUT" does not match (the route wants it to match ^(GET)$)' });
    assert.deepEqual(routeMatches(withHeaders, request({ method: 'PUT' })), {
      matched: false,
      reason: 'method "PUT" does not match (the route wants it to match ^(GET)$); header x-app is missing (the route wants it to match buy)',
    }, 'every header that fails');
    assert.equal(routeMatches({ match: { prefix: '/', headers: [{ name: ':authority', string_match: { safe_regex: { regex: 'a\\.example' } } }] } }, request({})).matched, true);
  });

  it('admits a principal an ALLOW policy names; no policy admits nobody', () => {
    const policies = rbacPolicies({ rules: { action: 'ALLOW', policies: { p: { principals: [{ authenticated: { principal_name: { exact: 'spiffe://x' } } }] } } } });
    assert.deepEqual(policies, [{ name: 'p', principals: ['spiffe://x'] }]);
    assert.equal(rbacAdmitting(policies, 'spiffe://x')?.name, 'p');
    assert.equal(rbacAdmitting(policies, 'spiffe://y'), undefined);
    assert.equal(rbacAdmitting(policies, undefined), undefined);
    assert.equal(rbacAdmitting(rbacPolicies({ rules: { action: 'ALLOW', policies: {} } }), 'spiffe://x'), undefined);
  });
});
