/**
 * OSM's own manifests (../shared/anchors/osm) through the whole pipeline: parse, store,
 * MeshSnapshot, generation for every identity, and the configuration validator. Each set is
 * copied to a temporary directory with what it lacks to form a mesh (monitored namespaces,
 * Pods for its Deployments) and must give no manifest errors and no validation violations.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { buildMeshSnapshot } from '../src/catalog/build-snapshot.js';
import { generateProxyResources } from '../src/envoy/generate.js';
import { formatViolation, validateProxyResources } from '../src/envoy/validate/index.js';
import { parseCommonName } from '../src/proxy/types.js';
import { formatManifestError, parseManifests } from '../src/sources/manifests/index.js';
import { ObjectStore } from '../src/store/object-store.js';
import type { Deployment, KubeObject } from '../src/store/objects.js';
import { k8s } from './fixtures/mesh.js';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const anchorsDir = path.resolve(repoRoot, '../shared/anchors/osm');
const CERTS = { certChainPem: 'CERT', privateKeyPem: 'KEY', caPem: 'ROOT' };

function yamlFiles(dir: string): string[] {
  return existsSync(dir) ? readdirSync(dir).filter((f) => /\.ya?ml$/.test(f)).sort().map((f) => path.join(dir, f)) : [];
}

/** Namespaces (labelled for mesh `osm`) and Pods (one per Deployment, from its template) a set lacks. */
function meshCompletion(objects: readonly KubeObject[]): KubeObject[] {
  const extra: KubeObject[] = [];
  const declared = new Set(objects.filter((o) => o.kind === 'Namespace').map((o) => o.metadata.name));
  const used = new Set(objects.map((o) => o.metadata.namespace).filter((n): n is string => n !== undefined));
  for (const ns of [...used].sort()) if (!declared.has(ns)) extra.push(k8s.namespace(ns));
  let n = 10;
  for (const d of objects.filter((o): o is Deployment => o.kind === 'Deployment')) {
    const ns = d.metadata.namespace ?? 'default';
    const template = d.spec.template;
    const ports = (template.spec?.containers ?? []).flatMap((c) => (c.ports ?? []).map((p) => p.containerPort));
    extra.push(k8s.pod(ns, `${d.metadata.name}-0`, template.spec?.serviceAccountName || 'default', template.metadata?.labels ?? {}, `10.244.0.${n++}`, ports));
  }
  return extra;
}

/** The shell variables OSM's doc pages have the reader set before `kubectl apply` (envsubst-style), with the docs' values: a literal `$osm_namespace` is not a Kubernetes name. */
const DOC_VARIABLES: Readonly<Record<string, string>> = { osm_namespace: 'osm-system', nginx_ingress_namespace: 'ingress-nginx', nginx_ingress_service: 'ingress-nginx-controller' };

function substituteDocVariables(text: string): string {
  return text.replace(/\$([a-z_]+)/g, (whole, name: string) => DOC_VARIABLES[name] ?? whole);
}

interface CheckResult {
  manifestErrors: string[];
  violations: string[];
  identities: number;
}

/**
 * Copies `files` into a temporary directory with the mesh completion, loads and checks it.
 * With `steps`, each file's documents are applied one at a time (kubectl-apply style: a later
 * version of an object replaces the earlier one), and every step is checked: some OSM doc
 * pages edit one object several times.
 */
function checkSet(files: readonly string[], mode: 'smi' | 'permissive', steps = false): CheckResult {
  const dir = mkdtempSync(path.join(tmpdir(), 'trellis-anchors-'));
  try {
    let i = 0;
    for (const f of files) {
      const docs = steps ? readFileSync(f, 'utf8').split(/^---\s*$/m).filter((d) => d.trim() !== '') : [readFileSync(f, 'utf8')];
      for (const doc of docs) writeFileSync(path.join(dir, `${String(i++).padStart(3, '0')}-${path.basename(f)}`), substituteDocVariables(doc));
    }
    const result: CheckResult = { manifestErrors: [], violations: [], identities: 0 };
    const current = new Map<string, KubeObject>();
    const fileNames = readdirSync(dir).sort();
    fileNames.forEach((f, n) => {
      const file = path.join(dir, f);
      const parsed = parseManifests(file, readFileSync(file, 'utf8'));
      result.manifestErrors.push(...parsed.errors.map(formatManifestError));
      for (const o of parsed.objects) current.set(`${o.kind}/${o.metadata.namespace ?? ''}/${o.metadata.name}`, o);
      if (steps || n === fileNames.length - 1) checkObjects([...current.values()], mode, result, steps ? `step ${n}: ` : '');
    });
    return result;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function checkObjects(objects: KubeObject[], mode: 'smi' | 'permissive', result: CheckResult, prefix: string): void {
  const completion = [...meshCompletion(objects), ...(mode === 'smi' && !objects.some((o) => o.kind === 'MeshConfig') ? [k8s.meshConfig(false)] : [])];
  const text = completion.map((o) => JSON.stringify(o)).join('\n---\n');
  const parsed = parseManifests('mesh-completion.json', text);
  result.manifestErrors.push(...parsed.errors.map(formatManifestError));
  const store = new ObjectStore();
  store.replaceAll('anchors', [...objects, ...parsed.objects]);
  const { snapshot } = buildMeshSnapshot(store, { meshName: 'osm', generation: 1 });
  result.identities = 0;
  for (const sa of store.list('ServiceAccount')) {
    const ns = sa.metadata.namespace ?? 'default';
    result.identities++;
    const proxy = parseCommonName(`6ba7b810-9dad-11d1-80b4-00c04fd430c8.sidecar.${sa.metadata.name}.${ns}.cluster.local`);
    for (const clientType of [undefined, 'grpc'] as const) {
      const resources = generateProxyResources(snapshot, clientType ? { ...proxy, clientType } : proxy, CERTS);
      for (const v of validateProxyResources(resources).violations) {
        result.violations.push(`${prefix}${ns}/${sa.metadata.name}${clientType ? ' (proxyless)' : ''}: ${formatViolation(v)}`);
      }
    }
  }
}

describe('OSM anchor manifests through generation and validation', () => {
  const skip = !existsSync(anchorsDir) && `no ${anchorsDir}`;
  const bookstore = path.join(anchorsDir, 'bookstore');
  const apps = yamlFiles(path.join(bookstore, 'apps'));

  for (const access of yamlFiles(path.join(bookstore, 'access'))) {
    for (const split of [undefined, ...yamlFiles(path.join(bookstore, 'split'))]) {
      for (const mode of ['smi', 'permissive'] as const) {
        const label = `bookstore apps + ${path.basename(access)}${split ? ` + ${path.basename(split)}` : ''} (${mode})`;
        it(label, { skip }, () => {
          const result = checkSet([...apps, access, ...(split ? [split] : [])], mode);
          assert.deepEqual(result.manifestErrors, []);
          assert.deepEqual(result.violations, []);
          assert.ok(result.identities >= 6, `identities: ${result.identities}`);
        });
      }
    }
  }

  const examples = [...yamlFiles(path.join(anchorsDir, 'examples')), ...['curl', 'fortio', 'httpbin', 'meshconfig'].flatMap((d) => yamlFiles(path.join(anchorsDir, 'examples/samples', d)))];
  for (const file of examples) {
    it(`example ${path.relative(anchorsDir, file)}`, { skip }, (t) => {
      const parsed = parseManifests(file, readFileSync(file, 'utf8'));
      if (parsed.objects.length === 0 && parsed.errors.length === 0) {
        t.skip(`no kind Trellis loads yet (${[...new Set(parsed.ignored.map((i) => i.kind))].join(', ')})`);
        return;
      }
      const result = checkSet([file], 'smi', true);
      // The meshconfig sample is OSM's old v1alpha1 one: the v1.2 CRD schema requires
      // spec.certificate.certKeyBitSize, which it lacks, so rejecting it is correct.
      const expected = file.endsWith('samples/meshconfig/mesh-config.yaml') ? [/spec\.certificate\.certKeyBitSize: is required$/] : [];
      assert.equal(result.manifestErrors.length, expected.length, result.manifestErrors.join('\n'));
      result.manifestErrors.forEach((e, i) => assert.match(e, expected[i]!));
      assert.deepEqual(result.violations, []);
    });
  }
});
