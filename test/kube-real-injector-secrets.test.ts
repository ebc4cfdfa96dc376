/**
 * The sidecar injector's bootstrap Secrets and serving certificate against a real kube-apiserver
 * (test/helpers/kube-real-apiserver.ts): the injector runs in this process with a TokenRequest
 * token of `osm-system/osm-injector` and deploy/30-injector.yaml's RBAC only, on ports
 * 19620-19639; kube-apiserver calls it through deploy's MutatingWebhookConfiguration with
 * `clientConfig.url` on loopback. Real HTTPS clients post AdmissionReviews to it as any caller of
 * its port can (no API server behind them).
 *
 * - Secret creations are bounded (per window, at once) and idempotent per request uid; beyond
 *   the bound a pod is refused with 429 naming it.
 * - A bootstrap Secret gets its stored Pod as owner; one whose pod is never stored (a forged
 *   review, a pod a later admission refused) is deleted. No kube-controller-manager runs here
 *   (no garbage collector): what is checked is what the injector writes and deletes.
 * - The serving certificate is renewed before it expires, and the API server keeps calling it.
 */
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import https from 'node:https';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { TLSSocket } from 'node:tls';
import { after, before, it } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { parseAllDocuments } from 'yaml';
import { CertificateAuthority } from '../src/certificate/authority.js';
import { loadOrCreateCaSecret, secretApiFor } from '../src/certificate/secret-store.js';
import { runInjector, type InjectorOptions, type RunningInjector } from '../src/injector/run.js';
import { loadKubeConfig } from '../src/sources/kubernetes/kubernetes-source.js';
import { INJECTOR_SERVICE_NAME, podReview, postToWebhook } from './helpers/admission.js';
import { describeOn, RealKubeApiServer, statusOf } from './helpers/kube-real-apiserver.js';
import { eventually } from './helpers/wait.js';

const ROOT = path.resolve(import.meta.dirname, '..');
const WEBHOOK_CONFIG = 'osm-webhook-osm';
/** This file's ports (the inject area's range). */
const FIRST_PORT = 19620;
const LAST_PORT = 19639;
const BOOTSTRAP = 'app.kubernetes.io/component=sidecar-bootstrap';
/** The namespaces of the mesh, one per test (Secret counts do not mix). */
const MESH_NAMESPACES = ['bounds', 'dedupe', 'forged', 'owned', 'quota', 'renewed'];

type Manifest = { kind: string; metadata: { name: string }; webhooks?: { clientConfig: Record<string, unknown> }[] };

function pod(namespace: string, name: string): k8s.V1Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { ...(name.endsWith('-') ? { generateName: name } : { name }), namespace, labels: { app: 'bookbuyer' } },
    spec: { containers: [{ name: 'bookbuyer', image: 'openservicemesh/bookbuyer:latest-main' }] },
  };
}

/** The Status message of an API error. */
function messageOf(err: unknown): string {
  const body = (err as { body?: unknown }).body;
  const parsed = typeof body === 'string' ? (JSON.parse(body) as { message?: string }) : (body as { message?: string } | undefined);
  return parsed?.message ?? String(err);
}

/** GET /healthz over `agent` (verified against `ca`): the server certificate's fingerprint and the socket it came on. */
function healthz(port: number, ca: string, agent: https.Agent | false): Promise<{ fingerprint: string; validTo: number; cert: X509Certificate; socket: TLSSocket }> {
  return new Promise((resolve, reject) => {
    const req = https.get({ host: '127.0.0.1', port, path: '/healthz', servername: INJECTOR_SERVICE_NAME, ca, agent }, (res) => {
      const socket = res.socket as TLSSocket;
      const peer = socket.getPeerCertificate();
      if (!peer?.raw) return reject(new Error(`/healthz: no peer certificate (authorized ${socket.authorized}, session reused ${socket.isSessionReused()})`));
      const cert = new X509Certificate(peer.raw);
      res.resume();
      res.on('end', () => (res.statusCode === 200 ? resolve({ fingerprint: cert.fingerprint256, validTo: Date.parse(cert.validTo), cert, socket }) : reject(new Error(`/healthz: ${res.statusCode}`))));
    });
    req.on('error', reject);
  });
}

describeOn('real', 'trellis injector against a real kube-apiserver: bootstrap Secrets bounded and owned, the serving certificate renewed', () => {
  let server: RealKubeApiServer;
  let dir: string;
  let caPem: string;
  let asInjector: k8s.KubeConfig;
  /** The injector kube-apiserver calls (its serving certificate lives 6 s). */
  let called: RunningInjector;
  const others: RunningInjector[] = [];

  /** Starts an injector on a free port of this file's range. */
  async function start(options: Partial<InjectorOptions> = {}): Promise<RunningInjector> {
    for (let port = FIRST_PORT; port <= LAST_PORT; port++) {
      try {
        return await runInjector({
          kubeConfig: asInjector,
          namespace: 'osm-system',
          ca: { secretName: 'trellis-ca' },
          meshConfig: { namespace: 'osm-system', name: 'osm-mesh-config' },
          host: '127.0.0.1',
          port,
          ipAddresses: ['127.0.0.1'],
          settings: { meshName: 'osm', xdsAddress: 'osm-controller.osm-system.svc.cluster.local:15128', envoyImage: 'envoy:test', trellisImage: 'trellis:test', trellisCommand: ['trellis'] },
          adoptPollMs: 100,
          ...options,
        });
      } catch (err) {
        if (!/EADDRINUSE/.test(String(err))) throw err;
      }
    }
    throw new Error(`no free port in ${FIRST_PORT}-${LAST_PORT}`);
  }

  const secretsOf = async (namespace: string) => (await server.core.listNamespacedSecret({ namespace, labelSelector: BOOTSTRAP })).items;
  const readConfig = async () => (await server.objectsApi.read({ apiVersion: 'admissionregistration.k8s.io/v1', kind: 'MutatingWebhookConfiguration', metadata: { name: WEBHOOK_CONFIG } })) as unknown as Manifest;
  const caBundleOf = async () => Buffer.from(String((await readConfig()).webhooks![0].clientConfig.caBundle ?? ''), 'base64').toString('utf8');

  before(async () => {
    server = await RealKubeApiServer.start({ name: 'injector-secrets' });
    dir = await mkdtemp(path.join(os.tmpdir(), 's10i-injector-secrets-'));
    await server.applyFile(path.join(ROOT, 'deploy/00-namespace.yaml'));
    const manifests = parseAllDocuments(await readFile(path.join(ROOT, 'deploy/30-injector.yaml'), 'utf8')).map((d) => d.toJS() as Manifest);
    await server.applyAll(manifests.filter((m) => ['ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'Role', 'RoleBinding', 'ValidatingAdmissionPolicy', 'ValidatingAdmissionPolicyBinding'].includes(m.kind)));
    const admin = loadKubeConfig(await server.writeKubeconfig(path.join(dir, 'admin')));
    caPem = (await loadOrCreateCaSecret({ api: secretApiFor(admin), namespace: 'osm-system' })).ca.caPem;
    await server.applyAll([
      ...MESH_NAMESPACES.map((name) => ({
        apiVersion: 'v1',
        kind: 'Namespace',
        metadata: { name, labels: { 'openservicemesh.io/monitored-by': 'osm' }, annotations: { 'openservicemesh.io/sidecar-injection': 'enabled' } },
      })),
      ...MESH_NAMESPACES.map((namespace) => ({ apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'default', namespace } })),
      { apiVersion: 'v1', kind: 'ResourceQuota', metadata: { name: 'no-pods', namespace: 'quota' }, spec: { hard: { pods: '0' } } },
    ]);
    // No controller-manager computes its status: written by hand, so the quota admission (after the webhooks) refuses every pod.
    await server.core.replaceNamespacedResourceQuotaStatus({
      namespace: 'quota',
      name: 'no-pods',
      body: { ...(await server.core.readNamespacedResourceQuota({ namespace: 'quota', name: 'no-pods' })), status: { hard: { pods: '0' }, used: { pods: '0' } } },
    });
    asInjector = loadKubeConfig(await server.writeKubeconfig(path.join(dir, 'injector'), 'osm-system', await server.serviceAccountToken('osm-system', 'osm-injector')));

    // A free port first (without the configuration, which names it), then the injector on it.
    const probe = await start();
    await probe.stop();
    const shipped = structuredClone(manifests.find((m) => m.kind === 'MutatingWebhookConfiguration')!);
    for (const w of shipped.webhooks!) w.clientConfig = { url: `https://127.0.0.1:${probe.port}/mutate-pod-creation` };
    await server.apply(shipped as unknown as Record<string, unknown>);
    called = await start({ webhookConfigName: WEBHOOK_CONFIG, servingCertValiditySeconds: 6, adoptTimeoutMs: 3000, port: probe.port });
  });

  after(async () => {
    for (const injector of [called, ...others]) await injector?.stop();
    await server?.shutdown();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** Waits until kube-apiserver calls the injector with the caBundle (a dry run is injected). */
  async function webhookInEffect(namespace: string): Promise<void> {
    await eventually(
      async () => {
        try {
          const dry = await server.core.createNamespacedPod({ namespace, body: pod(namespace, 'dry-run'), dryRun: 'All' });
          return dry.spec!.containers.some((c) => c.name === 'envoy');
        } catch {
          return false;
        }
      },
      'kube-apiserver to call the injector',
      60_000,
      200,
    );
  }

  it('bounds the Secrets a caller of the port makes: beyond 5 per window it refuses the pod with 429 naming it, and creates none', async () => {
    const bounded = await start({ secretCreationBounds: { maxPerWindow: 5, windowMs: 3_600_000, maxConcurrent: 64 } });
    others.push(bounded);
    const target = { port: bounded.port, caBundle: caPem };
    const answers = await Promise.all(Array.from({ length: 12 }, (_, i) => postToWebhook(target, podReview(pod('bounds', `forged-${i}`)))));
    for (const a of answers) assert.equal(a.status, 200, a.body);
    const refused = answers.filter((a) => !a.json!.response.allowed);
    assert.equal(answers.length - refused.length, 5, 'as many admitted as the window allows');
    assert.equal(refused.length, 7);
    for (const a of refused) {
      const status = a.json!.response.status as { code?: number; reason?: string; message: string };
      assert.equal(status.code, 429);
      assert.equal(status.reason, 'TooManyRequests');
      assert.match(status.message, /^trellis injector: Pod bounds\/forged-\d+: bootstrap Secret envoy-bootstrap-config-[0-9a-f-]{36} not created: 5 bootstrap Secrets were created in the last 3600000 ms, the most per window; retry later$/);
    }
    assert.equal((await secretsOf('bounds')).length, 5, 'a Secret for each admitted pod only');
  });

  it('makes one Secret for an AdmissionReview delivered twice (the same request uid), and answers both with the same proxy UUID', async () => {
    const target = { port: called.port, caBundle: caPem };
    const review = podReview(pod('dedupe', 'retried'));
    const [first, second] = await Promise.all([postToWebhook(target, review), postToWebhook(target, review)]);
    const third = await postToWebhook(target, review);
    const volumes = [first, second, third].map((a) => {
      assert.equal(a.json?.response.allowed, true, a.body);
      const patch = JSON.parse(Buffer.from(a.json!.response.patch!, 'base64').toString('utf8')) as { path: string; value: unknown }[];
      return JSON.stringify(patch.find((op) => op.path.startsWith('/spec/volumes'))?.value);
    });
    assert.equal(new Set(volumes).size, 1, volumes.join('\n'));
    assert.equal((await secretsOf('dedupe')).length, 1);
  });

  it('refuses a review whose pod names another namespace than the request, and one of another resource', async () => {
    const target = { port: called.port, caBundle: caPem };
    const other = await postToWebhook(target, podReview(pod('outside-the-mesh', 'x'), { namespace: 'dedupe' }));
    assert.equal(other.json?.response.allowed, false);
    assert.match(other.json!.response.status!.message, /request\.object\.metadata\.namespace: "outside-the-mesh" is not the request's namespace "dedupe"/);
    const binding = await postToWebhook(target, podReview(pod('dedupe', 'y'), { resource: { group: '', version: 'v1', resource: 'pods' }, subResource: 'ephemeralcontainers' }));
    assert.equal(binding.json?.response.allowed, false);
    assert.equal((await secretsOf('dedupe')).length, 1, 'no Secret more');
  });

  it('deletes the Secret of a forged AdmissionReview: no pod of its proxy UUID is ever stored', async () => {
    const answer = await postToWebhook({ port: called.port, caBundle: caPem }, podReview(pod('forged', 'never-stored')));
    assert.equal(answer.json?.response.allowed, true);
    assert.equal((await secretsOf('forged')).length, 1, 'created at admission');
    await eventually(async () => (await secretsOf('forged')).length === 0, 'the Secret deleted after the adopt timeout (3 s)', 30_000, 100);
  });

  it('makes the stored Pod the owner of its bootstrap Secret (the AdmissionReview had neither its name nor its UID)', async () => {
    await webhookInEffect('owned');
    const created = await server.core.createNamespacedPod({ namespace: 'owned', body: pod('owned', 'bookbuyer-5d8f9c-') });
    const uuid = created.metadata!.labels!['osm-proxy-uuid'];
    const name = `envoy-bootstrap-config-${uuid}`;
    let owners: k8s.V1OwnerReference[] | undefined;
    await eventually(
      async () => (owners = (await server.core.readNamespacedSecret({ namespace: 'owned', name })).metadata?.ownerReferences) !== undefined,
      'the Secret owned',
      30_000,
      100,
    );
    assert.deepEqual(owners?.map((o) => ({ ...o })), [{ apiVersion: 'v1', kind: 'Pod', name: created.metadata!.name, uid: created.metadata!.uid }]);
    // Still there past the adopt timeout: an owned Secret is the garbage collector's to delete.
    await new Promise((r) => setTimeout(r, 3500));
    assert.deepEqual((await secretsOf('owned')).map((s) => s.metadata!.name), [name]);
  });

  it('deletes the Secret of a pod the API server refused after the webhook (a ResourceQuota)', async () => {
    await webhookInEffect('owned'); // not in quota: the quota refuses a dry run too
    await assert.rejects(server.core.createNamespacedPod({ namespace: 'quota', body: pod('quota', 'bookbuyer-5d8f9c-') }), (err: unknown) => {
      assert.equal(statusOf(err), 403, messageOf(err));
      assert.match(messageOf(err), /quota/);
      return true;
    });
    assert.equal((await secretsOf('quota')).length, 1, 'created at admission, before the quota refused the pod');
    await eventually(async () => (await secretsOf('quota')).length === 0, 'the Secret deleted after the adopt timeout (3 s)', 30_000, 100);
  });

  it("patches and deletes no Secret but a bootstrap Secret, nor a bootstrap Secret's data (ValidatingAdmissionPolicy osm-injector-bootstrap-secrets)", async () => {
    const core = asInjector.makeApiClient(k8s.CoreV1Api);
    const jsonPatch = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.JsonPatch);
    const decoy = { apiVersion: 'v1', kind: 'Secret', metadata: { name: 'app-credentials', namespace: 'owned' }, stringData: { password: 'hunter2' } };
    await server.apply(decoy);
    // The policy is in force once the API server's informer has it: until then a delete goes through (the decoy is written again).
    await eventually(
      async () => {
        try {
          await core.deleteNamespacedSecret({ namespace: 'owned', name: 'app-credentials' });
          await server.apply(decoy);
          return false;
        } catch (err) {
          assert.equal(statusOf(err), 403, messageOf(err));
          assert.match(messageOf(err), /the injector updates and deletes only the bootstrap Secrets it created/);
          return true;
        }
      },
      'the policy in force',
      30_000,
      200,
    );
    await assert.rejects(core.patchNamespacedSecret({ namespace: 'osm-system', name: 'trellis-ca', body: [{ op: 'add', path: '/metadata/annotations', value: {} }] }, jsonPatch), (err: unknown) => statusOf(err) === 403);
    await assert.rejects(core.deleteNamespacedSecret({ namespace: 'osm-system', name: 'trellis-ca' }), (err: unknown) => statusOf(err) === 403);
    const [bootstrap] = await secretsOf('owned');
    await assert.rejects(
      core.patchNamespacedSecret({ namespace: 'owned', name: bootstrap.metadata!.name!, body: [{ op: 'replace', path: '/data/key.pem', value: Buffer.from('x').toString('base64') }] }, jsonPatch),
      (err: unknown) => (assert.match(messageOf(err), /changes only the owners of a bootstrap Secret/), statusOf(err) === 403),
    );
    assert.equal((await server.core.readNamespacedSecret({ namespace: 'owned', name: 'app-credentials' })).metadata?.name, 'app-credentials');
  });

  it('renews its serving certificate before it expires: a new TLS client gets the new one, an open connection stays, kube-apiserver keeps calling it', async () => {
    const bundle = await caBundleOf();
    assert.equal(bundle, caPem, 'the caBundle is the mesh CA');
    const agent = new https.Agent({ keepAlive: true, maxSockets: 1 });
    const first = await healthz(called.port, bundle, agent);
    let latest = first;
    await eventually(async () => (latest = await healthz(called.port, bundle, false)).fingerprint !== first.fingerprint, 'a new serving certificate', 20_000, 200);
    assert.ok(latest.validTo > first.validTo, 'it expires later');
    const again = await healthz(called.port, bundle, agent);
    assert.equal(again.socket, first.socket, 'the connection opened before the renewal still serves');
    agent.destroy();
    assert.ok(latest.cert.checkIssued(new X509Certificate(caPem)), 'issued by the mesh CA');
    // Past the first certificate's notAfter, kube-apiserver still calls the webhook (a new connection verifies the new one).
    await eventually(() => Date.now() > first.validTo + 1000, 'the first certificate expired', 20_000, 100);
    await webhookInEffect('renewed');
    const created = await server.core.createNamespacedPod({ namespace: 'renewed', body: pod('renewed', 'after-renewal') });
    assert.ok(created.spec!.containers.some((c) => c.name === 'envoy'), 'injected after the renewal');
    assert.equal(await caBundleOf(), caPem, 'the caBundle stays right');
  });

  it('with --client-ca, refuses (403) an AdmissionReview of a client without a certificate of that CA, and answers one with', async () => {
    const clientCa = await CertificateAuthority.generate();
    const client = await clientCa.issue({ commonName: 'kube-apiserver-webhook-client', validitySeconds: 600, usage: 'client' });
    const strict = await start({ clientCaPem: clientCa.caPem });
    others.push(strict);
    const post = (auth?: { cert: string; key: string }) =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        const body = JSON.stringify(podReview(pod('dedupe', 'mtls')));
        const req = https.request(
          { host: '127.0.0.1', port: strict.port, method: 'POST', path: '/mutate-pod-creation', servername: INJECTOR_SERVICE_NAME, ca: caPem, ...auth, headers: { 'content-type': 'application/json' } },
          (res) => {
            let text = '';
            res.on('data', (c: Buffer) => (text += c.toString()));
            res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
          },
        );
        req.on('error', reject);
        req.end(body);
      });
    const anonymous = await post();
    assert.equal(anonymous.status, 403);
    assert.match(anonymous.body, /a client certificate of the API server is required/);
    const before = (await secretsOf('dedupe')).length;
    const other = await CertificateAuthority.generate();
    const stranger = await other.issue({ commonName: 'someone', validitySeconds: 600, usage: 'client' });
    assert.equal((await post({ cert: stranger.certPem, key: stranger.keyPem })).status, 403, 'a certificate of another CA');
    assert.equal((await secretsOf('dedupe')).length, before, 'no Secret for either');
    const authenticated = await post({ cert: client.certPem, key: client.keyPem });
    assert.equal(authenticated.status, 200, authenticated.body);
    assert.equal((JSON.parse(authenticated.body) as { response: { allowed: boolean } }).response.allowed, true);
    assert.equal((await healthz(strict.port, caPem, false)).fingerprint.length > 0, true, '/healthz needs no client certificate (kubelet probes)');
  });
});
