import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { OBJECT_KINDS } from '../../store/objects.js';
import { MAX_DOCUMENT_NODES, MAX_DOCUMENT_TOKENS, MAX_NESTING_DEPTH, formatManifestError, parseManifestSteps, parseManifests } from './parse.js';

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
      'examples/x/split.yaml:14: TrafficSplit bookstore/bookstore-split: spec.backends[0].weight: must be an integer, not a number',
    ]);
    assert.deepEqual(parsed.errors[0], {
      file: 'examples/x/split.yaml', line: 14, kind: 'TrafficSplit', namespace: 'bookstore', name: 'bookstore-split',
      field: 'spec.backends[0].weight', message: 'must be an integer, not a number',
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

  it('reports a document nested too deeply as such, with its file and line, and still loads the others', () => {
    const deep = `${'['.repeat(10_000)}${']'.repeat(10_000)}`;
    const text = `apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: a, namespace: x}\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: b\n  annotations:\n    deep: ${deep}\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: c, namespace: x}\n`;
    const parsed = parseManifests('deep.yaml', text);
    assert.deepEqual(parsed.errors.map(formatManifestError), [
      `deep.yaml:10: too deeply nested: more than ${MAX_NESTING_DEPTH} levels of mappings and sequences; the document is skipped`,
    ]);
    assert.equal(parsed.syntaxError, true, 'its objects are unknown: the file keeps what it had');
    assert.deepEqual(parsed.objects.map((o) => o.metadata.name), ['a', 'c']);
    // Block mappings count too; a document just within the limit loads.
    const block = (levels: number): string => `apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: d, namespace: x}\nspec:\n${Array.from({ length: levels }, (_, i) => `${'  '.repeat(i + 1)}k:`).join('\n')} 1\n`;
    assert.deepEqual(parseManifests('ok.yaml', block(MAX_NESTING_DEPTH - 1)).errors, []);
    assert.match(formatManifestError(parseManifests('block.yaml', block(3000)).errors[0]), /^block\.yaml:\d+: too deeply nested/);
  });

  it('skips a document with more than MAX_DOCUMENT_NODES nodes or MAX_DOCUMENT_TOKENS tokens, with its file and line, and still loads the others', () => {
    const service = (name: string): string => `apiVersion: v1\nkind: Service\nmetadata:\n  name: ${name}\n  namespace: bookstore\nspec:\n  ports:\n    - port: 80\n`;
    // 24 nodes (keys, values, ':' entries and '-' items) before the items, 2 per item.
    const withItems = (name: string, items: number): string => `${service(name)}  x:\n${'   - 1\n'.repeat(items)}`;
    const atLimit = (MAX_DOCUMENT_NODES - 24) / 2;
    assert.deepEqual(parseManifests('ok.yaml', withItems('ok', atLimit)).errors, [], 'a document of exactly MAX_DOCUMENT_NODES nodes loads');
    for (const separator of ['---\n', '...\n---\n', '...\n']) {
      const text = `${service('a')}${separator}${withItems('big', atLimit + 1)}${separator}${service('c')}`;
      const parsed = parseManifests('big.yaml', text);
      const bigStart = service('a').split('\n').length + separator.split('\n').length - 2;
      // The node past the limit is the last item's '-': the line of the last item.
      assert.deepEqual(parsed.errors.map(formatManifestError), [
        `big.yaml:${bigStart + 9 + atLimit + 1}: too large: more than ${MAX_DOCUMENT_NODES} YAML nodes (scalars, sequence items, mapping entries); the document is skipped`,
      ], JSON.stringify(separator));
      assert.equal(parsed.syntaxError, true, 'its objects are unknown: the file keeps what it had');
      assert.deepEqual(parsed.objects.map((o) => o.metadata.name), ['a', 'c']);
      assert.deepEqual(parsed.lines, [1, text.split('\n').length - service('c').split('\n').length + 1], 'the lines after the skipped document are right');
    }
    // Comments and line breaks are kept by the parser too: they count as tokens.
    const comments = `${service('a')}---\n${'#\n'.repeat(MAX_DOCUMENT_TOKENS)}${service('b')}---\n${service('c')}`;
    const parsed = parseManifests('comments.yaml', comments);
    assert.equal(parsed.errors.length, 1);
    assert.match(formatManifestError(parsed.errors[0]), new RegExp(`^comments\\.yaml:\\d+: too large: more than ${MAX_DOCUMENT_TOKENS} YAML tokens`));
    assert.deepEqual(parsed.objects.map((o) => o.metadata.name), ['a', 'c']);
    // Before the first document, too: reported, and the file keeps what it had.
    const before = parseManifests('before.yaml', `${'#\n'.repeat(MAX_DOCUMENT_TOKENS)}${service('d')}`);
    assert.match(formatManifestError(before.errors[0]), new RegExp(`^before\\.yaml:\\d+: too large: more than ${MAX_DOCUMENT_TOKENS} YAML tokens \\(including comments and line breaks\\); they are skipped$`));
    assert.equal(before.syntaxError, true);
  });

  it('rejects names that are not Kubernetes names, per kind, with file, line and field, and loads the rest', () => {
    const service = (name: string): string => `apiVersion: v1\nkind: Service\nmetadata:\n  name: ${JSON.stringify(name)}\n  namespace: bookstore\n`;
    const bad = ['book\u0000store', 'book\nstore', 'book\u202estore', 'BookStore', 'book|store', 'book/store', '..', '1bookstore', 'a'.repeat(64)];
    const others = [
      'apiVersion: v1\nkind: Namespace\nmetadata: {name: Bookstore}\n',
      'apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: sa, namespace: "book\\0store"}\n',
      'apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: v1.sa, namespace: bookstore}\n',
      'apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: bookstore}\nspec: {serviceAccountName: "sa|x"}\n',
      'apiVersion: access.smi-spec.io/v1alpha3\nkind: TrafficTarget\nmetadata: {name: t, namespace: bookstore}\nspec:\n  destination: {kind: ServiceAccount, name: bookstore, namespace: bookstore}\n  sources:\n  - {kind: ServiceAccount, name: "book\\0buyer", namespace: bookbuyer}\n  rules: [{kind: HTTPRouteGroup, name: routes, matches: ["all\\n"]}]\n',
      'apiVersion: split.smi-spec.io/v1alpha2\nkind: TrafficSplit\nmetadata: {name: s, namespace: bookstore}\nspec:\n  service: bookstore.bookstore\n  backends:\n  - {service: bookstore-v1, weight: 50}\n  - {service: "bookstore\\0v2", weight: 50}\n',
      'apiVersion: v1\nkind: Service\nmetadata: {name: bookstore, namespace: bookstore}\n',
    ];
    const docs = [...bad.map(service), ...others];
    const parsed = parseManifests('names.yaml', docs.join('---\n'));
    const lineOf = (doc: number, offset: number): number => docs.slice(0, doc).reduce((n, d) => n + d.split('\n').length, 1) + offset;
    const errors = parsed.errors.map(formatManifestError);
    bad.forEach((_, i) => assert.ok(errors[i].startsWith(`names.yaml:${lineOf(i, 3)}: Service bookstore/`), errors[i]));
    assert.ok(errors.slice(0, bad.length).every((e) => /: metadata\.name: ".*" is not an RFC 1035 label/.test(e)), errors.join('\n'));
    assert.ok(!errors.some((e) => /[\u0000\n\u202e]/.test(e)), 'messages escape control and bidi characters');
    const n = bad.length;
    assert.deepEqual(errors.slice(n).map((e) => e.replace(/ is not .*/, '')), [
      `names.yaml:${lineOf(n, 2)}: Namespace Bookstore: metadata.name: "Bookstore"`,
      `names.yaml:${lineOf(n + 1, 2)}: ServiceAccount "book\\u0000store"/sa: metadata.namespace: "book\\u0000store"`,
      `names.yaml:${lineOf(n + 3, 3)}: Pod bookstore/p: spec.serviceAccountName: "sa|x"`,
      `names.yaml:${lineOf(n + 4, 6)}: TrafficTarget bookstore/t: spec.sources[0].name: "book\\u0000buyer"`,
      `names.yaml:${lineOf(n + 4, 7)}: TrafficTarget bookstore/t: spec.rules[0].matches[0]: "all\\n" holds a control or format character`,
      `names.yaml:${lineOf(n + 5, 7)}: TrafficSplit bookstore/s: spec.backends[1].service: "bookstore\\u0000v2"`,
    ]);
    assert.deepEqual(parsed.objects.map((o) => `${o.kind} ${o.metadata.name}`), ['ServiceAccount v1.sa', 'Service bookstore']);
  });

  it('yields after each document, so a caller can let the event loop run while parsing a large file', () => {
    const text = Array.from({ length: 50 }, (_, i) => `apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: sa-${i}, namespace: x}\n`).join('---\n');
    const steps = parseManifestSteps('many.yaml', text);
    let yields = 0;
    for (let step = steps.next(); ; step = steps.next()) {
      if (step.done) {
        assert.equal(step.value.objects.length, 50);
        break;
      }
      yields++;
    }
    assert.ok(yields >= 50, `${yields} yields`);
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

describe('parseManifests addresses', () => {
  it('refuses Pod IPs and endpoint addresses that are unspecified, loopback, link-local or multicast, naming file, line and field', () => {
    const text = `apiVersion: v1
kind: Pod
metadata: {name: loop, namespace: app}
status:
  podIP: 127.0.0.1
---
apiVersion: v1
kind: Pod
metadata: {name: fine, namespace: app}
status: {podIP: 10.244.0.1, podIPs: [{ip: 10.244.0.1}, {ip: "fe80::1"}]}
---
apiVersion: v1
kind: Endpoints
metadata: {name: svc, namespace: app}
subsets:
- addresses:
  - ip: 10.244.0.2
  - ip: 0.0.0.0
  - ip: 127.0.0.2
  notReadyAddresses: [{ip: 169.254.1.1}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc-1, namespace: app, labels: {kubernetes.io/service-name: svc}}
addressType: IPv4
endpoints:
- addresses: [224.0.0.1]
---
apiVersion: v1
kind: Pod
metadata: {name: ok, namespace: app}
status: {podIP: 10.244.0.3}
`;
    const parsed = parseManifests('f.yaml', text);
    assert.deepEqual(parsed.errors.map(formatManifestError).map((e) => e.split(' may not be ')[0]), [
      'f.yaml:5: Pod app/loop: status.podIP: "127.0.0.1"',
      'f.yaml:10: Pod app/fine: status.podIPs[1].ip: "fe80::1"',
      'f.yaml:18: Endpoints app/svc: subsets[0].addresses[1].ip: "0.0.0.0"',
      'f.yaml:20: Endpoints app/svc: subsets[0].notReadyAddresses[0].ip: "169.254.1.1"',
      'f.yaml:27: EndpointSlice app/svc-1: endpoints[0].addresses[0]: "224.0.0.1"',
    ]);
    // A loopback endpoint address is a warning only (a test bed on one host); a loopback pod IP is refused.
    assert.deepEqual(parsed.warnings.map(formatManifestError), [
      'f.yaml:19: Endpoints app/svc: subsets[0].addresses[2].ip: "127.0.0.2" is a loopback address: the API server refuses it as an endpoint; a proxy sending to it reaches its own host',
    ]);
    assert.deepEqual(parsed.objects.map((o) => o.metadata.name), ['ok']);
  });
});
