import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { OBJECT_KINDS } from '../../store/objects.js';
import { formatManifestError, parseManifests } from './parse.js';

const SPLIT = `apiVersion: split.smi-spec.io/v1alpha2
kind: TrafficSplit
metadata:
  name: bookstore-split
  namespace: bookstore
spec:
  service: bookstore.bookstore
  backends:
  - service: bookstore-v1
    weight: 50.5
`;

/** One valid manifest of every kind Trellis reads. */
const EVERY_KIND = `apiVersion: v1
kind: Namespace
metadata: {name: bookstore}
---
apiVersion: v1
kind: Service
metadata: {name: bookstore, namespace: bookstore}
spec: {selector: {app: bookstore}, ports: [{name: http, port: 14001, targetPort: web}], clusterIP: 10.96.10.1}
---
apiVersion: v1
kind: Endpoints
metadata: {name: bookstore, namespace: bookstore}
subsets: [{addresses: [{ip: 10.244.3.10}], ports: [{port: 14001}]}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: bookstore-abcde, namespace: bookstore, labels: {kubernetes.io/service-name: bookstore}}
addressType: IPv4
endpoints: [{addresses: [10.244.3.10], conditions: {ready: true}}]
ports: [{port: 14001}]
---
apiVersion: v1
kind: Pod
metadata: {name: bookstore-1, namespace: bookstore, labels: {app: bookstore}}
spec: {serviceAccountName: bookstore, containers: [{name: c, ports: [{containerPort: 14001}]}]}
status: {podIP: 10.244.3.10}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: bookstore, namespace: bookstore}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: bookstore, namespace: bookstore}
spec: {selector: {matchLabels: {app: bookstore}}, template: {metadata: {labels: {app: bookstore}}, spec: {serviceAccountName: bookstore}}}
---
apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata: {name: bookstore, namespace: bookstore}
spec:
  destination: {kind: ServiceAccount, name: bookstore, namespace: bookstore}
  sources: [{kind: ServiceAccount, name: bookbuyer, namespace: bookbuyer}]
  rules: [{kind: HTTPRouteGroup, name: routes, matches: [all]}]
---
apiVersion: specs.smi-spec.io/v1alpha4
kind: HTTPRouteGroup
metadata: {name: routes, namespace: bookstore}
spec: {matches: [{name: all, pathRegex: ".*", methods: ["*"]}]}
---
apiVersion: specs.smi-spec.io/v1alpha4
kind: TCPRoute
metadata: {name: mysql, namespace: bookstore}
spec: {matches: {ports: [3306]}}
---
apiVersion: split.smi-spec.io/v1alpha2
kind: TrafficSplit
metadata: {name: split, namespace: bookstore}
spec: {service: bookstore, backends: [{service: v1, weight: 100}]}
---
apiVersion: config.openservicemesh.io/v1alpha1
kind: MeshConfig
metadata: {name: osm-mesh-config, namespace: osm-system}
spec: {traffic: {enablePermissiveTrafficPolicyMode: true}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: bookstore, namespace: bookstore}
spec: {rules: [{http: {paths: [{path: /books, pathType: Prefix, backend: {service: {name: bookstore, port: {number: 14001}}}}]}}]}
---
apiVersion: policy.openservicemesh.io/v1alpha1
kind: IngressBackend
metadata: {name: bookstore, namespace: bookstore}
spec:
  backends: [{name: bookstore, port: {number: 14001, protocol: http}}]
  sources: [{kind: Service, name: ingress-nginx-controller, namespace: ingress-nginx}]
---
apiVersion: policy.openservicemesh.io/v1alpha1
kind: Egress
metadata: {name: httpbin, namespace: curl}
spec:
  sources: [{kind: ServiceAccount, name: curl, namespace: curl}]
  hosts: [httpbin.org]
  ports: [{number: 80, protocol: http}]
---
apiVersion: policy.openservicemesh.io/v1alpha1
kind: Retry
metadata: {name: retry, namespace: curl}
spec:
  source: {kind: ServiceAccount, name: curl, namespace: curl}
  destinations: [{kind: Service, name: httpbin, namespace: httpbin}]
  retryPolicy: {retryOn: 5xx, perTryTimeout: 1s, numRetries: 5, retryBackoffBaseInterval: 1s}
---
apiVersion: policy.openservicemesh.io/v1alpha1
kind: UpstreamTrafficSetting
metadata: {name: httpbin, namespace: httpbin}
spec:
  host: httpbin.httpbin.svc.cluster.local
  connectionSettings: {tcp: {maxConnections: 1}}
`;

describe('parseManifests', () => {
  it('accepts one manifest of every kind, in document order', () => {
    const parsed = parseManifests('all.yaml', EVERY_KIND);
    assert.deepEqual(parsed.errors.map(formatManifestError), []);
    assert.deepEqual(parsed.objects.map((o) => o.kind), [...OBJECT_KINDS]);
    assert.deepEqual(parsed.lines.slice(0, 3), [1, 5, 10]);
    assert.equal(parsed.syntaxError, false);
  });

  it('accepts JSON and v1 Lists', () => {
    const json = JSON.stringify({ apiVersion: 'v1', kind: 'List', items: [{ apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'a', namespace: 'x' } }] });
    const parsed = parseManifests('list.json', json);
    assert.deepEqual(parsed.errors, []);
    assert.deepEqual(parsed.objects.map((o) => `${o.kind} ${o.metadata.namespace}/${o.metadata.name}`), ['ServiceAccount x/a']);
  });

  it('ignores kinds it does not read, and skips empty documents', () => {
    const parsed = parseManifests('x.yaml', `# comment only\n---\napiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: mysql, namespace: bookwarehouse}\n---\napiVersion: networking.k8s.io/v1beta1\nkind: HTTPProxy\nmetadata: {name: i}\n---\n`);
    assert.deepEqual(parsed.objects, []);
    assert.deepEqual(parsed.errors, []);
    assert.deepEqual(parsed.ignored.map((i) => `${i.kind}@${i.line}`), ['StatefulSet@3', 'HTTPProxy@7']);
  });

  it('reports an invalid SMI field with file, line and field path, and still loads the other documents', () => {
    const text = `apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: sa, namespace: bookstore}\n---\n${SPLIT}`;
    const parsed = parseManifests('examples/x/split.yaml', text);
    assert.deepEqual(parsed.errors.map(formatManifestError), [
      'examples/x/split.yaml:14: TrafficSplit bookstore/bookstore-split: spec.backends[0].weight: must be integer',
    ]);
    assert.deepEqual(parsed.errors[0], {
      file: 'examples/x/split.yaml', line: 14, kind: 'TrafficSplit', namespace: 'bookstore', name: 'bookstore-split',
      field: 'spec.backends[0].weight', message: 'must be integer',
    });
    assert.deepEqual(parsed.objects.map((o) => o.metadata.name), ['sa']);
    assert.deepEqual(parsed.rejectedKeys, ['TrafficSplit/bookstore/bookstore-split']);
  });

  it('reports a missing required field at the parent\'s line, and core-kind violations', () => {
    const text = `apiVersion: split.smi-spec.io/v1alpha2\nkind: TrafficSplit\nmetadata: {name: s, namespace: n}\nspec:\n  service: a\n---\napiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec:\n  ports:\n  - port: 70000\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\nstatus: {podIP: not-an-ip}\n---\napiVersion: v1\nkind: Pod\nmetadata: {namespace: n}\n`;
    const parsed = parseManifests('f.yaml', text);
    assert.deepEqual(parsed.errors.map(formatManifestError), [
      'f.yaml:4: TrafficSplit n/s: spec.backends: is required',
      'f.yaml:12: Service default/s: spec.ports[0].port: must be <= 65535',
      'f.yaml:17: Pod default/p: status.podIP: must be an IP address',
      'f.yaml:21: Pod n/<unnamed>: metadata.name: is required',
    ]);
    assert.deepEqual(parsed.objects, []);
  });

  it('rejects a known kind with an unsupported apiVersion', () => {
    const parsed = parseManifests('f.yaml', 'apiVersion: split.smi-spec.io/v1alpha4\nkind: TrafficSplit\nmetadata: {name: s, namespace: n}\nspec: {service: a, backends: []}\n');
    assert.equal(parsed.errors.length, 1);
    assert.equal(parsed.errors[0].field, 'apiVersion');
    assert.equal(parsed.errors[0].line, 1);
    assert.match(parsed.errors[0].message, /split\.smi-spec\.io\/v1alpha2/);
  });

  it('defaults the namespace to "default", drops it on Namespaces, and rejects duplicates after the first', () => {
    const text = 'apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: a}\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: a, namespace: default}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: n, namespace: x}\n';
    const parsed = parseManifests('f.yaml', text);
    assert.deepEqual(parsed.objects.map((o) => o.metadata), [{ name: 'a', namespace: 'default' }, { name: 'n' }]);
    assert.deepEqual(parsed.errors.map(formatManifestError), ['f.yaml:5: ServiceAccount default/a: duplicate object: already defined at line 1']);
  });

  it('reports a YAML syntax error with its line and still loads the file\'s valid documents', () => {
    const text = 'apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: a, namespace: x}\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: [b\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: c, namespace: x}\n';
    const parsed = parseManifests('f.yaml', text);
    assert.equal(parsed.syntaxError, true);
    assert.ok(parsed.errors.length >= 1);
    assert.ok(parsed.errors.every((e) => e.file === 'f.yaml' && e.line >= 7 && e.line <= 8 && /YAML syntax error/.test(e.message)), JSON.stringify(parsed.errors));
    assert.deepEqual(parsed.objects.map((o) => o.metadata.name), ['a', 'c']);
  });

  it('warns about fields the CRD does not declare (typos), and still loads the object', () => {
    const mesh = [
      'apiVersion: config.openservicemesh.io/v1alpha2',
      'kind: MeshConfig',
      'metadata:',
      '  name: osm-mesh-config',
      '  namespace: osm-system',
      'spec:',
      '  traffic:',
      '    enablePermisiveTrafficPolicyMode: true',
      '    enableEgress: true',
      '  sidecar:',
      '    logLevel: error',
      '',
    ].join('\n');
    const parsed = parseManifests('mesh.yaml', mesh);
    assert.equal(parsed.objects.length, 1);
    assert.deepEqual(parsed.errors, []);
    assert.deepEqual(parsed.warnings.map(formatManifestError), [
      'mesh.yaml:8: MeshConfig osm-system/osm-mesh-config: spec.traffic.enablePermisiveTrafficPolicyMode: unknown field for MeshConfig config.openservicemesh.io/v1alpha2: it is ignored (a typo?)',
    ]);
    // A misspelt required field: the error says what is missing, the warning what was written instead.
    const split = parseManifests('split.yaml', SPLIT.replace('weight: 50.5', 'weigth: 50'));
    assert.deepEqual(split.warnings.map((w) => `${w.line} ${w.field}`), ['10 spec.backends[0].weigth']);
    assert.ok(split.errors.some((e) => e.field === 'spec.backends[0].weight' && /required/.test(e.message)), JSON.stringify(split.errors));
  });

  it('warns about scalars YAML 1.1 and 1.2 read differently, and still loads the object', () => {
    const text = 'apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: a\n  namespace: x\n  annotations:\n    enabled: on\n    quoted: "yes"\nautomountServiceAccountToken: yes\nmode: 0755\n';
    const parsed = parseManifests('f.yaml', text);
    assert.equal(parsed.objects.length, 1);
    assert.deepEqual(parsed.warnings.map((w) => `${w.line} ${w.field}`), ['7 metadata.annotations.enabled', '9 automountServiceAccountToken', '10 mode']);
    assert.match(parsed.warnings[0].message, /boolean in YAML 1\.1/);
    assert.match(parsed.warnings[2].message, /octal/);
    assert.deepEqual(parsed.errors, []);
  });
});
