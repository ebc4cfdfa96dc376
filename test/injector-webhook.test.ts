/**
 * The sidecar injector (`trellis injector`) running against the loopback fake API server, with
 * real HTTPS clients posting AdmissionReviews to it: the returned JSON patch is applied to the
 * pod (fast-json-patch) and the patched pod, the bootstrap Secret it created and the
 * MutatingWebhookConfiguration's CA bundle are checked.
 */
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import net, { type AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import type { V1Container, V1Pod } from '@kubernetes/client-node';
import { pino } from 'pino';
import { parse, parseAllDocuments } from 'yaml';
import { namespaceAdd, namespaceRemove } from '../src/cli/kube-commands.js';
import { loadOrCreateCaSecret, readCaSecret, secretApiFor } from '../src/certificate/secret-store.js';
import { startHealthcheckServer } from '../src/injector/healthcheck.js';
import { interceptionOptions, interceptionRules } from '../src/injector/iptables.js';
import { runInjector, type RunningInjector } from '../src/injector/run.js';
import { loadKubeConfig } from '../src/sources/kubernetes/kubernetes-source.js';
import type { MeshConfig, Pod } from '../src/store/objects.js';
import { admitPod as admitTo, podReview, postToWebhook } from './helpers/admission.js';
import { DEFAULT_RESOURCE_TYPES, FakeKubeApiServer } from './helpers/fake-kube-apiserver.js';

const run = promisify(execFile);
const WEBHOOK_CONFIG = 'osm-webhook-osm';

const MESH_CONFIG: MeshConfig = {
  apiVersion: 'config.openservicemesh.io/v1alpha2',
  kind: 'MeshConfig',
  metadata: { name: 'osm-mesh-config', namespace: 'osm-system' },
  spec: {
    traffic: { outboundPortExclusionList: [22], outboundIPRangeExclusionList: ['169.254.169.254/32'] },
    sidecar: {
      logLevel: 'debug',
      envoyImage: 'envoyproxy/envoy:v1.40.0-test',
      resources: { limits: { cpu: '500m', memory: '128Mi' } },
    } as NonNullable<MeshConfig['spec']>['sidecar'],
  },
};

function namespace(name: string, labels: Record<string, string> = {}, annotations: Record<string, string> = {}) {
  return { apiVersion: 'v1', kind: 'Namespace', metadata: { name, labels: { 'kubernetes.io/metadata.name': name, ...labels }, annotations } };
}

/** bookbuyer's pod as its Deployment (OSM's demo) creates it, plus probes. */
function bookbuyerPod(overrides: { annotations?: Record<string, string>; containers?: V1Container[]; hostNetwork?: boolean } = {}): V1Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { generateName: 'bookbuyer-5d8f9c-', namespace: 'bookbuyer', labels: { app: 'bookbuyer', version: 'v1' }, annotations: overrides.annotations },
    spec: {
      serviceAccountName: 'bookbuyer',
      hostNetwork: overrides.hostNetwork,
      containers: overrides.containers ?? [
        {
          name: 'bookbuyer',
          image: 'openservicemesh/bookbuyer:latest-main',
          command: ['/bookbuyer'],
          ports: [{ name: 'http', containerPort: 14001 }],
          env: [{ name: 'BOOKSTORE_NAMESPACE', value: 'bookstore' }],
          readinessProbe: { httpGet: { path: '/ready', port: 'http' }, timeoutSeconds: 2 },
          livenessProbe: { tcpSocket: { port: 14001 } },
        },
      ],
    },
  };
}

describe('trellis injector (HTTPS AdmissionReview against the fake API server)', () => {
  let server: FakeKubeApiServer;
  let dir: string;
  let injector: RunningInjector;
  let kubeconfigFile: string;
  /** The CA bundle the injector wrote into the MutatingWebhookConfiguration: the client trusts only it. */
  let caBundle: string;
  /** What the injector logged (pino JSON lines). */
  const logLines: string[] = [];

  const target = () => ({ port: injector.port, caBundle });
  const post = (body: unknown, options?: Parameters<typeof postToWebhook>[2]) => postToWebhook(target(), body, options);
  const admitPod = (pod: V1Pod, extra?: Record<string, unknown>) => admitTo(target(), pod, extra);

  function secretOf(pod: V1Pod): { name: string; data: Record<string, string> } | undefined {
    const uuid = pod.metadata?.labels?.['osm-proxy-uuid'];
    const secret = server.get('Secret', pod.metadata?.namespace, `envoy-bootstrap-config-${uuid}`) as { data: Record<string, string> } | undefined;
    return secret && { name: `envoy-bootstrap-config-${uuid}`, data: Object.fromEntries(Object.entries(secret.data).map(([k, v]) => [k, Buffer.from(v, 'base64').toString('utf8')])) };
  }

  before(async () => {
    server = await new FakeKubeApiServer({
      resources: [
        ...DEFAULT_RESOURCE_TYPES,
        { group: 'admissionregistration.k8s.io', version: 'v1', plural: 'mutatingwebhookconfigurations', singular: 'mutatingwebhookconfiguration', kind: 'MutatingWebhookConfiguration', namespaced: false },
      ],
    }).start();
    dir = await mkdtemp(path.join(os.tmpdir(), 's8i-injector-'));
    kubeconfigFile = await server.writeKubeconfig(dir);
    server.apply(namespace('osm-system'));
    server.apply(namespace('bookbuyer', { 'openservicemesh.io/monitored-by': 'osm' }, { 'openservicemesh.io/sidecar-injection': 'enabled', 'openservicemesh.io/metrics': 'enabled' }));
    server.apply(namespace('bookstore', { 'openservicemesh.io/monitored-by': 'osm' }));
    server.apply(namespace('outside'));
    server.apply(MESH_CONFIG as unknown as Record<string, unknown>);
    // The MutatingWebhookConfiguration exactly as deploy/ ships it (no caBundle).
    const shipped = parseAllDocuments(await readFile('deploy/30-injector.yaml', 'utf8')).map((d) => d.toJS() as { kind: string });
    server.apply(shipped.find((d) => d.kind === 'MutatingWebhookConfiguration') as Record<string, unknown>);
    // The controller creates the CA Secret; the injector only reads it.
    await loadOrCreateCaSecret({ api: secretApiFor(loadKubeConfig(kubeconfigFile)), namespace: 'osm-system' });
    injector = await runInjector({
      kubeConfig: loadKubeConfig(kubeconfigFile),
      namespace: 'osm-system',
      ca: { secretName: 'trellis-ca' },
      meshConfig: { namespace: 'osm-system', name: 'osm-mesh-config' },
      webhookConfigName: WEBHOOK_CONFIG,
      host: '127.0.0.1',
      port: 0,
      logger: pino({ level: 'debug' }, { write: (line: string) => void logLines.push(line) }),
      settings: {
        meshName: 'osm',
        xdsAddress: 'osm-controller.osm-system.svc.cluster.local:15128',
        envoyImage: 'envoyproxy/envoy:v1.40.0',
        trellisImage: 'trellis:test',
        trellisCommand: ['node', '/app/bin/trellis.js'],
      },
    });
    const config = server.get('MutatingWebhookConfiguration', undefined, WEBHOOK_CONFIG) as unknown as { webhooks: { clientConfig: { caBundle?: string } }[] };
    caBundle = Buffer.from(config.webhooks[0].clientConfig.caBundle ?? '', 'base64').toString('utf8');
  });

  after(async () => {
    await injector?.stop();
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('writes the mesh CA into the MutatingWebhookConfiguration, and serves a certificate for its Service signed by it', async () => {
    const ca = await readCaSecret({ api: secretApiFor(loadKubeConfig(kubeconfigFile)), namespace: 'osm-system' });
    assert.equal(caBundle, ca.caPem);
    assert.equal(injector.caPem, ca.caPem);
    // The TLS handshake verified the serving certificate for osm-injector.osm-system.svc against the bundle.
    const health = await post('', { method: 'GET', path: '/healthz' });
    assert.equal(health.status, 200);
  });

  it("injects bookbuyer: osm-init runs the lab's interception rules, the envoy sidecar, the UUID label, the bootstrap Secret, probes and metrics", async () => {
    const pod = bookbuyerPod({ annotations: { 'openservicemesh.io/outbound-port-exclusion-list': '3306, 6379' } });
    const { answer, patched } = await admitPod(pod);
    assert.equal(answer.allowed, true);
    const uuid = patched.metadata!.labels!['osm-proxy-uuid'];
    assert.match(uuid, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    assert.equal(patched.metadata!.labels!.app, 'bookbuyer', 'the pod keeps its labels');

    // The init container: `trellis iptables-init` with the merged lists; its rules are exactly the lab's.
    const [init] = patched.spec!.initContainers!;
    assert.equal(init.name, 'osm-init');
    assert.equal(init.image, 'trellis:test');
    assert.deepEqual(init.command, ['node', '/app/bin/trellis.js']);
    assert.deepEqual(init.args, ['iptables-init', '--outbound-ip-range-exclusions=169.254.169.254/32', '--outbound-port-exclusions=22,3306,6379']);
    assert.deepEqual(init.securityContext?.capabilities?.add, ['NET_ADMIN']);
    const { stdout } = await run(process.execPath, ['--import', 'tsx', 'test/helpers/cli-main.ts', ...init.args!, '--print']);
    assert.equal(stdout, interceptionRules(interceptionOptions(MESH_CONFIG, pod as unknown as Pod)));

    // The sidecar.
    const envoy = patched.spec!.containers.find((c) => c.name === 'envoy')!;
    assert.equal(envoy.image, 'envoyproxy/envoy:v1.40.0-test', 'MeshConfig spec.sidecar.envoyImage');
    assert.deepEqual(envoy.args, ['--log-level', 'debug', '--config-path', '/etc/envoy/bootstrap.yaml', '--service-cluster', 'bookbuyer.bookbuyer']);
    assert.equal(envoy.securityContext?.runAsUser, 1500);
    assert.deepEqual(envoy.resources, { limits: { cpu: '500m', memory: '128Mi' } });
    assert.deepEqual(envoy.ports!.map((p) => p.containerPort), [15000, 15003, 15010, 15902]);
    assert.deepEqual(envoy.volumeMounts, [{ name: 'envoy-bootstrap-config-volume', readOnly: true, mountPath: '/etc/envoy' }]);
    assert.deepEqual(patched.spec!.volumes, [{ name: 'envoy-bootstrap-config-volume', secret: { secretName: `envoy-bootstrap-config-${uuid}` } }]);

    // Probes: readiness (httpGet on the named port) to 15902 under the container's path; liveness (tcpSocket) to osm-healthcheck.
    const app = patched.spec!.containers[0];
    assert.deepEqual(app.readinessProbe, { httpGet: { path: '/osm-readiness-probe/bookbuyer', port: 15902 }, timeoutSeconds: 2 });
    assert.deepEqual(app.livenessProbe, { httpGet: { path: '/osm-healthcheck', port: 15904, httpHeaders: [{ name: 'Original-Tcp-Port', value: '14001' }] } });
    assert.deepEqual(patched.spec!.containers.map((c) => c.name), ['bookbuyer', 'osm-healthcheck', 'envoy']);
    assert.deepEqual(patched.spec!.containers[1].args, ['healthcheck', '--port=15904']);

    // Metrics (enabled on the namespace): Prometheus' scrape annotations.
    assert.equal(patched.metadata!.annotations!['prometheus.io/scrape'], 'true');
    assert.equal(patched.metadata!.annotations!['prometheus.io/port'], '15010');
    assert.equal(patched.metadata!.annotations!['prometheus.io/path'], '/stats/prometheus');

    // The bootstrap Secret: an xDS certificate whose CN carries the UUID, from the mesh CA.
    const secret = secretOf(patched);
    assert.ok(secret, 'the bootstrap Secret was created in the pod namespace');
    const cert = new X509Certificate(secret.data['cert.pem']);
    assert.equal(cert.subject, `CN=${uuid}.sidecar.bookbuyer.bookbuyer.cluster.local`);
    assert.ok(cert.verify(new X509Certificate(caBundle).publicKey), 'signed by the mesh CA');
    assert.equal(secret.data['ca.pem'], caBundle);
    const bootstrap = parse(secret.data['bootstrap.yaml']) as {
      node: { id: string; cluster: string };
      static_resources: { clusters: { name: string; load_assignment: { endpoints: { lb_endpoints: { endpoint: { address: { socket_address: { port_value: number } } } }[] }[] } }[]; listeners: { name: string; address: { socket_address: { port_value: number } }; filter_chains: { filters: { typed_config: { route_config?: { virtual_hosts: { routes: { match: { prefix: string }; route: { cluster: string; prefix_rewrite?: string; timeout?: string } }[] }[] } } }[] }[] }[] };
    };
    assert.equal(bootstrap.node.id, `${uuid}.sidecar.bookbuyer.bookbuyer.cluster.local`);
    assert.equal(bootstrap.node.cluster, 'bookbuyer.bookbuyer');
    assert.deepEqual(bootstrap.static_resources.clusters.map((c) => c.name), ['osm-controller', 'bookbuyer_readiness_cluster', 'envoy-metrics-cluster']);
    assert.equal(bootstrap.static_resources.clusters[1].load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value, 14001);
    assert.deepEqual(bootstrap.static_resources.listeners.map((l) => [l.name, l.address.socket_address.port_value]), [['readiness_listener', 15902], ['inbound-prometheus-listener', 15010]]);
    const [route] = bootstrap.static_resources.listeners[0].filter_chains[0].filters[0].typed_config.route_config!.virtual_hosts[0].routes;
    assert.deepEqual(route, { match: { prefix: '/osm-readiness-probe/bookbuyer' }, route: { cluster: 'bookbuyer_readiness_cluster', prefix_rewrite: '/ready', timeout: '2s' } });
    const [metricsRoute] = bootstrap.static_resources.listeners[1].filter_chains[0].filters[0].typed_config.route_config!.virtual_hosts[0].routes;
    assert.equal(metricsRoute.route.cluster, 'envoy-metrics-cluster');
  });

  it('rewrites gRPC and HTTPS probes and a startup probe, with one listener per probe kind', async () => {
    const pod = bookbuyerPod({
      containers: [
        { name: 'web', image: 'web', ports: [{ name: 'https', containerPort: 8443 }], livenessProbe: { httpGet: { path: '/live', port: 'https', scheme: 'HTTPS' } }, startupProbe: { httpGet: { path: '/started', port: 8080 } } },
        { name: 'api', image: 'api', readinessProbe: { grpc: { port: 9000 } }, livenessProbe: { httpGet: { port: 9001 } } },
      ],
    });
    const { patched } = await admitPod(pod);
    const [web, api] = patched.spec!.containers;
    assert.deepEqual(web.livenessProbe, { httpGet: { path: '/live', port: 15901, scheme: 'HTTPS' } }, 'HTTPS keeps its path, passed through as TLS');
    assert.deepEqual(web.startupProbe, { httpGet: { path: '/osm-startup-probe/web', port: 15903 } });
    assert.deepEqual(api.readinessProbe, { grpc: { port: 15902 } });
    assert.deepEqual(api.livenessProbe, { httpGet: { path: '/osm-liveness-probe/api', port: 15901 } });
    assert.ok(!patched.spec!.containers.some((c) => c.name === 'osm-healthcheck'), 'no tcpSocket probe: no healthcheck container');
    const bootstrap = parse(secretOf(patched)!.data['bootstrap.yaml']) as { static_resources: { clusters: { name: string }[]; listeners: { name: string; filter_chains: { filter_chain_match?: unknown; filters: { name: string; typed_config: { route_config?: { virtual_hosts: { routes: { match: { prefix: string }; route: { prefix_rewrite?: string } }[] }[] } } }[] }[] }[] } };
    assert.deepEqual(bootstrap.static_resources.listeners.map((l) => l.name), ['liveness_listener', 'readiness_listener', 'startup_listener', 'inbound-prometheus-listener']);
    assert.deepEqual(bootstrap.static_resources.clusters.map((c) => c.name).slice(1), ['web_liveness_cluster', 'api_liveness_cluster', 'api_readiness_cluster', 'web_startup_cluster', 'envoy-metrics-cluster']);
    const liveness = bootstrap.static_resources.listeners[0];
    assert.deepEqual(liveness.filter_chains.map((c) => c.filters[0].name), ['tcp_proxy', 'http_connection_manager']);
    assert.deepEqual(liveness.filter_chains[1].filters[0].typed_config.route_config!.virtual_hosts[0].routes.map((r) => [r.match.prefix, r.route.prefix_rewrite]), [['/osm-liveness-probe/api', '/']]);
    const readiness = bootstrap.static_resources.listeners[1];
    assert.equal(readiness.filter_chains[0].filters[0].typed_config.route_config!.virtual_hosts[0].routes[0].match.prefix, '/grpc.health.v1.Health/');
  });

  it('is idempotent: an injected pod posted again gets a new UUID and Secret, never a second sidecar', async () => {
    const { patched: first } = await admitPod(bookbuyerPod());
    const { patched: again, patch } = await admitPod(first);
    const uuid1 = first.metadata!.labels!['osm-proxy-uuid'];
    const uuid2 = again.metadata!.labels!['osm-proxy-uuid'];
    assert.notEqual(uuid1, uuid2, 'two pods never share a proxy UUID');
    assert.deepEqual(again.spec!.containers.map((c) => c.name), first.spec!.containers.map((c) => c.name));
    assert.deepEqual(again.spec!.initContainers!.map((c) => c.name), ['osm-init']);
    assert.deepEqual(again.spec!.volumes, [{ name: 'envoy-bootstrap-config-volume', secret: { secretName: `envoy-bootstrap-config-${uuid2}` } }]);
    assert.deepEqual(patch.map((op) => op.path).sort(), ['/metadata/labels/osm-proxy-uuid', '/spec/volumes/0/secret/secretName']);
    assert.ok(secretOf(again), 'a Secret for the new UUID');
    // The copy's probes point at the probe listeners already: its new bootstrap serves them as the first one's did.
    const staticResources = (p: V1Pod) => (parse(secretOf(p)!.data['bootstrap.yaml']) as { static_resources: unknown }).static_resources;
    assert.deepEqual(staticResources(again), staticResources(first));
  });

  it('admits uninjected: sidecar-injection disabled on the pod, hostNetwork, a namespace outside the mesh or not enabled, osm-system', async () => {
    const cases: [string, V1Pod][] = [
      ['disabled on the pod (pod wins over the namespace)', bookbuyerPod({ annotations: { 'openservicemesh.io/sidecar-injection': 'disabled' } })],
      ['hostNetwork', bookbuyerPod({ hostNetwork: true })],
      ['namespace not monitored', { ...bookbuyerPod({ annotations: { 'openservicemesh.io/sidecar-injection': 'enabled' } }), metadata: { name: 'p', namespace: 'outside', annotations: { 'openservicemesh.io/sidecar-injection': 'enabled' } } }],
      ['monitored namespace without the annotation', { ...bookbuyerPod(), metadata: { name: 'p', namespace: 'bookstore' } }],
      ['the injector namespace', { ...bookbuyerPod({ annotations: { 'openservicemesh.io/sidecar-injection': 'enabled' } }), metadata: { name: 'p', namespace: 'osm-system', annotations: { 'openservicemesh.io/sidecar-injection': 'enabled' } } }],
      ['a namespace that does not exist', { ...bookbuyerPod(), metadata: { name: 'p', namespace: 'nowhere' } }],
    ];
    const secretsBefore = server.objects('Secret').length;
    for (const [what, pod] of cases) {
      const { answer, patch } = await admitPod(pod);
      assert.equal(answer.allowed, true, what);
      assert.equal(answer.patch, undefined, what);
      assert.equal(patch.length, 0, what);
    }
    assert.equal(server.objects('Secret').length, secretsBefore, 'no Secret created');
    // Enabled on the pod in a monitored namespace without the annotation: injected.
    const { patched } = await admitPod({ ...bookbuyerPod(), metadata: { generateName: 'bookstore-', namespace: 'bookstore', annotations: { 'openservicemesh.io/sidecar-injection': 'yes' } } });
    assert.ok(patched.spec!.containers.some((c) => c.name === 'envoy'));
    assert.equal(patched.metadata!.annotations!['prometheus.io/scrape'], undefined, 'metrics are not enabled on bookstore');
  });

  it('a dry run is patched but creates no Secret; other kinds and operations pass through', async () => {
    const before = server.objects('Secret').length;
    const { patched } = await admitPod(bookbuyerPod(), { dryRun: true });
    assert.ok(patched.metadata!.labels!['osm-proxy-uuid']);
    assert.equal(server.objects('Secret').length, before);
    const update = await admitPod(bookbuyerPod(), { operation: 'UPDATE' });
    assert.equal(update.answer.allowed, true);
    assert.equal(update.patch.length, 0);
  });

  it('refuses, naming the field, a pod it must inject but cannot', async () => {
    const cases: [V1Pod, RegExp][] = [
      [bookbuyerPod({ annotations: { 'openservicemesh.io/sidecar-injection': 'maybe' } }), /metadata\.annotations\["openservicemesh\.io\/sidecar-injection"\]: "maybe" is not one of enabled, disabled/],
      [bookbuyerPod({ annotations: { 'openservicemesh.io/outbound-port-exclusion-list': '22,http' } }), /Pod bookbuyer\/bookbuyer-5d8f9c-: metadata\.annotations\["openservicemesh\.io\/outbound-port-exclusion-list"\]\[1\]: "http" is not a port/],
      [bookbuyerPod({ annotations: { 'openservicemesh.io/outbound-ip-range-exclusion-list': '10.0.0.0/33' } }), /outbound-ip-range-exclusion-list"\]\[0\]: "10\.0\.0\.0\/33" is not an IP range/],
      [bookbuyerPod({ containers: [{ name: 'c', image: 'i', livenessProbe: { httpGet: { port: 'nope' } } }] }), /spec\.containers\[0\]\.livenessProbe\.httpGet\.port: no port named "nope"/],
      [bookbuyerPod({ containers: [] }), /spec\.containers: the pod has no containers/],
      [bookbuyerPod({ containers: [{ name: 'envoy', image: 'i' }] }), /spec\.containers\[0\]\.name: a container is already named envoy/],
      // An injected pod whose recorded original probes were edited into something else.
      [
        { ...bookbuyerPod({ annotations: { 'injector.trellis.dev/original-probes': '[{"kind":"constructor","container":"bookbuyer","protocol":"http","port":1,"path":"/","timeoutSeconds":1}]' } }), spec: { ...bookbuyerPod().spec!, volumes: [{ name: 'envoy-bootstrap-config-volume', secret: { secretName: 'envoy-bootstrap-config-x' } }] } },
        /metadata\.annotations\["injector\.trellis\.dev\/original-probes"\]\[0\]: not a probe of one of the pod's containers/,
      ],
      // A ServiceAccount may be named as a DNS subdomain; the xDS certificate's CN would not parse.
      [{ ...bookbuyerPod(), spec: { ...bookbuyerPod().spec!, serviceAccountName: 'book.buyer' } }, /spec\.serviceAccountName: "book\.buyer" is not a DNS label/],
    ];
    const before = server.objects('Secret').length;
    for (const [pod, message] of cases) {
      const { answer, patch } = await admitPod(pod);
      assert.equal(answer.allowed, false, String(message));
      assert.match(answer.status!.message, message);
      assert.equal(patch.length, 0);
    }
    assert.equal(server.objects('Secret').length, before, 'nothing created for a refused pod');
  });

  it('bounds a refusal quoting a huge value, and its log lines (a 300 000-character annotation and pod name)', async () => {
    const huge = 'x'.repeat(300_000);
    logLines.length = 0;
    const { answer } = await admitPod(bookbuyerPod({ annotations: { 'openservicemesh.io/sidecar-injection': huge } }));
    assert.equal(answer.allowed, false);
    assert.match(answer.status!.message, /sidecar-injection"\]: "x+… \[\d+ more characters cut\]/);
    assert.ok(answer.status!.message.length <= 2048, `a refusal of ${answer.status!.message.length} characters`);
    const named = bookbuyerPod({ containers: [{ name: 'c', image: 'i', livenessProbe: { httpGet: { port: 'nope' } } }] });
    named.metadata!.generateName = `${huge}-`;
    assert.equal((await admitPod(named)).answer.allowed, false);
    assert.ok(logLines.length > 0, 'the refusal was logged');
    for (const line of logLines) assert.ok(line.length <= 4096, `a log line of ${line.length} characters`);
  });

  it('refuses, naming the MeshConfig field, an exclusion list of the MeshConfig that does not parse', async () => {
    server.apply({ ...MESH_CONFIG, spec: { traffic: { outboundPortExclusionList: [22, 70000] } } } as unknown as Record<string, unknown>);
    try {
      const { answer } = await admitPod(bookbuyerPod());
      assert.equal(answer.allowed, false);
      assert.match(answer.status!.message, /MeshConfig osm-system\/osm-mesh-config: spec\.traffic\.outboundPortExclusionList\[1\]: "70000" is not a port/);
    } finally {
      server.apply(MESH_CONFIG as unknown as Record<string, unknown>);
    }
  });

  it('answers HTTP errors only to what is not an AdmissionReview', async () => {
    assert.equal((await post('{not json')).status, 400);
    assert.equal((await post({ kind: 'Pod' })).status, 400);
    assert.equal((await post({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request: {} })).status, 400);
    assert.equal((await post(podReview(bookbuyerPod()), { contentType: 'text/plain' })).status, 415);
    assert.equal((await post('', { method: 'GET' })).status, 405);
    assert.equal((await post(podReview(bookbuyerPod()), { path: '/other' })).status, 404);
    assert.equal((await post('x'.repeat(5 * 1024 * 1024))).status, 413);
    // A pod without a spec: an AdmissionReview answer refusing it.
    const answer = await post(podReview({ metadata: { name: 'p', namespace: 'bookbuyer' } } as V1Pod));
    assert.equal(answer.json!.response.allowed, false);
    assert.match(answer.json!.response.status!.message, /request\.object: not a Pod/);
  });

  it('`trellis bootstrap --kubernetes` signs with the CA of the Secret, and refuses without one', async () => {
    const out = path.join(dir, 'bootstrap-out');
    const args = ['--import', 'tsx', 'test/helpers/cli-main.ts', 'bootstrap', '--kubeconfig', kubeconfigFile, '--namespace', 'bookbuyer', '--service-account', 'bookbuyer', '--out', out];
    const { stdout } = await run(process.execPath, [...args, '--kubernetes', '--ca-namespace', 'osm-system']);
    assert.match(stdout, /^[0-9a-f-]{36}\.sidecar\.bookbuyer\.bookbuyer\.cluster\.local\n/);
    const cert = new X509Certificate(await readFile(path.join(out, 'cert.pem'), 'utf8'));
    assert.ok(cert.verify(new X509Certificate(caBundle).publicKey), "signed by the Secret's CA");
    assert.equal(await readFile(path.join(out, 'ca.pem'), 'utf8'), caBundle);
    await assert.rejects(run(process.execPath, [...args, '--kubernetes', '--ca-namespace', 'elsewhere']), /secret elsewhere\/trellis-ca not found: the controller creates the mesh CA there/);
  });

  it('`trellis namespace add` enables injection in the namespace (as `osm namespace add`), `remove` takes it away', async () => {
    server.apply(namespace('newcomer'));
    const pod = { ...bookbuyerPod(), metadata: { generateName: 'newcomer-', namespace: 'newcomer' } };
    assert.equal((await admitPod(pod)).patch.length, 0, 'not in the mesh yet');
    const written: string[] = [];
    await namespaceAdd(loadKubeConfig(kubeconfigFile), ['newcomer'], 'osm', { write: (t) => void written.push(t) });
    assert.deepEqual(written, ['namespace newcomer added to mesh osm (sidecar injection enabled)\n']);
    assert.ok((await admitPod(pod)).patched.spec!.containers.some((c) => c.name === 'envoy'));
    await namespaceRemove(loadKubeConfig(kubeconfigFile), ['newcomer'], 'osm', { write: () => undefined });
    assert.equal((server.get('Namespace', undefined, 'newcomer')!.metadata.annotations as Record<string, string> | undefined)?.['openservicemesh.io/sidecar-injection'], undefined);
    assert.equal((await admitPod(pod)).patch.length, 0);
  });

  it('`trellis injector` runs as a process: it listens, serves HTTPS with the bundle, and stops on SIGTERM', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'test/helpers/cli-main.ts', 'injector', '--kubeconfig', kubeconfigFile, '--namespace', 'osm-system', '--address', '127.0.0.1:19450', '--ip-address', '127.0.0.1', '--log-level', 'warn'], { stdio: ['ignore', 'pipe', 'pipe'] });
    try {
      await new Promise<void>((resolve, reject) => {
        let out = '';
        child.stdout.on('data', (d: Buffer) => (out += d.toString()).includes('injector listening on 127.0.0.1:19450') && resolve());
        child.stderr.on('data', (d: Buffer) => (out += d.toString()));
        child.once('exit', (code) => reject(new Error(`trellis injector exited ${code}: ${out}`)));
      });
      assert.equal((await postToWebhook({ port: 19450, caBundle }, '', { method: 'GET', path: '/healthz' })).status, 200);
      const { answer } = await admitTo({ port: 19450, caBundle }, bookbuyerPod());
      assert.equal(answer.allowed, true);
      assert.equal(answer.patchType, 'JSONPatch');
    } finally {
      const exited = new Promise<number | null>((r) => child.once('exit', r));
      child.kill('SIGTERM');
      assert.equal(await exited, 0);
    }
  });

  it('fails to start without the MutatingWebhookConfiguration, naming it', async () => {
    await assert.rejects(
      runInjector({
        kubeConfig: loadKubeConfig(kubeconfigFile),
        namespace: 'osm-system',
        ca: { secretName: 'trellis-ca' },
        meshConfig: { namespace: 'osm-system', name: 'osm-mesh-config' },
        webhookConfigName: 'osm-webhook-missing',
        host: '127.0.0.1',
        port: 0,
        settings: { meshName: 'osm', xdsAddress: '127.0.0.1:15128', envoyImage: 'e', trellisImage: 't', trellisCommand: ['trellis'] },
      }),
      /MutatingWebhookConfiguration osm-webhook-missing not found/,
    );
  });
});

describe('trellis healthcheck (the osm-healthcheck container of rewritten tcpSocket probes)', () => {
  it('answers 200 when the original port accepts, 503 when it does not, 400 without the header', async () => {
    const healthcheck = await startHealthcheckServer({ host: '127.0.0.1', port: 0 });
    const listening = net.createServer((s) => s.destroy());
    await new Promise<void>((r) => listening.listen(0, '127.0.0.1', r));
    const open = (listening.address() as AddressInfo).port;
    const closed = await new Promise<number>((resolve) => {
      const s = net.createServer();
      s.listen(0, '127.0.0.1', () => {
        const port = (s.address() as AddressInfo).port;
        s.close(() => resolve(port));
      });
    });
    const probe = async (headers: Record<string, string>) => (await fetch(`http://127.0.0.1:${healthcheck.port}/osm-healthcheck`, { headers })).status;
    try {
      assert.equal(await probe({ 'Original-Tcp-Port': String(open) }), 200);
      assert.equal(await probe({ 'Original-Tcp-Port': String(closed) }), 503);
      assert.equal(await probe({}), 400);
      assert.equal(await probe({ 'Original-Tcp-Port': '70000' }), 400);
    } finally {
      listening.close();
      await healthcheck.close();
    }
  });
});
