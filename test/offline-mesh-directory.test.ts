/**
 * `loadMeshDirectory` (src/offline/mesh-directory.ts): a manifests directory loaded once, without a
 * controller, gives the MeshSnapshot, manifest errors and policy problems a controller started on the
 * same directory has.
 */
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import pino from 'pino';
import { formatProblem } from '../src/catalog/problems.js';
import { runController, type RunningController } from '../src/main.js';
import { loadMeshDirectory } from '../src/offline/mesh-directory.js';
import { formatManifestError } from '../src/sources/manifests/parse.js';
import { meshJson } from './helpers/snapshot-summary.js';

describe('loadMeshDirectory', () => {
  const work = mkdtempSync(path.join(tmpdir(), 's9v-mesh-directory-'));
  const dir = path.join(work, 'bookstore');
  let running: RunningController;
  const lines: string[] = [];

  before(async () => {
    cpSync('examples/bookstore', dir, { recursive: true });
    // A manifest error, an unknown field and a policy problem, as the controller sees them.
    writeFileSync(path.join(dir, 'broken.yaml'), 'kind: Service\napiVersion: v1\nmetadata: {name: x, namespace: bookstore\n');
    writeFileSync(path.join(dir, 'extra.yaml'), [
      'apiVersion: split.smi-spec.io/v1alpha2',
      'kind: TrafficSplit',
      'metadata: {name: ghost-split, namespace: bookstore}',
      'spec:',
      '  service: bookstore',
      '  colour: blue',
      '  backends:',
      '  - {service: no-such-service, weight: 10}',
      '',
    ].join('\n'));
    running = await runController({
      manifests: dir,
      meshName: 'osm',
      stateDir: path.join(work, 'state'),
      xdsAddress: '127.0.0.1:0',
      httpAddress: '127.0.0.1:0',
      resyncIntervalMs: 0,
      warmUpConfigurationBytes: 0,
      controllerNamespace: 'osm-system',
      logger: pino({ level: 'info' }, { write: (line: string) => lines.push(line) }),
    });
  });
  after(async () => {
    await running?.stop();
    rmSync(work, { recursive: true, force: true });
  });

  it('gives the snapshot, manifest errors, warnings and policy problems of a controller on the same directory', async () => {
    const offline = await loadMeshDirectory({ dir, meshName: 'osm', controllerNamespace: 'osm-system' });
    assert.equal(meshJson(offline.snapshot), meshJson(running.controller.snapshot));
    assert.deepEqual(offline.problems.map(formatProblem), running.controller.policyProblems().map(formatProblem));
    assert.ok(offline.problems.some((p) => p.kind === 'TrafficSplit' && p.name === 'ghost-split'), offline.problems.map(formatProblem).join('\n'));
    const errors = offline.manifestErrors.map(formatManifestError);
    assert.ok(errors.some((e) => e.startsWith(`${path.join(dir, 'broken.yaml')}:`)), errors.join('\n'));
    const warnings = offline.manifestWarnings.map(formatManifestError);
    assert.ok(warnings.some((w) => w.includes('spec.colour: unknown field')), warnings.join('\n'));
    // The controller logged the same lines.
    const logged = lines.join('');
    for (const e of errors) assert.ok(logged.includes(JSON.stringify(`invalid manifest: ${e}`).slice(1, -1)), e);
  });

  it('throws naming the directory when it cannot be read', async () => {
    await assert.rejects(loadMeshDirectory({ dir: path.join(work, 'absent') }), /manifests directory .*absent: does not exist \(ENOENT\)/);
  });
});
