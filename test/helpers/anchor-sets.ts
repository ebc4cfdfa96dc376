/**
 * The manifest sets built from OSM's own manifests (`../shared/anchors/osm`, beside the
 * repository as CI lays it) and the repository's `examples/`: what `test/anchors.test.ts` runs
 * through generation and validation, and `test/envoy-anchors.test.ts` through real Envoys.
 *
 * Each set is completed with what it lacks to form a mesh (monitored namespaces, one Pod per
 * Deployment, a MeshConfig turning permissive mode off in SMI mode) and is given as steps: the
 * manifests directory after each `kubectl apply` of the page (a later version of an object
 * replaces the earlier one), so a page that edits one object several times is checked at every
 * edit.
 */
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { parseAllDocuments } from 'yaml';
import { ENVOY_CIPHER_SUITES, ENVOY_ECDH_CURVES } from '../../src/catalog/tls-names.js';
import { formatManifestError, parseManifests } from '../../src/sources/manifests/index.js';
import type { Deployment, KubeObject, Pod } from '../../src/store/objects.js';
import { k8s } from '../fixtures/mesh.js';

/** The repository's root directory. */
export const REPO_ROOT = path.resolve(import.meta.dirname, '../..');
/** OSM's manifests beside the repository (absent outside CI: tests skip). */
export const ANCHORS_DIR = path.resolve(REPO_ROOT, '../shared/anchors/osm');
/** Name of the file holding a step's mesh completion. */
export const MESH_COMPLETION_FILE = 'mesh-completion.json';

/** `*.yaml` / `*.yml` files of `dir`, sorted, as absolute paths (none when `dir` is absent). */
export function yamlFiles(dir: string): string[] {
  return existsSync(dir) ? readdirSync(dir).filter((f) => /\.ya?ml$/.test(f)).sort().map((f) => path.join(dir, f)) : [];
}

/** Namespaces (labelled for mesh `osm`) and Pods (one per Deployment, from its template) a set lacks. */
export function meshCompletion(objects: readonly KubeObject[]): KubeObject[] {
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

/** `text` with the doc pages' `$variables` replaced by the docs' values (unknown ones left as they are). */
export function substituteDocVariables(text: string): string {
  return text.replace(/\$([a-z_]+)/g, (whole, name: string) => DOC_VARIABLES[name] ?? whole);
}

/** Policy mode of a set: SMI (a MeshConfig with permissive mode off is added when the set has none) or permissive (OSM's default). */
export type SetMode = 'smi' | 'permissive';

/** One state of a set's manifests directory. */
export interface ManifestStep {
  /** `step N: ` for a set applied step by step, else empty (prefix of messages). */
  readonly label: string;
  /** The directory's files at this step, by file name: the documents in force and {@link MESH_COMPLETION_FILE}. */
  readonly files: ReadonlyMap<string, string>;
  /** The objects in force at this step, completion included, as parsed. */
  readonly objects: readonly KubeObject[];
  /** Manifest errors of this step's new documents and of its completion, formatted. */
  readonly manifestErrors: readonly string[];
  /** `<namespace>/<name>` of every ServiceAccount in force and every Pod's service account: the identities a proxy can have. */
  readonly identities: readonly string[];
}

/** A manifest set: its label, mode and steps (one step unless applied step by step). */
export interface ManifestSet {
  readonly label: string;
  readonly mode: SetMode;
  readonly steps: readonly ManifestStep[];
}

const objectKey = (o: KubeObject) => `${o.kind}/${o.metadata.namespace ?? ''}/${o.metadata.name}`;

/**
 * Builds the steps of a set from `files`. With `stepwise`, each file's documents are applied one
 * at a time (kubectl-apply style) and every application is a step; otherwise the files are
 * applied together, as one step.
 */
export function buildManifestSet(label: string, files: readonly string[], mode: SetMode, stepwise = false, base: readonly { name: string; text: string }[] = []): ManifestSet {
  const pieces: { name: string; text: string }[] = base.map((b, i) => ({ name: `${String(i).padStart(3, '0')}-${b.name}`, text: b.text }));
  for (const f of files) {
    const text = readFileSync(f, 'utf8');
    const docs = stepwise ? text.split(/^---\s*$/m).filter((d) => d.trim() !== '') : [text];
    for (const doc of docs) pieces.push({ name: `${String(pieces.length).padStart(3, '0')}-${path.basename(f)}`, text: substituteDocVariables(doc) });
  }
  const steps: ManifestStep[] = [];
  const current = new Map<string, { object: KubeObject; piece: string }>();
  const texts = new Map<string, string>();
  /** Pieces with at least one valid object (the others only carry errors). */
  const definesObjects = new Set<string>();
  let errors: string[] = [];
  pieces.forEach((piece, n) => {
    const parsed = parseManifests(piece.name, piece.text);
    errors.push(...parsed.errors.map(formatManifestError));
    texts.set(piece.name, piece.text);
    if (parsed.objects.length > 0) definesObjects.add(piece.name);
    for (const o of parsed.objects) current.set(objectKey(o), { object: o, piece: piece.name });
    if (n < base.length - 1 || (!stepwise && n !== pieces.length - 1)) return;
    const objects = [...current.values()].map((c) => c.object);
    const completion = [...meshCompletion(objects), ...(mode === 'smi' && !objects.some((o) => o.kind === 'MeshConfig') ? [k8s.meshConfig(false)] : [])];
    const completionText = completion.map((o) => JSON.stringify(o)).join('\n---\n');
    const completed = parseManifests(MESH_COMPLETION_FILE, completionText);
    errors.push(...completed.errors.map(formatManifestError));
    // A piece all of whose objects a later piece redefined is gone from the directory (its documents without a valid object stay, so the controller sees their errors too).
    const live = new Set([...current.values()].map((c) => c.piece));
    const files = new Map([...texts].filter(([name]) => live.has(name) || !definesObjects.has(name)));
    files.set(MESH_COMPLETION_FILE, completionText);
    const all = [...objects, ...completed.objects];
    steps.push({ label: stepwise ? `step ${n}: ` : '', files, objects: all, manifestErrors: errors, identities: serviceAccounts(all) });
    errors = [];
  });
  return { label, mode, steps };
}

/** The bookstore sets: OSM's apps with each access variant, without or with each split variant, in SMI and permissive mode. */
export function bookstoreSets(anchorsDir = ANCHORS_DIR): ManifestSet[] {
  const bookstore = path.join(anchorsDir, 'bookstore');
  const apps = yamlFiles(path.join(bookstore, 'apps'));
  const sets: ManifestSet[] = [];
  for (const access of yamlFiles(path.join(bookstore, 'access'))) {
    for (const split of [undefined, ...yamlFiles(path.join(bookstore, 'split'))]) {
      for (const mode of ['smi', 'permissive'] as const) {
        const label = `bookstore apps + ${path.basename(access)}${split ? ` + ${path.basename(split)}` : ''} (${mode})`;
        sets.push(buildManifestSet(label, [...apps, access, ...(split ? [split] : [])], mode));
      }
    }
  }
  return sets;
}

/** OSM's doc-page and sample manifests the anchor sets use, each applied on its own, step by step. */
export function exampleFiles(anchorsDir = ANCHORS_DIR): string[] {
  return [...yamlFiles(path.join(anchorsDir, 'examples')), ...['curl', 'fortio', 'httpbin', 'meshconfig'].flatMap((d) => yamlFiles(path.join(anchorsDir, 'examples/samples', d)))];
}

/** The set of one doc page or sample (SMI mode, step by step). */
export function exampleSet(file: string, anchorsDir = ANCHORS_DIR): ManifestSet {
  return buildManifestSet(`example ${path.relative(anchorsDir, file)}`, [file], 'smi', true);
}

/**
 * The sample apps (`examples/samples/<app>/<app>.yaml`, `fortio-client` beside `fortio`; they name no namespace: the pages apply
 * them with `kubectl apply -n`) each demo page deploys before its policies, in the namespaces
 * its policies name. Without them a page's set has no proxy whose configuration the policies shape.
 */
export const DEMO_APPS: Readonly<Record<string, readonly { readonly app: string; readonly namespace: string }[]>> = {
  'demos__egress_policy.yaml': [{ app: 'curl', namespace: 'curl' }],
  'demos__circuit_breaking_mesh_internal.yaml': [{ app: 'httpbin', namespace: 'httpbin' }, { app: 'fortio-client', namespace: 'client' }],
  'demos__circuit_breaking_mesh_external.yaml': [{ app: 'fortio-client', namespace: 'client' }],
  'demos__local_rate_limit_connections.yaml': [{ app: 'fortio', namespace: 'demo' }, { app: 'fortio-client', namespace: 'demo' }],
  'demos__local_rate_limit_http.yaml': [{ app: 'fortio', namespace: 'demo' }, { app: 'fortio-client', namespace: 'demo' }],
  'demos__retry_policy.yaml': [{ app: 'curl', namespace: 'curl' }, { app: 'httpbin', namespace: 'httpbin' }],
  'demos__ingress_k8s_nginx.yaml': [{ app: 'httpbin', namespace: 'httpbin' }],
  'demos__ingress_contour.yaml': [{ app: 'httpbin', namespace: 'httpbin' }],
};

/** `text` (YAML documents) with `metadata.namespace` set on every document, as `kubectl apply -n` does. */
function inNamespace(text: string, namespace: string): string {
  return parseAllDocuments(text).map((doc) => {
    doc.setIn(['metadata', 'namespace'], namespace);
    return doc.toString();
  }).join('---\n');
}

/** Each demo page of {@link DEMO_APPS} on top of the sample apps it deploys (applied first, as one step), then its documents step by step (SMI mode). */
export function demoSets(anchorsDir = ANCHORS_DIR): ManifestSet[] {
  return Object.entries(DEMO_APPS).map(([page, apps]) => {
    const file = path.join(anchorsDir, 'examples', page);
    const base = apps.map(({ app, namespace }) => ({ name: `${app}.${namespace}.yaml`, text: inNamespace(readFileSync(path.join(anchorsDir, 'examples/samples', app.replace(/-client$/, ''), `${app}.yaml`), 'utf8'), namespace) }));
    return buildManifestSet(`demo ${page} on ${apps.map((a) => `${a.app} (${a.namespace})`).join(', ')}`, [file], 'smi', true, base);
  });
}

/**
 * The repository's `examples/<name>` directory as it is committed (it has its own namespaces,
 * Pods and MeshConfig), as one step without completion; `edit` changes one file's text.
 */
export function repositoryExampleSet(name: string, edit?: { label: string; file: string; text: (text: string) => string }): ManifestSet {
  const dir = path.join(REPO_ROOT, 'examples', name);
  const files = new Map(readdirSync(dir).filter((f) => /\.(ya?ml|json)$/.test(f)).sort().map((f) => [f, readFileSync(path.join(dir, f), 'utf8')] as const));
  if (edit) files.set(edit.file, edit.text(files.get(edit.file) ?? ''));
  const parsed = [...files].map(([f, text]) => parseManifests(path.join(dir, f), text));
  const objects = parsed.flatMap((p) => p.objects);
  const manifestErrors = parsed.flatMap((p) => p.errors.map(formatManifestError));
  const permissive = objects.some((o) => o.kind === 'MeshConfig' && (o.spec as { traffic?: { enablePermissiveTrafficPolicyMode?: boolean } } | undefined)?.traffic?.enablePermissiveTrafficPolicyMode === true);
  return { label: `examples/${name}${edit ? ` ${edit.label}` : ''}`, mode: permissive ? 'permissive' : 'smi', steps: [{ label: '', files, objects, manifestErrors, identities: serviceAccounts(objects) }] };
}

/** `<ns>/<name>` of every ServiceAccount object and every Pod's `serviceAccountName` (a namespace's `default` one needs no object), sorted. */
function serviceAccounts(objects: readonly KubeObject[]): string[] {
  const names = new Set(objects.filter((o) => o.kind === 'ServiceAccount').map((o) => `${o.metadata.namespace ?? 'default'}/${o.metadata.name}`));
  for (const pod of objects.filter((o): o is Pod => o.kind === 'Pod')) names.add(`${pod.metadata.namespace ?? 'default'}/${pod.spec?.serviceAccountName || 'default'}`);
  return [...names].sort();
}

/**
 * examples/bookstore whose MeshConfig names every TLS cipher suite and ECDH curve Trellis passes
 * to Envoy, plus names Envoy refuses (an unknown suite, a TLS 1.3 suite, P-224, a curve named
 * twice): real Envoy NACKed those before Trellis left them out.
 */
export function tlsNamesSet(): ManifestSet {
  const cipherSuites = [...ENVOY_CIPHER_SUITES, '[ECDHE-ECDSA-AES128-GCM-SHA256|ECDHE-ECDSA-CHACHA20-POLY1305]', 'NOT-A-CIPHER', 'TLS_AES_128_GCM_SHA256'];
  const ecdhCurves = [...ENVOY_ECDH_CURVES.keys(), 'P-224', 'X25519Kyber768Draft00'];
  return repositoryExampleSet('bookstore', {
    label: 'with MeshConfig TLS names',
    file: 'meshconfig.yaml',
    text: (text) => `${text.trimEnd()}\n  sidecar:\n    cipherSuites: ${JSON.stringify(cipherSuites)}\n    ecdhCurves: ${JSON.stringify(ecdhCurves)}\n`,
  });
}
