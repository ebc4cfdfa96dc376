/**
 * charts/trellis with a real helm (built by scripts/helm-install.sh into .cache/go-bin/):
 * `helm lint`, `helm template` with the default values and with others; every rendered object
 * validated by a real kube-apiserver (`kubectl apply --server-side --dry-run=server`: server-side
 * apply refuses a field the schema does not declare; the chart's CRDs applied first), and the rendered defaults the same
 * objects as deploy/ (names, RBAC rules, ports, args, probes: everything but the labels Helm adds).
 * Skipped outside CI when helm, kubectl or the real API server is missing (saying how to get
 * it); fails under CI=true.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { parseAllDocuments } from 'yaml';
import { findKubectl, Kubectl } from './helpers/kubectl.js';
import { findRealKubeApiServer, RealKubeApiServer } from './helpers/kube-real-apiserver.js';

const ROOT = path.resolve(import.meta.dirname, '..');
const CHART = path.join(ROOT, 'charts/trellis');
const DEPLOY = path.join(ROOT, 'deploy');
const HELM = path.join(ROOT, '.cache/go-bin/helm');
const run = promisify(execFile);

/** A Kubernetes object as rendered or as deploy/ holds it. */
interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  [field: string]: unknown;
}

/** Why helm cannot run here (outside CI), undefined when it can; under CI a missing helm throws. */
function helmSkip(): string | undefined {
  if (existsSync(HELM)) return undefined;
  const message = `helm not found at ${HELM}: run .ci/run, or bash scripts/helm-install.sh (GOBIN=$PWD/.cache/go-bin go install helm.sh/helm/v3/cmd/helm@v3.22.0; 3-5 min of two cores)`;
  if (process.env.CI) throw new Error(message);
  return message;
}

/** Runs helm with `args`; resolves with stdout, rejects with its output. */
async function helm(args: readonly string[]): Promise<string> {
  try {
    return (await run(HELM, [...args], { cwd: ROOT, maxBuffer: 16 * 1024 * 1024, env: { ...process.env, HELM_CACHE_HOME: path.join(os.tmpdir(), 'trellis-helm-cache'), HELM_CONFIG_HOME: path.join(os.tmpdir(), 'trellis-helm-config') } })).stdout;
  } catch (err) {
    const e = err as Error & { stdout?: string; stderr?: string };
    throw new Error(`helm ${args.join(' ')} failed: ${e.message}\n${e.stdout ?? ''}${e.stderr ?? ''}`);
  }
}

/** The objects of a multi-document YAML text (empty documents dropped). */
function objectsOf(text: string, where: string): KubeObject[] {
  return parseAllDocuments(text).flatMap((doc) => {
    assert.deepEqual(doc.errors, [], `${where}: YAML errors`);
    const object = doc.toJS() as KubeObject | null;
    return object ? [object] : [];
  });
}

/** `helm template trellis charts/trellis -n NAMESPACE --set …`, parsed. */
async function render(namespace: string, set: readonly string[] = [], extra: readonly string[] = []): Promise<{ text: string; objects: KubeObject[] }> {
  const text = await helm(['template', 'trellis', CHART, '--namespace', namespace, ...set.flatMap((s) => ['--set', s]), ...extra]);
  return { text, objects: objectsOf(text, 'helm template') };
}

/** Every object of the YAML files below `dir`, in file order. */
async function objectsBelow(dir: string): Promise<KubeObject[]> {
  const out: KubeObject[] = [];
  for (const entry of (await readdir(dir, { withFileTypes: true })).sort((a, b) => a.name.localeCompare(b.name))) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) out.push(...(await objectsBelow(full)));
    else if (/\.ya?ml$/.test(entry.name)) out.push(...objectsOf(await readFile(full, 'utf8'), full));
  }
  return out;
}

/** `Kind namespace/name` (or `Kind name`). */
function key(o: KubeObject): string {
  return `${o.kind} ${o.metadata.namespace ? `${o.metadata.namespace}/` : ''}${o.metadata.name}`;
}

/** The labels Helm's conventions add to every object, which deploy/ does not have. */
const HELM_LABELS = ['helm.sh/chart', 'app.kubernetes.io/managed-by'];

/** `object` without {@link HELM_LABELS}. */
function withoutHelmLabels(object: KubeObject): KubeObject {
  const labels = Object.fromEntries(Object.entries(object.metadata.labels ?? {}).filter(([k]) => !HELM_LABELS.includes(k)));
  return { ...object, metadata: { ...object.metadata, labels } };
}

/** The containers of a Deployment. */
function containers(o: KubeObject): Array<{ name: string; image: string; imagePullPolicy: string; args: string[]; resources: unknown; env: Array<{ name: string; value?: string }> }> {
  return (o.spec as { template: { spec: { containers: [] } } }).template.spec.containers;
}

const helmSkipReason = helmSkip();

/** `describe(name, body)`, or a suite of one skipped test saying why (a skipped suite's tests are not counted as skipped). */
function describeUnless(skip: string | undefined, name: string, body: () => void): void {
  if (skip) describe(name, () => it('needs helm, kubectl and a real kube-apiserver', { skip }, () => undefined));
  else describe(name, body);
}

describeUnless(helmSkipReason, 'charts/trellis', () => {
  it('passes helm lint --strict, with the default values and with others', async () => {
    await helm(['lint', '--strict', CHART]);
    await helm(['lint', '--strict', CHART, '--namespace', 'mesh-a', '--set', 'injector.enabled=false,controller.replicas=1,meshName=alpha,namespace.create=true']);
  });

  it('renders by default what deploy/ holds (with --namespace osm-system): the same objects, equal but for the labels Helm adds', async () => {
    const deploy = (await objectsBelow(DEPLOY)).filter((o) => o.kind !== 'CustomResourceDefinition');
    const deployNamespace = deploy.filter((o) => o.kind === 'Namespace');
    const { objects } = await render('osm-system');
    // The Namespace is optional and off by default (helm install --create-namespace makes it).
    assert.deepEqual(objects.map(key).sort(), deploy.filter((o) => o.kind !== 'Namespace').map(key).sort());
    const rendered = new Map(objects.map((o) => [key(o), o]));
    for (const expected of deploy.filter((o) => o.kind !== 'Namespace')) {
      const got = rendered.get(key(expected))!;
      for (const label of HELM_LABELS) assert.ok(got.metadata.labels?.[label], `${key(got)} carries ${label}`);
      assert.deepEqual(withoutHelmLabels(got), expected, `${key(expected)} as in deploy/`);
    }
    const withNamespace = await render('osm-system', ['namespace.create=true']);
    assert.deepEqual(withNamespace.objects.filter((o) => o.kind === 'Namespace').map(withoutHelmLabels), deployNamespace);
  });

  it('ships deploy/crds as its crds/ (helm installs them before the templates)', async () => {
    const crds = (await render('osm-system', [], ['--include-crds'])).objects.filter((o) => o.kind === 'CustomResourceDefinition');
    const deployCrds = await objectsBelow(path.join(DEPLOY, 'crds'));
    assert.equal(deployCrds.length, 9);
    assert.deepEqual(crds.map(key).sort(), deployCrds.map(key).sort());
    assert.deepEqual(crds.sort((a, b) => key(a).localeCompare(key(b))), deployCrds.sort((a, b) => key(a).localeCompare(key(b))));
  });

  it('takes the values: image, replicas, meshName, resources, the release namespace; injector.enabled=false leaves the injector out', async () => {
    const resources = { requests: { cpu: '200m', memory: '300Mi' }, limits: { cpu: '1500m', memory: '1Gi' } };
    const { objects } = await render('mesh-a', [
      'meshName=alpha', 'image.repository=registry.example/trellis', 'image.tag=1.2.3', 'image.pullPolicy=Always', 'controller.replicas=3',
      'controller.resources.requests.cpu=200m', 'controller.resources.requests.memory=300Mi', 'controller.resources.limits.cpu=1500m', 'controller.resources.limits.memory=1Gi',
      'injector.replicas=1', 'injector.resources.requests.cpu=200m', 'injector.resources.requests.memory=300Mi', 'injector.resources.limits.cpu=1500m', 'injector.resources.limits.memory=1Gi',
    ]);
    for (const o of objects) if (o.metadata.namespace !== undefined) assert.equal(o.metadata.namespace, 'mesh-a', key(o));
    const deployments = objects.filter((o) => o.kind === 'Deployment');
    assert.deepEqual(deployments.map(key).sort(), ['Deployment mesh-a/osm-controller', 'Deployment mesh-a/osm-injector']);
    for (const d of deployments) {
      for (const c of containers(d)) {
        assert.equal(c.image, 'registry.example/trellis:1.2.3');
        assert.equal(c.imagePullPolicy, 'Always');
        assert.ok(c.args.includes('--mesh-name=alpha'), c.args.join(' '));
        assert.deepEqual(c.resources, resources);
      }
    }
    const controller = deployments.find((d) => d.metadata.name === 'osm-controller')!;
    assert.equal((controller.spec as { replicas: number }).replicas, 3);
    const injector = deployments.find((d) => d.metadata.name === 'osm-injector')!;
    assert.equal((injector.spec as { replicas: number }).replicas, 1);
    assert.ok(containers(injector)[0].args.includes('--webhook-config-name=osm-webhook-alpha'));
    assert.ok(containers(injector)[0].args.includes('--trellis-image=registry.example/trellis:1.2.3'), 'the injected init and healthcheck containers use the same image');
    // One injector replica: no PodDisruptionBudget that would block every drain.
    assert.deepEqual(objects.filter((o) => o.kind === 'PodDisruptionBudget').map(key), ['PodDisruptionBudget mesh-a/osm-controller']);
    const webhook = objects.find((o) => o.kind === 'MutatingWebhookConfiguration')!;
    assert.equal(webhook.metadata.name, 'osm-webhook-alpha');
    const [hook] = webhook.webhooks as Array<{ clientConfig: { service: { namespace: string } }; namespaceSelector: { matchLabels: Record<string, string>; matchExpressions: Array<{ key: string; values?: string[] }> } }>;
    assert.equal(hook.clientConfig.service.namespace, 'mesh-a');
    assert.deepEqual(hook.namespaceSelector.matchLabels, { 'openservicemesh.io/monitored-by': 'alpha' });
    assert.deepEqual(hook.namespaceSelector.matchExpressions.find((e) => e.key === 'kubernetes.io/metadata.name')?.values, ['mesh-a']);
    const injectorRole = objects.find((o) => o.kind === 'ClusterRole' && o.metadata.name === 'osm-injector')!;
    assert.deepEqual((injectorRole.rules as Array<{ resourceNames?: string[] }>).flatMap((r) => r.resourceNames ?? []), ['osm-webhook-alpha']);

    const without = await render('mesh-a', ['injector.enabled=false']);
    assert.deepEqual(without.objects.filter((o) => /injector|webhook/.test(o.metadata.name)).map(key), []);
    assert.deepEqual(without.objects.map((o) => o.kind).sort(), ['ClusterRole', 'ClusterRoleBinding', 'Deployment', 'PodDisruptionBudget', 'Role', 'RoleBinding', 'Service', 'ServiceAccount']);
  });
});

const kubectlFound = helmSkipReason ? undefined : findKubectl();
const apiserverSkip = helmSkipReason ?? kubectlFound?.skip ?? findRealKubeApiServer().skip;

describeUnless(apiserverSkip, 'charts/trellis against a real kube-apiserver', () => {
  let server: RealKubeApiServer;
  let kubectl: Kubectl;
  let dir: string;

  before(async () => {
    server = await RealKubeApiServer.start({ name: 'helm', crds: false });
    dir = await mkdtemp(path.join(os.tmpdir(), 'trellis-helm-chart-'));
    kubectl = await Kubectl.for(server, kubectlFound!.path!, dir);
    // CRDs first, for real (as helm installs crds/ before the templates), then the namespaces
    // the dry runs put objects in (a dry-run Namespace does not exist for the objects in it).
    const crds = (await render('osm-system', [], ['--include-crds'])).objects.filter((o) => o.kind === 'CustomResourceDefinition');
    assert.equal(crds.length, 9);
    await kubectl.ok(['apply', '--server-side', '-f', '-'], crds.map((c) => JSON.stringify(c)).join('\n'));
    await kubectl.ok(['wait', '--for=condition=Established', '--timeout=60s', ...crds.map((c) => `crd/${c.metadata.name}`)]);
    await kubectl.ok(['create', 'namespace', 'osm-system']);
    await kubectl.ok(['create', 'namespace', 'mesh-a']);
  });

  after(async () => {
    await server?.shutdown();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** `kubectl apply --server-side --dry-run=server` of `text`; resolves with kubectl's result. */
  async function dryRun(name: string, text: string) {
    const file = path.join(dir, `${name}.yaml`);
    await writeFile(file, text);
    return kubectl.run(['apply', '--server-side', '--dry-run=server', '--field-manager=helm-chart-test', '-f', file]);
  }

  for (const [name, namespace, set] of [
    ['defaults', 'osm-system', []],
    ['namespace-created', 'osm-system', ['namespace.create=true']],
    ['other-values', 'mesh-a', ['meshName=alpha', 'image.repository=registry.example/trellis', 'image.tag=1.2.3', 'image.pullPolicy=Always', 'controller.replicas=1', 'injector.replicas=3', 'controller.resources.limits.memory=1Gi']],
    ['no-injector', 'mesh-a', ['injector.enabled=false']],
  ] as const) {
    it(`every object rendered with ${name === 'defaults' ? 'the default values' : `--set ${set.join(',')}`} is accepted by the API server (server-side apply, dry run)`, async () => {
      const { text, objects } = await render(namespace, set);
      const result = await dryRun(name, text);
      assert.equal(result.code, 0, `${result.stderr}\n${result.stdout}`);
      assert.equal(result.stderr.trim(), '', 'no warning (unknown or duplicate field)');
      // One line per object: `kind.group/name serverside-applied (server dry run)`.
      const applied = result.stdout.split('\n').filter((l) => l.includes('(server dry run)'));
      assert.equal(applied.length, objects.length, result.stdout);
    });
  }

  it('the dry run does refuse what the schemas refuse (an unknown field, a string for replicas): the check is real', async () => {
    const { objects } = await render('osm-system');
    const deployment = objects.find((o) => o.kind === 'Deployment')!;
    const unknown = { ...deployment, spec: { ...(deployment.spec as object), replicaCount: 2 } };
    const result = await dryRun('unknown-field', JSON.stringify(unknown));
    assert.notEqual(result.code, 0, result.stdout);
    assert.match(result.stderr, /replicaCount/);
    const wrongType = { ...deployment, spec: { ...(deployment.spec as object), replicas: 'two' } };
    const typed = await dryRun('wrong-type', JSON.stringify(wrongType));
    assert.notEqual(typed.code, 0, typed.stdout);
  });
});
