import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { MeshConfig, Pod } from '../store/objects.js';
import { INBOUND_PORT, InterceptionConfigError, OUTBOUND_PORT, PROXY_UID, interceptionOptions, interceptionRules } from './iptables.js';

function meshConfig(traffic: Record<string, unknown>): MeshConfig {
  return { apiVersion: 'config.openservicemesh.io/v1alpha2', kind: 'MeshConfig', metadata: { name: 'osm-mesh-config', namespace: 'osm-system' }, spec: { traffic } } as MeshConfig;
}

function pod(annotations: Record<string, string> = {}): Pod {
  return { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'bookstore-v1-0', namespace: 'bookstore', annotations } };
}

/** The rules of one chain, in order, without the `-A CHAIN ` prefix. */
function chain(rules: string, name: string): string[] {
  return rules
    .split('\n')
    .filter((line) => line.startsWith(`-A ${name} `))
    .map((line) => line.slice(`-A ${name} `.length));
}

describe('interceptionOptions', () => {
  it('gives OSM defaults without MeshConfig or annotations', () => {
    assert.deepEqual(interceptionOptions(undefined, pod()), {
      proxyUid: PROXY_UID,
      outboundPort: OUTBOUND_PORT,
      inboundPort: INBOUND_PORT,
      outboundIPRangeExclusions: [],
      outboundIPRangeInclusions: [],
      outboundPortExclusions: [],
      inboundPortExclusions: [],
      networkInterfaceExclusions: [],
    });
  });

  it('merges MeshConfig lists and pod annotations as OSM does (IP ranges: pod first; ports: MeshConfig first; no duplicates)', () => {
    const options = interceptionOptions(
      meshConfig({
        outboundIPRangeExclusionList: ['10.0.0.0/8', '192.168.0.0/16'],
        outboundIPRangeInclusionList: ['10.96.0.0/12'],
        outboundPortExclusionList: [6379, 3306],
        inboundPortExclusionList: [8080],
        networkInterfaceExclusionList: ['eth1', 'veth+'],
      }),
      pod({
        'openservicemesh.io/outbound-ip-range-exclusion-list': '192.168.0.0/16, 172.16.0.0/12',
        'openservicemesh.io/outbound-ip-range-inclusion-list': '10.250.0.0/24',
        'openservicemesh.io/outbound-port-exclusion-list': '3306,9000',
        'openservicemesh.io/inbound-port-exclusion-list': ' 9090 ',
      }),
    );
    assert.deepEqual(options.outboundIPRangeExclusions, ['192.168.0.0/16', '172.16.0.0/12', '10.0.0.0/8']);
    assert.deepEqual(options.outboundIPRangeInclusions, ['10.250.0.0/24', '10.96.0.0/12']);
    assert.deepEqual(options.outboundPortExclusions, [6379, 3306, 9000]);
    assert.deepEqual(options.inboundPortExclusions, [8080, 9090]);
    assert.deepEqual(options.networkInterfaceExclusions, ['eth1', 'veth+']);
  });

  const invalid: [string, () => unknown, RegExp][] = [
    [
      'a bad CIDR in the MeshConfig',
      () => interceptionOptions(meshConfig({ outboundIPRangeExclusionList: ['10.0.0.0/8', '10.0.0.300/8'] }), pod()),
      /^MeshConfig osm-system\/osm-mesh-config: spec\.traffic\.outboundIPRangeExclusionList\[1\]: "10\.0\.0\.300\/8" is not an IP range in CIDR notation/,
    ],
    [
      'an address without prefix length in the inclusion list',
      () => interceptionOptions(meshConfig({ outboundIPRangeInclusionList: ['10.0.0.1'] }), pod()),
      /spec\.traffic\.outboundIPRangeInclusionList\[0\]: "10\.0\.0\.1" is not an IP range/,
    ],
    [
      'an IPv6 range (iptables is IPv4)',
      () => interceptionOptions(meshConfig({ outboundIPRangeExclusionList: ['fd00::/8'] }), pod()),
      /outboundIPRangeExclusionList\[0\]: "fd00::\/8" is an IPv6 range/,
    ],
    [
      'a port out of range in the MeshConfig',
      () => interceptionOptions(meshConfig({ outboundPortExclusionList: [70000] }), pod()),
      /spec\.traffic\.outboundPortExclusionList\[0\]: "70000" is not a port/,
    ],
    ['port 0', () => interceptionOptions(meshConfig({ inboundPortExclusionList: [0] }), pod()), /inboundPortExclusionList\[0\]: "0" is not a port/],
    ['a port given as text in the MeshConfig', () => interceptionOptions(meshConfig({ inboundPortExclusionList: ['80'] }), pod()), /inboundPortExclusionList\[0\]: "80" is not a port/],
    ['a list that is not a list', () => interceptionOptions(meshConfig({ outboundPortExclusionList: '80' }), pod()), /spec\.traffic\.outboundPortExclusionList: "80" is not a list/],
    [
      'a bad interface name',
      () => interceptionOptions(meshConfig({ networkInterfaceExclusionList: ['eth0 -j ACCEPT'] }), pod()),
      /networkInterfaceExclusionList\[0\]: "eth0 -j ACCEPT" is not a network interface name/,
    ],
    [
      'an interface name iptables would read as an option',
      () => interceptionOptions(meshConfig({ networkInterfaceExclusionList: ['eth1', '-j'] }), pod()),
      /networkInterfaceExclusionList\[1\]: "-j" is not a network interface name/,
    ],
    [
      'a bad CIDR in a pod annotation',
      () => interceptionOptions(undefined, pod({ 'openservicemesh.io/outbound-ip-range-exclusion-list': '10.0.0.0/8,nope' })),
      /^Pod bookstore\/bookstore-v1-0: metadata\.annotations\["openservicemesh\.io\/outbound-ip-range-exclusion-list"\]\[1\]: "nope" is not an IP range/,
    ],
    [
      'a port out of range in a pod annotation',
      () => interceptionOptions(undefined, pod({ 'openservicemesh.io/inbound-port-exclusion-list': '80,65536' })),
      /metadata\.annotations\["openservicemesh\.io\/inbound-port-exclusion-list"\]\[1\]: "65536" is not a port/,
    ],
    [
      'an empty entry in a pod annotation (OSM refuses it too)',
      () => interceptionOptions(undefined, pod({ 'openservicemesh.io/outbound-port-exclusion-list': '80,' })),
      /outbound-port-exclusion-list"\]\[1\]: "" is not a port/,
    ],
    ['a port with a sign in a pod annotation', () => interceptionOptions(undefined, pod({ 'openservicemesh.io/outbound-port-exclusion-list': '+80' })), /"\+80" is not a port/],
  ];
  for (const [name, call, message] of invalid) {
    it(`fails closed on ${name}, naming the field`, () => {
      assert.throws(call, (err: unknown) => {
        assert.ok(err instanceof InterceptionConfigError);
        assert.match(err.message, message);
        assert.match(err.message, /the pod's traffic interception cannot be set up$/);
        return true;
      });
    });
  }
});

describe('interceptionRules', () => {
  it("writes OSM's chains for iptables-restore: inbound to 15003 except Envoy's ports, outbound to 15001 except uid 1500 and loopback", () => {
    const rules = interceptionRules(interceptionOptions(undefined, pod()));
    assert.deepEqual(rules.split('\n').slice(1, 6), ['*nat', ':OSM_PROXY_INBOUND - [0:0]', ':OSM_PROXY_IN_REDIRECT - [0:0]', ':OSM_PROXY_OUTBOUND - [0:0]', ':OSM_PROXY_OUT_REDIRECT - [0:0]']);
    assert.ok(rules.endsWith('\nCOMMIT\n'));
    assert.deepEqual(chain(rules, 'PREROUTING'), ['-p tcp -j OSM_PROXY_INBOUND']);
    assert.deepEqual(chain(rules, 'OUTPUT'), ['-p tcp -j OSM_PROXY_OUTBOUND']);
    assert.deepEqual(chain(rules, 'OSM_PROXY_INBOUND'), ['-p tcp -m multiport --dports 15000,15010,15901,15902,15903,15904 -j RETURN', '-p tcp -j OSM_PROXY_IN_REDIRECT']);
    assert.deepEqual(chain(rules, 'OSM_PROXY_IN_REDIRECT'), ['-p tcp -j REDIRECT --to-ports 15003']);
    assert.deepEqual(chain(rules, 'OSM_PROXY_OUTBOUND'), [
      '-o lo ! -d 127.0.0.1/32 -m owner --uid-owner 1500 -j OSM_PROXY_IN_REDIRECT',
      '-o lo -m owner ! --uid-owner 1500 -j RETURN',
      '-m owner --uid-owner 1500 -j RETURN',
      '-d 127.0.0.1/32 -j RETURN',
      '-j OSM_PROXY_OUT_REDIRECT',
    ]);
    assert.deepEqual(chain(rules, 'OSM_PROXY_OUT_REDIRECT'), ['-p tcp -j REDIRECT --to-ports 15001']);
  });

  it('returns excluded interfaces, ranges and ports before redirecting; with inclusions only those ranges are redirected', () => {
    const rules = interceptionRules({
      ...interceptionOptions(undefined, pod()),
      outboundIPRangeExclusions: ['10.96.10.4/32'],
      outboundIPRangeInclusions: ['10.96.0.0/12', '10.250.0.0/24'],
      outboundPortExclusions: [3306],
      inboundPortExclusions: [9090, 9091],
      networkInterfaceExclusions: ['eth1'],
    });
    assert.deepEqual(chain(rules, 'OSM_PROXY_INBOUND'), [
      '-i eth1 -j RETURN',
      '-p tcp -m multiport --dports 15000,15010,15901,15902,15903,15904 -j RETURN',
      '-p tcp -m multiport --dports 9090,9091 -j RETURN',
      '-p tcp -j OSM_PROXY_IN_REDIRECT',
    ]);
    assert.deepEqual(chain(rules, 'OSM_PROXY_OUTBOUND').slice(4), [
      '-o eth1 -j RETURN',
      '-d 10.96.10.4/32 -j RETURN',
      '-p tcp -m multiport --dports 3306 -j RETURN',
      '-d 10.96.0.0/12 -j OSM_PROXY_OUT_REDIRECT',
      '-d 10.250.0.0/24 -j OSM_PROXY_OUT_REDIRECT',
      '-j RETURN',
    ]);
  });

  it('splits more than 15 ports into several multiport rules (iptables takes 15 at most)', () => {
    const ports = Array.from({ length: 20 }, (_, i) => 8000 + i);
    const rules = interceptionRules({ ...interceptionOptions(undefined, pod()), outboundPortExclusions: ports });
    const multiport = chain(rules, 'OSM_PROXY_OUTBOUND').filter((r) => r.includes('multiport'));
    assert.deepEqual(multiport, [`-p tcp -m multiport --dports ${ports.slice(0, 15).join(',')} -j RETURN`, `-p tcp -m multiport --dports ${ports.slice(15).join(',')} -j RETURN`]);
  });

  it('refuses options that would write a wrong rule (hand-made options are checked too)', () => {
    const base = interceptionOptions(undefined, pod());
    assert.throws(() => interceptionRules({ ...base, outboundIPRangeExclusions: ['10.0.0.0/8\n-A OUTPUT -j ACCEPT'] }), /InterceptionOptions\.outboundIPRangeExclusions\[0\]: .* is not an IP range/);
    assert.throws(() => interceptionRules({ ...base, inboundPortExclusions: [1.5] }), /InterceptionOptions\.inboundPortExclusions\[0\]: "1\.5" is not a port/);
    assert.throws(() => interceptionRules({ ...base, inboundPort: OUTBOUND_PORT }), /InterceptionOptions\.inboundPort: 15001 is also the outbound port/);
    assert.throws(() => interceptionRules({ ...base, proxyUid: -1 }), /InterceptionOptions\.proxyUid: "-1" is not a uid/);
  });
});
