import assert from 'node:assert/strict';
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, it } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { WATCHED_RESOURCES } from '../src/sources/kubernetes/resources.js';
import { STATUS_SUBRESOURCE_KINDS } from '../src/status/kubernetes-status.js';
import { OBJECT_API_VERSIONS, OBJECT_KINDS } from '../src/store/objects.js';

const DEPLOY = path.resolve('deploy');

interface Doc {
  file: string;
  object: { apiVersion: string; kind: string; metadata: { name: string; namespace?: string }; [k: string]: unknown };
}

async function loadDeploy(): Promise<Doc[]> {
  const out: Doc[] = [];
  const walk = async (dir: string): Promise<void> => {
    for (const entry of (await readdir(dir, { withFileTypes: true })).sort((a, b) => a.name.localeCompare(b.name))) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) await walk(full);
      else if (/\.ya?ml$/.test(entry.name)) {
        for (const doc of parseAllDocuments(await readFile(full, 'utf8'))) {
          assert.deepEqual(doc.errors, [], `${full}: YAML errors`);
          const object = doc.toJS() as Doc['object'] | null;
          if (object) out.push({ file: path.relative(DEPLOY, full), object });
        }
      }
    }
  };
  await walk(DEPLOY);
  return out;
}

/** The kubernetes-models class validating `apiVersion`/`kind` (Kubernetes' OpenAPI schemas compiled with ajv). */
async function modelFor(apiVersion: string, kind: string): Promise<new (data: unknown) => { validate(): void }> {
  const [group, version] = apiVersion.includes('/') ? apiVersion.split('/') : ['', apiVersion];
  const module = (await import(group ? `kubernetes-models/${group}/${version}/${kind}` : `kubernetes-models/${version}/${kind}`)) as Record<string, unknown>;
  const model = module[kind];
  assert.equal(typeof model, 'function', `no Kubernetes schema for ${apiVersion} ${kind}`);
  return model as new (data: unknown) => { validate(): void };
}

/**
 * Kubernetes types `additionalProperties` as JSONSchemaPropsOrBool (a schema or a boolean, and the
 * API server accepts `true`, which OSM's MeshConfig CRD uses), but its OpenAPI document, hence
 * kubernetes-models, says "object". `true` and `{}` mean the same in JSON Schema: swap before validating.
 */
function orBoolAsSchema<T>(value: T): T {
  if (Array.isArray(value)) return value.map(orBoolAsSchema) as T;
  if (typeof value !== 'object' || value === null) return value;
  return Object.fromEntries(
    Object.entries(value).map(([k, v]) => [k, k === 'additionalProperties' && v === true ? {} : orBoolAsSchema(v)]),
  ) as T;
}

interface PolicyRule {
  apiGroups?: string[];
  resources?: string[];
  resourceNames?: string[];
  verbs: string[];
}

function allows(rules: readonly PolicyRule[], group: string, resource: string, verb: string, name?: string): boolean {
  return rules.some(
    (r) =>
      (r.apiGroups ?? []).includes(group) &&
      (r.resources ?? []).includes(resource) &&
      r.verbs.includes(verb) &&
      (r.resourceNames === undefined || (name !== undefined && r.resourceNames.includes(name))),
  );
}

describe('deploy/ manifests', () => {
  it('validate against the Kubernetes schemas', async () => {
    const docs = await loadDeploy();
    assert.ok(docs.length >= 15, `found ${docs.length} documents`);
    for (const { file, object } of docs) {
      const Model = await modelFor(object.apiVersion, object.kind);
      const checked = object.kind === 'CustomResourceDefinition' ? orBoolAsSchema(object) : object;
      assert.doesNotThrow(() => new Model(checked).validate(), `${file}: ${object.kind} ${object.metadata.name}`);
    }
  });

  it('catch an invalid document (the validator is not a no-op)', async () => {
    const Model = await modelFor('apps/v1', 'Deployment');
    assert.throws(() => new Model({ apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'x' }, spec: { replicas: 'two' } }).validate());
  });

  it('install a CRD for every custom kind the controller watches', async () => {
    const crds = (await loadDeploy()).filter((d) => d.object.kind === 'CustomResourceDefinition');
    for (const kind of OBJECT_KINDS) {
      const [apiVersion] = OBJECT_API_VERSIONS[kind];
      if (!apiVersion.includes('.')) continue; // core v1 and apps/v1: built in
      const [group, version] = apiVersion.split('/');
      if (['discovery.k8s.io', 'networking.k8s.io'].includes(group)) continue; // built in
      const crd = crds.find((c) => (c.object.spec as { group: string; names: { kind: string } }).group === group && (c.object.spec as { names: { kind: string } }).names.kind === kind);
      assert.ok(crd, `no CRD for ${group} ${kind}`);
      const versions = (crd.object.spec as { versions: { name: string; served: boolean }[] }).versions;
      assert.ok(versions.some((v) => v.name === version && v.served), `${kind}: version ${version} not served`);
    }
  });

  it('grant get/list/watch on exactly the kinds watched, and the own Secret and Lease only', async () => {
    const docs = await loadDeploy();
    const clusterRole = docs.find((d) => d.object.kind === 'ClusterRole')!.object as unknown as { rules: PolicyRule[] };
    const role = docs.find((d) => d.object.kind === 'Role')!.object as unknown as { metadata: { namespace: string }; rules: PolicyRule[] };
    // What the Kubernetes source lists and watches, from its own table; it covers every store kind.
    assert.deepEqual(WATCHED_RESOURCES.map((r) => r.kind).sort(), [...OBJECT_KINDS].sort());
    for (const r of WATCHED_RESOURCES) {
      for (const verb of ['get', 'list', 'watch']) assert.ok(allows(clusterRole.rules, r.group, r.plural, verb), `${verb} ${r.group}/${r.plural}`);
    }
    const granted = clusterRole.rules.flatMap((r) => (r.apiGroups ?? []).flatMap((g) => (r.resources ?? []).map((res) => `${g}/${res}`)));
    const watched = WATCHED_RESOURCES.map((r) => `${r.group}/${r.plural}`);
    // The policy status: the status subresource of the kinds whose CRD has one, written (patched) by the leader.
    const statuses = [...STATUS_SUBRESOURCE_KINDS.values()].map((r) => `${r.group}/${r.plural}/status`);
    assert.deepEqual([...new Set(granted)].sort(), [...new Set([...watched, ...statuses])].sort(), 'nothing beyond what is watched, and the policy status');
    for (const r of clusterRole.rules) {
      const status = (r.resources ?? []).every((res) => res.endsWith('/status'));
      assert.deepEqual([...r.verbs].sort(), status ? ['get', 'patch', 'update'] : ['get', 'list', 'watch'], status ? 'the policy status' : 'read-only cluster-wide');
    }

    assert.equal(role.metadata.namespace, 'osm-system');
    assert.ok(allows(role.rules, '', 'secrets', 'create'));
    assert.ok(allows(role.rules, '', 'secrets', 'get', 'trellis-ca'));
    assert.ok(allows(role.rules, '', 'secrets', 'update', 'trellis-ca'));
    assert.ok(!allows(role.rules, '', 'secrets', 'get', 'someone-elses-secret'), 'no other Secret');
    assert.ok(!allows(role.rules, '', 'secrets', 'list'), 'no listing Secrets');
    assert.ok(allows(role.rules, 'coordination.k8s.io', 'leases', 'create'));
    assert.ok(allows(role.rules, 'coordination.k8s.io', 'leases', 'update', 'trellis-controller-leader'));
    assert.ok(!allows(role.rules, 'coordination.k8s.io', 'leases', 'update', 'another-lease'));
  });

  it('run 2 replicas with probes, resources, the downward API and a Service for 15128 and 9091', async () => {
    const docs = await loadDeploy();
    const deployment = docs.find((d) => d.object.kind === 'Deployment')!.object as unknown as {
      spec: { replicas: number; template: { spec: { serviceAccountName: string; containers: Record<string, unknown>[] } } };
    };
    assert.equal(deployment.spec.replicas, 2);
    assert.equal(deployment.spec.template.spec.serviceAccountName, 'osm-controller');
    const [c] = deployment.spec.template.spec.containers as {
      command: string[];
      args: string[];
      env: { name: string; valueFrom?: { fieldRef?: { fieldPath: string } } }[];
      livenessProbe: { httpGet: { path: string } };
      readinessProbe: { httpGet: { path: string } };
      resources: { requests: Record<string, string>; limits: Record<string, string> };
    }[];
    assert.deepEqual([...c.command, ...c.args].slice(0, 4), ['node', 'bin/trellis.js', 'controller', '--kubernetes']);
    assert.ok(c.args.includes('--http-address=0.0.0.0:9091'), 'the ops server listens on the pod IP');
    assert.equal(c.livenessProbe.httpGet.path, '/healthz');
    assert.equal(c.readinessProbe.httpGet.path, '/readyz');
    for (const r of ['cpu', 'memory']) assert.ok(c.resources.requests[r] && c.resources.limits[r], r);
    assert.equal(c.env.find((e) => e.name === 'POD_NAME')?.valueFrom?.fieldRef?.fieldPath, 'metadata.name');
    assert.equal(c.env.find((e) => e.name === 'POD_NAMESPACE')?.valueFrom?.fieldRef?.fieldPath, 'metadata.namespace');
    const service = docs.find((d) => d.object.kind === 'Service')!.object as unknown as { spec: { ports: { port: number }[] } };
    assert.deepEqual(service.spec.ports.map((p) => p.port).sort(), [15128, 9091].sort());
  });
});
