/**
 * OSM's own manifests (../shared/anchors/osm) through the whole pipeline: parse, store,
 * MeshSnapshot, generation for every identity, and the configuration validator. The sets
 * (test/helpers/anchor-sets.ts, which test/envoy-anchors.test.ts runs through real Envoys) carry
 * what they lack to form a mesh (monitored namespaces, Pods for their Deployments) and must give
 * no manifest errors and no validation violations, at every step.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { buildMeshSnapshot } from '../src/catalog/build-snapshot.js';
import { GenerationContext, proxyProfile } from '../src/envoy/context.js';
import { generateProxyResources } from '../src/envoy/generate.js';
import { formatViolation, validateProxyResources } from '../src/envoy/validate/index.js';
import { parseCommonName } from '../src/proxy/types.js';
import { parseManifests } from '../src/sources/manifests/index.js';
import { ObjectStore } from '../src/store/object-store.js';
import { ANCHORS_DIR, bookstoreSets, demoSets, exampleFiles, exampleSet, type ManifestSet } from './helpers/anchor-sets.js';

const CERTS = { certChainPem: 'CERT', privateKeyPem: 'KEY', caPem: 'ROOT' };

interface CheckResult {
  manifestErrors: string[];
  violations: string[];
  identities: number;
}

/** Loads every step of `set` (its objects, completion included) and checks every identity's configuration at each. */
function checkSet(set: ManifestSet): CheckResult {
  const result: CheckResult = { manifestErrors: [], violations: [], identities: 0 };
  for (const step of set.steps) {
    result.manifestErrors.push(...step.manifestErrors);
    const store = new ObjectStore();
    store.replaceAll('anchors', [...step.objects]);
    const { snapshot } = buildMeshSnapshot(store, { meshName: 'osm', generation: 1 });
    const context = new GenerationContext(snapshot);
    result.identities = step.identities.length;
    for (const identity of step.identities) {
      const [ns, sa] = identity.split('/') as [string, string];
      const proxy = parseCommonName(`6ba7b810-9dad-11d1-80b4-00c04fd430c8.sidecar.${sa}.${ns}.cluster.local`);
      for (const clientType of [undefined, 'grpc'] as const) {
        const resources = generateProxyResources(context, proxyProfile(clientType ? { ...proxy, clientType } : proxy), CERTS);
        for (const v of validateProxyResources(resources).violations) {
          result.violations.push(`${step.label}${identity}${clientType ? ' (proxyless)' : ''}: ${formatViolation(v)}`);
        }
      }
    }
  }
  return result;
}

describe('OSM anchor manifests through generation and validation', () => {
  const skip = !existsSync(ANCHORS_DIR) && `no ${ANCHORS_DIR}`;

  for (const set of bookstoreSets()) {
    it(set.label, { skip }, () => {
      const result = checkSet(set);
      assert.deepEqual(result.manifestErrors, []);
      assert.deepEqual(result.violations, []);
      assert.ok(result.identities >= 6, `identities: ${result.identities}`);
    });
  }

  for (const set of existsSync(ANCHORS_DIR) ? demoSets() : []) {
    it(set.label, () => {
      const result = checkSet(set);
      assert.deepEqual(result.manifestErrors, []);
      assert.deepEqual(result.violations, []);
      assert.ok(result.identities >= 1, `identities: ${result.identities}`);
    });
  }

  for (const file of exampleFiles()) {
    it(`example ${path.relative(ANCHORS_DIR, file)}`, { skip }, (t) => {
      const parsed = parseManifests(file, readFileSync(file, 'utf8'));
      if (parsed.objects.length === 0 && parsed.errors.length === 0) {
        t.skip(`no kind Trellis loads yet (${[...new Set(parsed.ignored.map((i) => i.kind))].join(', ')})`);
        return;
      }
      const result = checkSet(exampleSet(file));
      // The meshconfig sample is OSM's old v1alpha1 one: the v1.2 CRD schema requires
      // spec.certificate.certKeyBitSize, which it lacks, so rejecting it is correct.
      const expected = file.endsWith('samples/meshconfig/mesh-config.yaml') ? [/spec\.certificate\.certKeyBitSize: is required$/] : [];
      assert.equal(result.manifestErrors.length, expected.length, result.manifestErrors.join('\n'));
      result.manifestErrors.forEach((e, i) => assert.match(e, expected[i]!));
      assert.deepEqual(result.violations, []);
    });
  }
});
