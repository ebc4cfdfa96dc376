/**
 * A controller that starts while the MeshConfig on disk cannot be loaded (found by the lab's
 * controller-restart fault: the MeshConfig edited into an invalid version while the controller
 * ran, then the controller restarted): it has never seen the settings, and must not fall back to
 * OSM's permissive default, which would open the mesh the MeshConfig closes.
 */
import assert from 'node:assert/strict';
import { chmod, cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import pino from 'pino';
import { runController } from '../src/main.js';
import { eventually } from './helpers/wait.js';

interface Policies {
  settings: { permissiveTrafficPolicyMode: boolean; serviceCertValiditySeconds: number };
  meshConfig: { name: string; deleted: boolean; unreadable?: string } | null;
  problems: { text: string }[];
  manifestErrors: { text: string }[];
}

describe('a controller started while its MeshConfig cannot be loaded', () => {
  const cases: [string, (valid: string) => string, RegExp][] = [
    ['an invalid document (certificate without certKeyBitSize)', (valid) => `${valid.trimEnd()}\n  certificate:\n    serviceCertValidityDuration: 1m\n`, /meshconfig\.yaml:\d+: MeshConfig osm-system\/osm-mesh-config: spec\.certificate\.certKeyBitSize: is required/],
    ['a YAML syntax error', (valid) => `${valid.trimEnd()}\n  certificate: [serviceCertValidityDuration\n`, /meshconfig\.yaml:\d+: YAML syntax error/],
  ];
  let port = 19620;
  for (const [what, broken, reported] of cases) {
    it(`keeps permissive mode off with ${what}, and takes the MeshConfig once it is valid`, async () => {
      const dir = await mkdtemp(path.join(tmpdir(), 'tlf-meshconfig-'));
      await chmod(dir, 0o755);
      const manifests = path.join(dir, 'manifests');
      await cp('examples/bookstore', manifests, { recursive: true });
      const file = path.join(manifests, 'meshconfig.yaml');
      const valid = await readFile(file, 'utf8');
      assert.match(valid, /enablePermissiveTrafficPolicyMode: false/);
      await writeFile(file, broken(valid));
      const http = `127.0.0.1:${port++}`;
      const running = await runController({
        manifests,
        meshName: 'osm',
        stateDir: path.join(dir, 'state'),
        xdsAddress: `127.0.0.1:${port++}`,
        httpAddress: http,
        resyncIntervalMs: 0,
        warmUpConfigurationBytes: 0,
        logger: pino({ level: 'silent' }),
      });
      const policies = async () => (await (await fetch(`http://${http}/debug/policies`)).json()) as Policies;
      try {
        const p = await policies();
        assert.ok(p.manifestErrors.some((e) => reported.test(e.text)), JSON.stringify(p.manifestErrors));
        assert.equal(p.settings.permissiveTrafficPolicyMode, false, 'permissive mode stays off');
        assert.equal(p.meshConfig?.name, 'osm-system/osm-mesh-config');
        assert.match(p.meshConfig?.unreadable ?? '', reported);
        assert.ok(p.problems.some((x) => x.text.startsWith('MeshConfig osm-system/osm-mesh-config: metadata: could not be loaded (')), JSON.stringify(p.problems));
        // Fixed (permissive mode on, as it now says): its settings are in force.
        await writeFile(file, valid.replace('enablePermissiveTrafficPolicyMode: false', 'enablePermissiveTrafficPolicyMode: true'));
        await eventually(async () => (await policies()).settings.permissiveTrafficPolicyMode, 'the valid MeshConfig in force', 30_000, 50);
        assert.deepEqual((await policies()).meshConfig, { name: 'osm-system/osm-mesh-config', deleted: false });
      } finally {
        await running.stop();
        await rm(dir, { recursive: true, force: true });
      }
    });
  }
});
