/**
 * The sidecar injector against a real kube-apiserver (test/helpers/kube-real-apiserver.ts):
 * deploy/'s CRDs, namespace and RBAC applied with the injector's ServiceAccount and RBAC from
 * deploy/30-injector.yaml (not its Deployment or Service: nothing runs pods here), and its
 * MutatingWebhookConfiguration with `clientConfig.url` on loopback instead of the Service (no
 * Service routing here). `bin/trellis.js injector` runs as a process with a TokenRequest token
 * of `osm-system/osm-injector` only, so its RBAC is proven sufficient (it reads the CA Secret,
 * writes the caBundle, creates bootstrap Secrets) and a request outside it is refused with 403.
 * Pods are created through the API server, which calls the webhook: the STORED pod is checked.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, it } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { parseAllDocuments } from 'yaml';
import { loadOrCreateCaSecret, secretApiFor } from '../src/certificate/secret-store.js';
import { loadKubeConfig } from '../src/sources/kubernetes/kubernetes-source.js';
import { describeOn, RealKubeApiServer, statusOf } from './helpers/kube-real-apiserver.js';
import { eventually } from './helpers/wait.js';

const ROOT = path.resolve(import.meta.dirname, '..');
const WEBHOOK_CONFIG = 'osm-webhook-osm';
/** The injector's ports (this file's range). */
const FIRST_PORT = 19800;
const LAST_PORT = 19899;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

type Manifest = { kind: string; metadata: { name: string; namespace?: string }; [key: string]: unknown };
type WebhookConfiguration = Manifest & { webhooks: { name: string; clientConfig: { url?: string; caBundle?: string; service?: { namespace: string; name: string; path?: string; port?: number } } }[] };

/** deploy/30-injector.yaml's objects. */
async function injectorManifests(): Promise<Manifest[]> {
  return parseAllDocuments(await readFile(path.join(ROOT, 'deploy/30-injector.yaml'), 'utf8')).map((d) => d.toJS() as Manifest);
}

/** deploy's MutatingWebhookConfiguration with each webhook's Service swapped for `https://127.0.0.1:<port><its path>`. */
function byUrl(shipped: WebhookConfiguration, port: number): WebhookConfiguration {
  const copy = structuredClone(shipped);
  for (const webhook of copy.webhooks) {
    const service = webhook.clientConfig.service;
    assert.ok(service, `deploy/30-injector.yaml: webhook ${webhook.name} is called through a Service`);
    webhook.clientConfig = { url: `https://127.0.0.1:${port}${service.path ?? '/'}` };
  }
  return copy;
}

/** The Status message of an API error (client-node's ApiException body). */
function messageOf(err: unknown): string {
  const body = (err as { body?: unknown }).body;
  const parsed = typeof body === 'string' ? (JSON.parse(body) as { message?: string }) : (body as { message?: string } | undefined);
  return parsed?.message ?? String(err);
}

/**
 * bookbuyer's pod as its Deployment (OSM's demo) makes it, with a readiness and a liveness probe.
 * @param name a name ending in `-` is a `generateName`, as a ReplicaSet's pods have (the
 *   AdmissionReview's pod then has no name yet).
 */
function bookbuyerPod(namespace: string, name: string, annotations?: Record<string, string>): k8s.V1Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { ...(name.endsWith('-') ? { generateName: name } : { name }), namespace, labels: { app: 'bookbuyer', version: 'v1' }, annotations },
    spec: {
      serviceAccountName: 'bookbuyer',
      containers: [
        {
          name: 'bookbuyer',
          image: 'openservicemesh/bookbuyer:latest-main',
          command: ['/bookbuyer'],
          ports: [{ name: 'http', containerPort: 14001 }],
          readinessProbe: { httpGet: { path: '/ready', port: 'http' }, timeoutSeconds: 2 },
          livenessProbe: { tcpSocket: { port: 14001 } },
        },
      ],
    },
  };
}

describeOn('real', 'trellis injector against a real kube-apiserver: its ServiceAccount token, called by the API server', () => {
  let server: RealKubeApiServer;
  let dir: string;
  let child: ChildProcess | undefined;
  let output = '';
  let port = 0;
  let caPem: string;
  let asInjector: k8s.KubeConfig;
  let injectorKubeconfig: string;
  let adminConfig: k8s.KubeConfig;

  /** Starts `trellis injector` on `candidate`; resolves false when the port was taken. */
  function startInjector(kubeconfig: string, candidate: number): Promise<boolean> {
    output = '';
    const proc = spawn(
      process.execPath,
      [
        'bin/trellis.js', 'injector', '--kubeconfig', kubeconfig, '--namespace', 'osm-system', '--mesh-name', 'osm',
        '--address', `127.0.0.1:${candidate}`, '--ip-address', '127.0.0.1', '--trellis-image', 'trellis:test',
      ],
      { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    child = proc;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`trellis injector did not start within 60 s:\n${output}`)), 60_000);
      proc.stdout.on('data', (d: Buffer) => {
        output += d.toString();
        if (output.includes(`injector listening on 127.0.0.1:${candidate}`)) {
          clearTimeout(timer);
          resolve(true);
        }
      });
      proc.stderr.on('data', (d: Buffer) => (output += d.toString()));
      proc.once('exit', (code) => {
        clearTimeout(timer);
        child = undefined;
        if (/EADDRINUSE/.test(output)) resolve(false);
        else reject(new Error(`trellis injector exited (${code}):\n${output}`));
      });
    });
  }

  before(async () => {
    const t0 = Date.now();
    server = await RealKubeApiServer.start({ name: 'injector' });
    dir = await mkdtemp(path.join(os.tmpdir(), 'trellis-kube-real-injector-'));
    await server.applyFile(path.join(ROOT, 'deploy/00-namespace.yaml'));
    await server.applyFile(path.join(ROOT, 'deploy/10-rbac.yaml'));
    const manifests = await injectorManifests();
    // Its ServiceAccount and RBAC; not the Deployment, Service, PodDisruptionBudget (no pods run).
    await server.applyAll(manifests.filter((m) => ['ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'Role', 'RoleBinding', 'ValidatingAdmissionPolicy', 'ValidatingAdmissionPolicyBinding'].includes(m.kind)));
    const shipped = manifests.find((m) => m.kind === 'MutatingWebhookConfiguration') as WebhookConfiguration;
    assert.equal(shipped.metadata.name, WEBHOOK_CONFIG);

    const adminKubeconfig = await server.writeKubeconfig(path.join(dir, 'admin'));
    adminConfig = loadKubeConfig(adminKubeconfig);
    // The controller makes the CA Secret (test/kube-real-rbac.test.ts proves it can); here the admin does.
    caPem = (await loadOrCreateCaSecret({ api: secretApiFor(adminConfig), namespace: 'osm-system' })).ca.caPem;
    await server.applyAll([
      { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'bookbuyer', labels: { 'openservicemesh.io/monitored-by': 'osm' }, annotations: { 'openservicemesh.io/sidecar-injection': 'enabled' } } },
      { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'outside', annotations: { 'openservicemesh.io/sidecar-injection': 'enabled' } } },
      // No controller-manager: each namespace's ServiceAccounts are created by hand.
      ...['bookbuyer', 'outside'].flatMap((ns) => ['default', 'bookbuyer'].map((name) => ({ apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name, namespace: ns } }))),
      {
        apiVersion: 'config.openservicemesh.io/v1alpha2',
        kind: 'MeshConfig',
        metadata: { name: 'osm-mesh-config', namespace: 'osm-system' },
        spec: { traffic: { outboundPortExclusionList: [22] }, sidecar: { logLevel: 'debug' } },
      },
    ]);

    const token = await server.serviceAccountToken('osm-system', 'osm-injector');
    const kubeconfig = await server.writeKubeconfig(path.join(dir, 'injector'), 'osm-system', token);
    injectorKubeconfig = kubeconfig;
    asInjector = new k8s.KubeConfig();
    asInjector.loadFromFile(kubeconfig);
    const t1 = Date.now();
    for (let candidate = FIRST_PORT + Math.floor(Math.random() * 50); ; candidate++) {
      assert.ok(candidate <= LAST_PORT, `no free port in ${FIRST_PORT}-${LAST_PORT}`);
      // The webhook as deploy/ ships it (no caBundle: the injector writes it at start), called by URL.
      await server.apply(byUrl(shipped, candidate));
      if (await startInjector(kubeconfig, candidate)) {
        port = candidate;
        break;
      }
    }
    console.log(`# real kube-apiserver start ${server.startMs} ms; deploy/ applied at ${t1 - t0} ms; injector listening ${Date.now() - t1} ms later on ${port}`);
  });

  /** Stops the injector (SIGTERM, by its PID). @returns its exit code. */
  async function stopInjector(): Promise<number | null> {
    const proc = child;
    if (!proc || proc.exitCode !== null) return proc?.exitCode ?? null;
    const exited = new Promise<number | null>((resolve) => proc.once('exit', resolve));
    proc.kill('SIGTERM');
    return exited;
  }

  after(async () => {
    await stopInjector();
    await server?.shutdown();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const readConfig = async () => (await adminConfig.makeApiClient(k8s.AdmissionregistrationV1Api).readMutatingWebhookConfiguration({ name: WEBHOOK_CONFIG })) as unknown as WebhookConfiguration;
  const bookbuyerSecrets = async () => (await server.core.listNamespacedSecret({ namespace: 'bookbuyer' })).items.map((s) => s.metadata!.name!);

  /** Waits until kube-apiserver calls the webhook with the caBundle (its configuration is cached): a dry-run create is injected. */
  async function webhookInEffect(): Promise<void> {
    let last = '';
    await eventually(
      async () => {
        try {
          const dry = await server.core.createNamespacedPod({ namespace: 'bookbuyer', body: bookbuyerPod('bookbuyer', 'bookbuyer-dry-run'), dryRun: 'All' });
          return dry.spec!.containers.some((c) => c.name === 'envoy');
        } catch (err) {
          last = messageOf(err);
          return false;
        }
      },
      `kube-apiserver to call the injector (last error: ${last})`,
      60_000,
      200,
    );
  }

  it("starts with only its ServiceAccount's RBAC: reads the CA Secret, writes the caBundle into the MutatingWebhookConfiguration", async () => {
    const config = await readConfig();
    assert.equal(config.webhooks.length, 1);
    assert.equal(config.webhooks[0].clientConfig.url, `https://127.0.0.1:${port}/mutate-pod-creation`);
    assert.equal(Buffer.from(config.webhooks[0].clientConfig.caBundle ?? '', 'base64').toString('utf8'), caPem, 'the mesh CA from the Secret');
    assert.match(output, /CA bundle written into the MutatingWebhookConfiguration/);
    assert.doesNotMatch(output, /forbidden|\b403: /i, 'no request of the injector was refused');
  });

  it('is called by kube-apiserver: the STORED bookbuyer pod has osm-init, envoy, the UUID label, rewritten probes and its bootstrap Secret', async () => {
    const t0 = Date.now();
    await webhookInEffect();
    const t1 = Date.now();
    const secretsBefore = await bookbuyerSecrets();
    assert.deepEqual(secretsBefore, [], 'a dry run creates no bootstrap Secret (sideEffects NoneOnDryRun)');
    const created = await server.core.createNamespacedPod({ namespace: 'bookbuyer', body: bookbuyerPod('bookbuyer', 'bookbuyer-5d8f9c-', { 'openservicemesh.io/outbound-port-exclusion-list': '3306' }) });
    const t2 = Date.now();
    assert.match(created.metadata!.name!, /^bookbuyer-5d8f9c-[a-z0-9]{5}$/);
    const pod = await server.core.readNamespacedPod({ namespace: 'bookbuyer', name: created.metadata!.name! });
    console.log(`# webhook in effect after ${t1 - t0} ms of dry runs; an injected create took ${t2 - t1} ms`);

    const uuid = pod.metadata!.labels!['osm-proxy-uuid'];
    assert.match(uuid, UUID);
    assert.equal(pod.metadata!.labels!.app, 'bookbuyer');
    const [init] = pod.spec!.initContainers!;
    assert.equal(init.name, 'osm-init');
    assert.equal(init.image, 'trellis:test');
    assert.deepEqual(init.args, ['iptables-init', '--outbound-port-exclusions=22,3306'], 'the MeshConfig and annotation lists');
    assert.deepEqual(init.securityContext?.capabilities?.add, ['NET_ADMIN']);
    assert.deepEqual(pod.spec!.containers.map((c) => c.name), ['bookbuyer', 'osm-healthcheck', 'envoy']);
    const envoy = pod.spec!.containers.find((c) => c.name === 'envoy')!;
    assert.equal(envoy.securityContext?.runAsUser, 1500);
    assert.deepEqual(envoy.args, ['--log-level', 'debug', '--config-path', '/etc/envoy/bootstrap.yaml', '--service-cluster', 'bookbuyer.bookbuyer']);
    assert.ok(envoy.volumeMounts!.some((m) => m.name === 'envoy-bootstrap-config-volume' && m.mountPath === '/etc/envoy'));

    // Probes as stored: the API server's defaults (scheme, period, thresholds) kept, port and path rewritten.
    const app = pod.spec!.containers[0];
    assert.equal(app.readinessProbe?.httpGet?.path, '/osm-readiness-probe/bookbuyer');
    assert.equal(app.readinessProbe?.httpGet?.port, 15902);
    assert.equal(app.readinessProbe?.httpGet?.scheme, 'HTTP');
    assert.equal(app.readinessProbe?.timeoutSeconds, 2);
    assert.equal(app.readinessProbe?.periodSeconds, 10);
    assert.deepEqual(app.livenessProbe?.httpGet?.httpHeaders?.map((h) => [h.name, h.value]), [['Original-Tcp-Port', '14001']]);
    assert.equal(app.livenessProbe?.httpGet?.port, 15904);
    assert.equal(app.livenessProbe?.tcpSocket, undefined);

    // The bootstrap volume next to the API server's own service-account token volume.
    const volume = pod.spec!.volumes!.find((v) => v.name === 'envoy-bootstrap-config-volume');
    assert.equal(volume?.secret?.secretName, `envoy-bootstrap-config-${uuid}`);
    assert.ok(pod.spec!.volumes!.some((v) => v.name.startsWith('kube-api-access-')), 'the ServiceAccount admission plugin ran first');

    // Its Secret, created by the injector with its token, in the pod's namespace.
    const secret = await server.core.readNamespacedSecret({ namespace: 'bookbuyer', name: volume!.secret!.secretName! });
    assert.equal(secret.metadata?.labels?.['osm-proxy-uuid'], uuid);
    const data = (key: string) => Buffer.from(secret.data![key], 'base64').toString('utf8');
    const cert = new X509Certificate(data('cert.pem'));
    assert.equal(cert.subject, `CN=${uuid}.sidecar.bookbuyer.bookbuyer.cluster.local`);
    assert.ok(cert.verify(new X509Certificate(caPem).publicKey), 'signed by the mesh CA');
    assert.equal(data('ca.pem'), caPem);
    assert.match(data('bootstrap.yaml'), new RegExp(`id: ${uuid}\\.sidecar\\.bookbuyer\\.bookbuyer\\.cluster\\.local`));
    assert.deepEqual(await bookbuyerSecrets(), [secret.metadata!.name], 'one Secret per injected pod (none for the dry runs)');
  });

  it('stores, as the API server validates it, a pod whose gRPC, HTTPS and startup probes were rewritten, with metrics on', async () => {
    await webhookInEffect();
    const body: k8s.V1Pod = {
      metadata: { generateName: 'web-', namespace: 'bookbuyer', annotations: { 'openservicemesh.io/metrics': 'enabled' } },
      spec: {
        containers: [
          { name: 'web', image: 'web', ports: [{ name: 'https', containerPort: 8443 }], livenessProbe: { httpGet: { path: '/live', port: 'https', scheme: 'HTTPS' } }, startupProbe: { httpGet: { path: '/started', port: 8080 } } },
          { name: 'api', image: 'api', readinessProbe: { grpc: { port: 9000 } }, livenessProbe: { httpGet: { port: 9001 } } },
        ],
      },
    };
    const created = await server.core.createNamespacedPod({ namespace: 'bookbuyer', body });
    const pod = await server.core.readNamespacedPod({ namespace: 'bookbuyer', name: created.metadata!.name! });
    const [web, api] = pod.spec!.containers;
    assert.deepEqual([web.livenessProbe?.httpGet?.port, web.livenessProbe?.httpGet?.path, web.livenessProbe?.httpGet?.scheme], [15901, '/live', 'HTTPS']);
    assert.deepEqual([web.startupProbe?.httpGet?.port, web.startupProbe?.httpGet?.path], [15903, '/osm-startup-probe/web']);
    assert.equal(api.readinessProbe?.grpc?.port, 15902);
    assert.deepEqual([api.livenessProbe?.httpGet?.port, api.livenessProbe?.httpGet?.path], [15901, '/osm-liveness-probe/api']);
    assert.deepEqual(pod.spec!.containers.map((c) => c.name), ['web', 'api', 'envoy'], 'no tcpSocket probe: no osm-healthcheck');
    assert.equal(pod.spec!.serviceAccountName, 'default', "the API server's default, which the certificate names");
    assert.equal(pod.metadata!.annotations!['prometheus.io/port'], '15010');
    const uuid = pod.metadata!.labels!['osm-proxy-uuid'];
    const secret = await server.core.readNamespacedSecret({ namespace: 'bookbuyer', name: `envoy-bootstrap-config-${uuid}` });
    assert.equal(new X509Certificate(Buffer.from(secret.data!['cert.pem'], 'base64')).subject, `CN=${uuid}.sidecar.default.bookbuyer.cluster.local`);
  });

  it('stores uninjected a pod of a namespace outside the mesh (the namespaceSelector), and one whose annotation disables injection', async () => {
    await webhookInEffect();
    await server.core.createNamespacedPod({ namespace: 'outside', body: bookbuyerPod('outside', 'bookbuyer-outside') });
    const outside = await server.core.readNamespacedPod({ namespace: 'outside', name: 'bookbuyer-outside' });
    assert.deepEqual(outside.spec!.containers.map((c) => c.name), ['bookbuyer']);
    assert.equal(outside.spec!.initContainers, undefined);
    assert.equal(outside.metadata!.labels!['osm-proxy-uuid'], undefined);
    assert.equal(outside.spec!.containers[0].readinessProbe?.httpGet?.port, 'http', 'probes untouched');
    assert.deepEqual((await server.core.listNamespacedSecret({ namespace: 'outside' })).items, []);

    // In the mesh, but the pod says no: the injector is called and admits it unchanged.
    const before = await bookbuyerSecrets();
    await server.core.createNamespacedPod({ namespace: 'bookbuyer', body: bookbuyerPod('bookbuyer', 'bookbuyer-disabled', { 'openservicemesh.io/sidecar-injection': 'disabled' }) });
    const disabled = await server.core.readNamespacedPod({ namespace: 'bookbuyer', name: 'bookbuyer-disabled' });
    assert.deepEqual(disabled.spec!.containers.map((c) => c.name), ['bookbuyer']);
    assert.equal(disabled.metadata!.labels!['osm-proxy-uuid'], undefined);
    assert.deepEqual(await bookbuyerSecrets(), before);
  });

  it("has the API server refuse a pod the injector refuses, with the injector's message naming the field", async () => {
    await webhookInEffect();
    const before = await bookbuyerSecrets();
    const podsBefore = (await server.core.listNamespacedPod({ namespace: 'bookbuyer' })).items.length;
    // Named, and by generateName (no name yet when the API server asks: the message names the prefix).
    for (const name of ['bookbuyer-bad', 'bookbuyer-5d8f9c-']) {
      const pod = bookbuyerPod('bookbuyer', name, { 'openservicemesh.io/outbound-port-exclusion-list': '22,http' });
      await assert.rejects(server.core.createNamespacedPod({ namespace: 'bookbuyer', body: pod }), (err: unknown) => {
        assert.equal(statusOf(err), 400);
        const message = messageOf(err);
        assert.match(message, /^admission webhook "osm-inject\.k8s\.io" denied the request: trellis injector: /);
        assert.ok(
          message.includes(`Pod bookbuyer/${name}: metadata.annotations["openservicemesh.io/outbound-port-exclusion-list"][1]: "http" is not a port`),
          message,
        );
        return true;
      });
    }
    assert.equal((await server.core.listNamespacedPod({ namespace: 'bookbuyer' })).items.length, podsBefore, 'not stored');
    assert.deepEqual(await bookbuyerSecrets(), before, 'no Secret for a refused pod');
  });

  it('refuses, with 403, what the RBAC does not grant the token', async () => {
    const core = asInjector.makeApiClient(k8s.CoreV1Api);
    const admission = asInjector.makeApiClient(k8s.AdmissionregistrationV1Api);
    const refused = async (what: string, request: () => Promise<unknown>) => {
      await assert.rejects(request(), (err: unknown) => statusOf(err) === 403, `${what}: 403`);
    };
    const mergePatch = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);
    await refused('list Secrets in osm-system', () => core.listNamespacedSecret({ namespace: 'osm-system' }));
    await refused('read a bootstrap Secret (create, patch, delete only)', async () => core.readNamespacedSecret({ namespace: 'bookbuyer', name: (await bookbuyerSecrets())[0] }));
    await refused('list Secrets of a namespace of the mesh', () => core.listNamespacedSecret({ namespace: 'bookbuyer' }));
    await refused('list Secrets cluster-wide', () => core.listSecretForAllNamespaces());
    await refused('delete the CA Secret', () => core.deleteNamespacedSecret({ namespace: 'osm-system', name: 'trellis-ca' }));
    await refused('read a Pod (list only, by label)', async () => core.readNamespacedPod({ namespace: 'bookbuyer', name: (await server.core.listNamespacedPod({ namespace: 'bookbuyer' })).items[0].metadata!.name! }));
    await refused('delete a Pod', async () => core.deleteNamespacedPod({ namespace: 'bookbuyer', name: (await server.core.listNamespacedPod({ namespace: 'bookbuyer' })).items[0].metadata!.name! }));
    await refused('list Namespaces', () => core.listNamespace());
    await refused('label a Namespace', () => core.patchNamespace({ name: 'outside', body: { metadata: { labels: { 'openservicemesh.io/monitored-by': 'osm' } } } }, mergePatch));
    await refused('read another MutatingWebhookConfiguration', () => admission.readMutatingWebhookConfiguration({ name: 'other' }));
    await refused('delete its MutatingWebhookConfiguration', () => admission.deleteMutatingWebhookConfiguration({ name: WEBHOOK_CONFIG }));
    await refused('list MutatingWebhookConfigurations', () => admission.listMutatingWebhookConfiguration());
    // What it is granted answers (the same client, so the 403s above are the RBAC's, not the token's).
    assert.equal((await core.readNamespacedSecret({ namespace: 'osm-system', name: 'trellis-ca' })).metadata?.name, 'trellis-ca');
    assert.equal((await core.readNamespace({ name: 'bookbuyer' })).metadata?.name, 'bookbuyer');
    assert.equal((await admission.readMutatingWebhookConfiguration({ name: WEBHOOK_CONFIG })).metadata?.name, WEBHOOK_CONFIG);
  });

  it('fails closed while the injector is down (failurePolicy Fail: no mesh pod without its sidecar), and a restart finds the caBundle in place', async () => {
    assert.equal(await stopInjector(), 0, 'SIGTERM: exit 0');
    const podsBefore = (await server.core.listNamespacedPod({ namespace: 'bookbuyer' })).items.length;
    await assert.rejects(server.core.createNamespacedPod({ namespace: 'bookbuyer', body: bookbuyerPod('bookbuyer', 'bookbuyer-5d8f9c-') }), (err: unknown) => {
      assert.match(messageOf(err), new RegExp(`failed calling webhook "osm-inject\\.k8s\\.io".*127\\.0\\.0\\.1:${port}`));
      return true;
    });
    assert.equal((await server.core.listNamespacedPod({ namespace: 'bookbuyer' })).items.length, podsBefore, 'not stored');
    // Outside the mesh the webhook is not called: pods are created meanwhile.
    await server.core.createNamespacedPod({ namespace: 'outside', body: bookbuyerPod('outside', 'bookbuyer-while-down') });

    assert.ok(await startInjector(injectorKubeconfig, port), `port ${port} free again`);
    // pino's line and the "listening" line are two writes to stdout: wait for the log line, then check it.
    const written = /"changed":(\d+),"msg":"CA bundle written into the MutatingWebhookConfiguration"/;
    await eventually(() => written.test(output), 'the injector logs the CA bundle written', 10_000);
    assert.match(output, /"changed":0,"msg":"CA bundle written into the MutatingWebhookConfiguration"/, 'the same CA: nothing to patch');
    const created = await server.core.createNamespacedPod({ namespace: 'bookbuyer', body: bookbuyerPod('bookbuyer', 'bookbuyer-5d8f9c-') });
    assert.ok(created.spec!.containers.some((c) => c.name === 'envoy'), 'injected again after the restart');
  });
});
