/**
 * `trellis validate DIR` (src/cli/validate-command.ts), run as a real process on real files: a copy
 * of examples/bookstore with injected faults gives one line per finding in the controller's formats
 * and exit 1; the example and OSM's anchor sets validate clean; usage errors and an unreadable
 * directory exit 2.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { validateDirectory, type ValidationReport } from '../src/cli/validate-command.js';
import { ANCHORS_DIR, bookstoreSets, demoSets, type ManifestStep } from './helpers/anchor-sets.js';

const CLI = path.resolve(import.meta.dirname, 'helpers/cli-main.ts');
const EXAMPLE = path.resolve(import.meta.dirname, '../examples/bookstore');

/** Runs `trellis ARGS…` from the sources; resolves with its exit code and output. */
function trellis(args: readonly string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, ['--import', 'tsx', CLI, ...args], { encoding: 'utf8', timeout: 120_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : -1) : 0, stdout, stderr });
    });
  });
}

/** The faults injected into the copy of the example, by file. */
const FAULTS = {
  'broken.yaml': 'apiVersion: v1\nkind: Service\nmetadata: {name: x, namespace: bookstore\n',
  'faults.yaml': `apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata:
  name: ghost-routes
  namespace: bookstore
spec:
  destination: {kind: ServiceAccount, name: bookstore, namespace: bookstore}
  sources:
    - {kind: ServiceAccount, name: bookbuyer, namespace: bookbuyer}
  rules:
    - kind: HTTPRouteGroup
      name: no-such-routes
---
apiVersion: split.smi-spec.io/v1alpha2
kind: TrafficSplit
metadata:
  name: bad-split
  namespace: bookstore
spec:
  service: bookstore-v1
  backends:
    - service: no-such-backend
      weight: 100
---
# A header value with CR LF passes the CRD schema but breaks Envoy's HTTP_HEADER_VALUE rule.
apiVersion: policy.openservicemesh.io/v1alpha1
kind: UpstreamTrafficSetting
metadata: {name: limits, namespace: bookstore}
spec:
  host: bookstore-v1.bookstore.svc.cluster.local
  rateLimit: {local: {http: {requests: 10, unit: second, responseHeadersToAdd: [{name: x-limited, value: "yes\\r\\nInjected: 1"}]}}}
`,
};

describe('trellis validate', () => {
  const work = mkdtempSync(path.join(tmpdir(), 's9v-validate-'));
  const faulty = path.join(work, 'faulty');
  const warnOnly = path.join(work, 'warn-only');

  before(() => {
    cpSync(EXAMPLE, faulty, { recursive: true });
    for (const [file, text] of Object.entries(FAULTS)) writeFileSync(path.join(faulty, file), text);
    // An unknown field in a valid TrafficSplit (line 10 of split.yaml).
    const split = readFileSync(path.join(EXAMPLE, 'split.yaml'), 'utf8').replace('  service: bookstore.bookstore\n', '  service: bookstore.bookstore\n  colour: blue\n');
    writeFileSync(path.join(faulty, 'split.yaml'), split);
    cpSync(EXAMPLE, warnOnly, { recursive: true });
    writeFileSync(path.join(warnOnly, 'split.yaml'), split);
  });
  after(() => rmSync(work, { recursive: true, force: true }));

  it('prints every finding in the controller\'s formats, a summary, and exits 1', async () => {
    const { code, stdout, stderr } = await trellis(['validate', faulty]);
    assert.equal(code, 1, stderr);
    const lines = stdout.trimEnd().split('\n');
    const at = (file: string, line: number) => `${path.join(faulty, file)}:${line}: `;
    assert.deepEqual(lines.slice(0, -1), [
      `${at('broken.yaml', 4)}YAML syntax error: Flow map in block collection must be sufficiently indented and end with a }`,
      `warning: ${at('split.yaml', 10)}TrafficSplit bookstore/bookstore-split: spec.colour: unknown field for TrafficSplit split.smi-spec.io/v1alpha2: it is ignored (a typo?)`,
      `${at('faults.yaml', 1)}TrafficTarget bookstore/ghost-routes: spec.rules[0].name: HTTPRouteGroup bookstore/no-such-routes does not exist; it is not in force`,
      `${at('faults.yaml', 14)}TrafficSplit bookstore/bad-split: spec.backends[0].service: Service bookstore/no-such-backend does not exist; the TrafficSplit applies without this backend`,
      'bookstore/bookstore (sidecar): invalid configuration not sent: RouteConfiguration "rds-inbound.14001": virtual_hosts[0].typed_per_filter_config[envoy.filters.http.local_ratelimit]<LocalRateLimit>.response_headers_to_add[0].header.value: string.well_known_regex: must be a valid HTTP header value (no NUL, CR or LF), got "yes\\r\\nInjected: 1"',
    ]);
    assert.equal(lines.at(-1), `${faulty}: 4 errors, 1 warning (mesh osm; 6 identities: sidecar and proxyless configurations checked)`);
  });

  it('gives the same findings as JSON with --output json', async () => {
    const { code, stdout } = await trellis(['validate', faulty, '--output', 'json']);
    assert.equal(code, 1);
    const report = JSON.parse(stdout) as ValidationReport;
    assert.equal(report.errors, 4);
    assert.equal(report.warnings, 1);
    assert.deepEqual(report.findings.map((f) => `${f.severity} ${f.category} ${f.kind ?? ''}`), [
      'error manifest ',
      'warning manifest TrafficSplit',
      'error policy TrafficTarget',
      'error policy TrafficSplit',
      'error configuration ',
    ]);
    const violation = report.findings[4];
    assert.equal(violation.identity, 'bookstore/bookstore');
    assert.equal(violation.clientType, 'envoy');
    assert.equal(violation.violation?.name, 'rds-inbound.14001');
    const split = report.findings[3];
    assert.deepEqual([split.file, split.line, split.namespace, split.name, split.field], [path.join(faulty, 'faults.yaml'), 14, 'bookstore', 'bad-split', 'spec.backends[0].service']);
  });

  it('exits 0 on warnings alone, 1 with --strict', async () => {
    const plain = await trellis(['validate', warnOnly]);
    assert.equal(plain.code, 0, plain.stderr);
    assert.match(plain.stdout, /^warning: .*split\.yaml:10: .*spec\.colour: unknown field/);
    assert.match(plain.stdout, /: 0 errors, 1 warning /);
    assert.equal((await trellis(['validate', warnOnly, '--strict'])).code, 1);
  });

  it('counts what the README calls warnings as warnings: a ServiceAccount that exists nowhere, a --mesh-name no namespace has', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'trellis-validate-warnings-'));
    try {
      cpSync(EXAMPLE, dir, { recursive: true });
      rmSync(path.join(dir, 'bookbuyer.yaml'));
      const missing = await trellis(['validate', dir]);
      assert.equal(missing.code, 0, missing.stdout);
      assert.match(missing.stdout, /^warning: .*access\.yaml:\d+: TrafficTarget bookstore\/bookstore: .*ServiceAccount bookbuyer\/bookbuyer exists nowhere/m);
      assert.match(missing.stdout, /: 0 errors, 2 warnings /);
      assert.equal((await trellis(['validate', dir, '--strict'])).code, 1);
      const mesh = await trellis(['validate', EXAMPLE, '--mesh-name', 'nosuch']);
      assert.equal(mesh.code, 0, mesh.stdout);
      assert.match(mesh.stdout, /^warning: Mesh nosuch: --mesh-name: no namespace is labelled/m);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('exits 0 on examples/bookstore, with a summary line only', async () => {
    const { code, stdout, stderr } = await trellis(['validate', EXAMPLE]);
    assert.equal(code, 0, stderr);
    assert.equal(stdout, `${EXAMPLE}: no problems found (mesh osm; 6 identities: sidecar and proxyless configurations checked)\n`);
  });

  it('exits 2 on a directory that cannot be read and on usage errors', async () => {
    const missing = await trellis(['validate', path.join(work, 'absent')]);
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /^trellis validate: manifests directory .*absent: does not exist \(ENOENT\)\n$/);
    const file = await trellis(['validate', path.join(faulty, 'split.yaml')]);
    assert.equal(file.code, 2);
    assert.match(file.stderr, /not a directory/);
    assert.equal((await trellis(['validate'])).code, 2);
    assert.equal((await trellis(['validate', EXAMPLE, '--output', 'xml'])).code, 2);
    assert.equal((await trellis(['validate', EXAMPLE, '--no-such-flag'])).code, 2);
    assert.equal((await trellis(['validate', '--help'])).code, 0);
  });
});

describe('trellis validate on OSM\'s anchor manifests', { skip: !existsSync(ANCHORS_DIR) && `no ${ANCHORS_DIR}` }, () => {
  const work = mkdtempSync(path.join(tmpdir(), 's9v-validate-anchors-'));
  after(() => rmSync(work, { recursive: true, force: true }));
  let n = 0;
  /** The report of `step`'s directory written under `work`. */
  const validateStep = (step: ManifestStep): Promise<ValidationReport> => {
    const dir = path.join(work, String(n++));
    mkdirSync(dir);
    for (const [name, text] of step.files) writeFileSync(path.join(dir, name), text);
    return validateDirectory({ dir, meshName: 'osm', controllerNamespace: 'osm-system' });
  };

  for (const set of existsSync(ANCHORS_DIR) ? bookstoreSets() : []) {
    it(`${set.label}: clean`, async () => {
      for (const step of set.steps) {
        const report = await validateStep(step);
        assert.deepEqual(report.findings.map((f) => f.text), []);
        assert.ok(report.identities >= 6);
      }
    });
  }

  // The demo pages assume what a cluster has besides (an ingress controller's Service, the
  // Retry feature flag turned on): their policy problems are real; nothing else may be found.
  for (const set of existsSync(ANCHORS_DIR) ? demoSets() : []) {
    it(`${set.label}: no manifest error, no configuration violation`, async () => {
      const report = await validateStep(set.steps.at(-1)!);
      assert.deepEqual(report.findings.filter((f) => f.category !== 'policy').map((f) => f.text), []);
    });
  }
});
