import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { bookstoreMesh, k8s } from '../../test/fixtures/mesh.js';
import { memoryStore } from '../../test/helpers/memory-store.js';
import type { HTTPIngressPath, KubeObject } from '../store/objects.js';
import { buildMeshSnapshot } from './build-snapshot.js';
import { ingressPathMatch } from './ingress.js';
import type { PolicyProblem } from './problems.js';

function build(objects: KubeObject[]): ReturnType<typeof buildMeshSnapshot> {
  return buildMeshSnapshot(memoryStore(objects), { meshName: 'osm', generation: 1 });
}

/** bookstore + httpbin (port 80 → target 8080) in the mesh, and an ingress controller outside it. */
function mesh(...extra: KubeObject[]): KubeObject[] {
  return [
    ...bookstoreMesh(),
    k8s.namespace('httpbin'),
    k8s.service('httpbin', 'httpbin', { app: 'httpbin' }, [{ port: 80, name: 'http', targetPort: 8080 }], '10.96.1.10'),
    k8s.pod('httpbin', 'httpbin-1', 'httpbin', { app: 'httpbin' }, '10.244.5.10', [8080]),
    k8s.namespace('ingress-nginx', 'not-this-mesh'),
    k8s.service('ingress-nginx', 'nginx', { app: 'nginx' }, [{ port: 80 }], '10.96.9.9'),
    k8s.endpoints('ingress-nginx', 'nginx', ['10.244.9.1'], 80),
    k8s.service('ingress-nginx', 'idle', { app: 'idle' }, [{ port: 80 }], '10.96.9.10'),
    ...extra,
  ];
}

const NGINX = { kind: 'Service', name: 'nginx', namespace: 'ingress-nginx' };
const GOOD_BACKEND = k8s.ingressBackend('bookstore', 'good', [{ name: 'bookstore', port: 14001, protocol: 'http' }], [NGINX]);
const GOOD_EGRESS = k8s.egress('bookbuyer', 'good', { sources: [{ ns: 'bookbuyer', sa: 'bookbuyer' }], hosts: ['httpbin.org'], ports: [{ number: 80, protocol: 'http' }] });

describe('IngressBackend resolution', () => {
  it('resolves a backend by target port, Service sources to endpoint CIDRs, routes from Ingresses', () => {
    const { snapshot, problems } = build(
      mesh(
        k8s.ingressBackend('httpbin', 'httpbin', [{ name: 'httpbin', port: 8080, protocol: 'HTTP' }], [NGINX, { kind: 'IPRange', name: '10.0.0.0/8' }]),
        k8s.ingress('httpbin', 'web', [{ host: 'Httpbin.Example.com', paths: [{ path: '/get', pathType: 'Exact', service: 'httpbin', port: 80 }] }]),
      ),
    );
    assert.deepEqual(problems, []);
    const [b] = snapshot.ingressBackends;
    assert.equal(b.name, 'httpbin/httpbin');
    assert.deepEqual([b.service.name, b.service.port, b.service.targetPort, b.protocol], ['httpbin', 80, 8080, 'http']);
    assert.deepEqual(b.sourceIpRanges, ['10.0.0.0/8', '10.244.9.1/32']);
    assert.deepEqual(b.routes, [{ ingress: 'httpbin/web', host: 'httpbin.example.com', match: { kind: 'exact', path: '/get' } }]);
  });

  const cases: { name: string; objects: KubeObject[]; problem: Omit<PolicyProblem, 'message'> }[] = [
    {
      name: 'backend service missing',
      objects: [k8s.ingressBackend('httpbin', 'bad', [{ name: 'nope', port: 8080, protocol: 'http' }], [NGINX])],
      problem: { kind: 'IngressBackend', namespace: 'httpbin', name: 'bad', field: 'spec.backends[0].name' },
    },
    {
      name: 'backend port is the service port, not the target port',
      objects: [k8s.ingressBackend('httpbin', 'bad', [{ name: 'httpbin', port: 80, protocol: 'http' }], [NGINX])],
      problem: { kind: 'IngressBackend', namespace: 'httpbin', name: 'bad', field: 'spec.backends[0].port.number' },
    },
    {
      name: 'protocol not http/https',
      objects: [k8s.ingressBackend('httpbin', 'bad', [{ name: 'httpbin', port: 8080, protocol: 'grpc' }], [NGINX])],
      problem: { kind: 'IngressBackend', namespace: 'httpbin', name: 'bad', field: 'spec.backends[0].port.protocol' },
    },
    {
      name: 'IPRange not a CIDR',
      objects: [k8s.ingressBackend('httpbin', 'bad', [{ name: 'httpbin', port: 8080, protocol: 'http' }], [NGINX, { kind: 'IPRange', name: '10.0.0.300/8' }])],
      problem: { kind: 'IngressBackend', namespace: 'httpbin', name: 'bad', field: 'spec.sources[1].name' },
    },
    {
      name: 'Service source missing',
      objects: [k8s.ingressBackend('httpbin', 'bad', [{ name: 'httpbin', port: 8080, protocol: 'http' }], [{ kind: 'Service', name: 'ghost', namespace: 'ingress-nginx' }])],
      problem: { kind: 'IngressBackend', namespace: 'httpbin', name: 'bad', field: 'spec.sources[0].name' },
    },
    {
      name: 'Service source without endpoints (would otherwise allow any address)',
      objects: [k8s.ingressBackend('httpbin', 'bad', [{ name: 'httpbin', port: 8080, protocol: 'http' }], [{ kind: 'Service', name: 'idle', namespace: 'ingress-nginx' }])],
      problem: { kind: 'IngressBackend', namespace: 'httpbin', name: 'bad', field: 'spec.sources[0].name' },
    },
    {
      name: 'unknown source kind',
      objects: [k8s.ingressBackend('httpbin', 'bad', [{ name: 'httpbin', port: 8080, protocol: 'http' }], [{ kind: 'ServiceAccount', name: 'x' }])],
      problem: { kind: 'IngressBackend', namespace: 'httpbin', name: 'bad', field: 'spec.sources[0].kind' },
    },
    {
      name: 'https validating client certificates without an AuthenticatedPrincipal',
      objects: [k8s.ingressBackend('httpbin', 'bad', [{ name: 'httpbin', port: 8080, protocol: 'https', tls: { skipClientCertValidation: false } }], [NGINX])],
      problem: { kind: 'IngressBackend', namespace: 'httpbin', name: 'bad', field: 'spec.sources' },
    },
    {
      name: 'the same backend in a second IngressBackend',
      objects: [
        k8s.ingressBackend('httpbin', 'a-first', [{ name: 'httpbin', port: 8080, protocol: 'http' }], [NGINX]),
        k8s.ingressBackend('httpbin', 'bad', [{ name: 'httpbin', port: 8080, protocol: 'http' }], [{ kind: 'IPRange', name: '0.0.0.0/0' }]),
      ],
      problem: { kind: 'IngressBackend', namespace: 'httpbin', name: 'bad', field: 'spec.backends[0]' },
    },
  ];
  for (const tc of cases) {
    it(`reports and skips: ${tc.name}; the rest is unaffected`, () => {
      const { snapshot, problems } = build(mesh(GOOD_BACKEND, ...tc.objects));
      assert.deepEqual(problems.map(({ message: _m, ...p }) => p), [tc.problem]);
      assert.ok(problems[0].message.length > 0);
      assert.ok(!snapshot.ingressBackends.some((b) => b.name === `${tc.problem.namespace}/${tc.problem.name}`), 'policy skipped');
      assert.ok(snapshot.ingressBackends.some((b) => b.name === 'bookstore/good'), 'other IngressBackend kept');
    });
  }

  it('reports an Ingress with an unusable path and takes no route from it', () => {
    const { snapshot, problems } = build(
      mesh(
        k8s.ingressBackend('httpbin', 'httpbin', [{ name: 'httpbin', port: 8080, protocol: 'http' }], [NGINX]),
        k8s.ingress('httpbin', 'bad', [{ paths: [{ path: '/ok', pathType: 'Prefix', service: 'httpbin', port: 80 }, { path: 'nope', pathType: 'Prefix', service: 'httpbin', port: 80 }] }]),
      ),
    );
    assert.deepEqual(problems.map(({ message: _m, ...p }) => p), [{ kind: 'Ingress', namespace: 'httpbin', name: 'bad', field: 'spec.rules[0].http.paths[1].path' }]);
    assert.deepEqual(snapshot.ingressBackends[0].routes, []);
  });
});

describe('ingressPathMatch (networking.k8s.io/v1 path types)', () => {
  const cases: [HTTPIngressPath['pathType'], string | undefined, unknown][] = [
    ['Exact', '/foo', { kind: 'exact', path: '/foo' }],
    ['Prefix', '/foo', { kind: 'prefix', path: '/foo' }],
    ['Prefix', '/foo/', { kind: 'prefix', path: '/foo' }],
    ['Prefix', '/', { kind: 'prefix', path: '/' }],
    ['ImplementationSpecific', '/static', { kind: 'string-prefix', path: '/static' }],
    ['ImplementationSpecific', '/file.txt', { kind: 'string-prefix', path: '/file.txt' }],
    ['ImplementationSpecific', '/v[0-9]+/.*', { kind: 'regex', path: '/v[0-9]+/.*' }],
    ['ImplementationSpecific', undefined, { kind: 'string-prefix', path: '/' }],
  ];
  for (const [pathType, path, expected] of cases) {
    it(`${pathType} ${String(path)}`, () => {
      assert.deepEqual(ingressPathMatch({ pathType, path, backend: {} }), expected);
    });
  }
  const bad: [HTTPIngressPath['pathType'], string][] = [
    ['Prefix', 'foo'],
    ['Exact', ''],
    ['Prefix', '/a?b'],
    ['ImplementationSpecific', '/(unclosed'],
    ['ImplementationSpecific', '/(?=lookahead)'],
  ];
  for (const [pathType, path] of bad) {
    it(`rejects ${pathType} "${path}"`, () => {
      assert.equal(typeof ingressPathMatch({ pathType, path, backend: {} }), 'string');
    });
  }
});

describe('Egress resolution', () => {
  it('resolves sources, hosts, ranges, ports, HTTPRouteGroup matches and UpstreamTrafficSetting names', () => {
    const uts: KubeObject = {
      apiVersion: 'policy.openservicemesh.io/v1alpha1',
      kind: 'UpstreamTrafficSetting',
      metadata: { name: 'limits', namespace: 'bookbuyer' },
      spec: { host: 'httpbin.org', connectionSettings: { tcp: { maxConnections: 1 } } },
    };
    const { snapshot, problems } = build(
      mesh(
        uts,
        k8s.httpRouteGroup('bookbuyer', 'routes', [{ name: 'get', pathRegex: '/get', methods: ['*'] }]),
        k8s.egress('bookbuyer', 'e', {
          sources: [{ ns: 'bookbuyer', sa: 'bookbuyer' }],
          hosts: ['HTTPBIN.org', 'httpbin.org'],
          ipAddresses: ['203.0.113.0/24'],
          ports: [{ number: 80, protocol: 'HTTP' }, { number: 443, protocol: 'https' }],
          matches: [{ kind: 'HTTPRouteGroup', name: 'routes' }, { kind: 'UpstreamTrafficSetting', name: 'limits' }],
        }),
      ),
    );
    assert.deepEqual(problems, []);
    assert.deepEqual(snapshot.egressPolicies, [
      {
        name: 'bookbuyer/e',
        sources: ['bookbuyer/bookbuyer'],
        hosts: ['httpbin.org'],
        ipRanges: ['203.0.113.0/24'],
        ports: [{ number: 80, protocol: 'http' }, { number: 443, protocol: 'https' }],
        httpMatches: [{ name: 'bookbuyer/routes/get', pathRegex: '/get', methods: [], headers: {} }],
        upstreamTrafficSettings: ['limits'],
      },
    ]);
  });

  const SRC = [{ ns: 'bookbuyer', sa: 'bookbuyer' }];
  const cases: { name: string; egress: KubeObject; field: string }[] = [
    {
      name: 'match to a missing HTTPRouteGroup',
      egress: k8s.egress('bookbuyer', 'bad', { sources: SRC, hosts: ['a.com'], ports: [{ number: 80, protocol: 'http' }], matches: [{ kind: 'HTTPRouteGroup', name: 'ghost' }] }),
      field: 'spec.matches[0].name',
    },
    {
      name: 'match to a missing UpstreamTrafficSetting',
      egress: k8s.egress('bookbuyer', 'bad', { sources: SRC, hosts: ['a.com'], ports: [{ number: 80, protocol: 'http' }], matches: [{ kind: 'UpstreamTrafficSetting', name: 'ghost' }] }),
      field: 'spec.matches[0].name',
    },
    {
      name: 'match of another kind',
      egress: k8s.egress('bookbuyer', 'bad', { sources: SRC, hosts: ['a.com'], ports: [{ number: 80, protocol: 'http' }], matches: [{ kind: 'TCPRoute', name: 'x' }] }),
      field: 'spec.matches[0].kind',
    },
    {
      name: 'ipAddresses entry not a CIDR',
      egress: k8s.egress('bookbuyer', 'bad', { sources: SRC, ipAddresses: ['10.0.0.0/8', '10.0.0.1'], ports: [{ number: 5432, protocol: 'tcp' }] }),
      field: 'spec.ipAddresses[1]',
    },
    {
      name: 'unknown protocol',
      egress: k8s.egress('bookbuyer', 'bad', { sources: SRC, hosts: ['a.com'], ports: [{ number: 80, protocol: 'udp' }] }),
      field: 'spec.ports[0].protocol',
    },
    {
      name: 'port out of range',
      egress: k8s.egress('bookbuyer', 'bad', { sources: SRC, hosts: ['a.com'], ports: [{ number: 70000, protocol: 'https' }] }),
      field: 'spec.ports[0].number',
    },
    {
      name: 'http without hosts',
      egress: k8s.egress('bookbuyer', 'bad', { sources: SRC, ipAddresses: ['10.0.0.0/8'], ports: [{ number: 80, protocol: 'http' }] }),
      field: 'spec.hosts',
    },
    {
      name: 'host that is not a DNS name',
      egress: k8s.egress('bookbuyer', 'bad', { sources: SRC, hosts: ['http://a.com/x'], ports: [{ number: 443, protocol: 'https' }] }),
      field: 'spec.hosts[0]',
    },
  ];
  for (const tc of cases) {
    it(`reports and skips: ${tc.name}; the rest is unaffected`, () => {
      const { snapshot, problems } = build(mesh(GOOD_EGRESS, tc.egress));
      assert.deepEqual(problems.map(({ message: _m, ...p }) => p), [{ kind: 'Egress', namespace: 'bookbuyer', name: 'bad', field: tc.field }]);
      assert.deepEqual(snapshot.egressPolicies.map((e) => e.name), ['bookbuyer/good']);
    });
  }

  it('reports a source that is not a ServiceAccount', () => {
    const egress = k8s.egress('bookbuyer', 'bad', { sources: SRC, hosts: ['a.com'], ports: [{ number: 443, protocol: 'https' }] });
    (egress.spec as { sources: { kind: string }[] }).sources[0].kind = 'Service';
    const { snapshot, problems } = build(mesh(egress));
    assert.deepEqual(problems.map((p) => p.field), ['spec.sources[0].kind']);
    assert.deepEqual(snapshot.egressPolicies, []);
  });
});
