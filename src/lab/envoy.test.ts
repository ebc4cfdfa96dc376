import assert from 'node:assert/strict';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { compareWithController, findEnvoy, type ConfigDump } from './envoy.js';

const T = 'type.googleapis.com/envoy.admin.v3.';

/** A dump in the shape both Envoy's admin `/config_dump?include_eds` and the controller's `/debug/config_dump` give. */
function dump(o: { cdsVersion?: string; ldsVersion?: string; clusters?: [string, string, string?][]; listeners?: [string, string][]; routes?: [string, string][]; secrets?: [string, string][]; endpoints?: string[]; warmingClusters?: string[]; warmingListeners?: string[] }): ConfigDump {
  return {
    configs: [
      {
        '@type': `${T}ClustersConfigDump`,
        version_info: o.cdsVersion,
        dynamic_active_clusters: (o.clusters ?? []).map(([name, version, type]) => ({ version_info: version, cluster: { name, type: type ?? 'EDS' } })),
        dynamic_warming_clusters: (o.warmingClusters ?? []).map((name) => ({ cluster: { name } })),
      },
      { '@type': `${T}EndpointsConfigDump`, dynamic_endpoint_configs: (o.endpoints ?? []).map((name) => ({ endpoint_config: { cluster_name: name } })) },
      {
        '@type': `${T}ListenersConfigDump`,
        version_info: o.ldsVersion,
        dynamic_listeners: [
          ...(o.listeners ?? []).map(([name, version]) => ({ name, active_state: { version_info: version, listener: { name } } })),
          ...(o.warmingListeners ?? []).map((name) => ({ name, warming_state: { version_info: 'w', listener: { name } } })),
        ],
      },
      { '@type': `${T}RoutesConfigDump`, dynamic_route_configs: (o.routes ?? []).map(([name, version]) => ({ version_info: version, route_config: { name } })) },
      { '@type': `${T}SecretsConfigDump`, dynamic_active_secrets: (o.secrets ?? []).map(([name, version]) => ({ name, version_info: version, secret: { name } })) },
    ],
  };
}

const controller = dump({
  cdsVersion: 'c1', ldsVersion: 'l1',
  clusters: [['a|80', 'ca'], ['b|80', 'cb']], listeners: [['outbound-listener', 'lo']], routes: [['rds-outbound.80', 'r1']],
  secrets: [['service-cert', 's1'], ['root-cert-for-mtls-inbound:ns/sa', 's2']], endpoints: ['a|80', 'b|80'],
});

describe('compareWithController', () => {
  it('is empty when Envoy holds what the controller sent (a static cluster\'s endpoints and unrequested secrets aside)', () => {
    const envoy = dump({
      cdsVersion: 'c1', ldsVersion: 'l1',
      clusters: [['a|80', 'ca'], ['b|80', 'cb']], listeners: [['outbound-listener', 'lo']], routes: [['rds-outbound.80', 'r1']],
      secrets: [['service-cert', 's1']], endpoints: ['a|80', 'b|80', 'envoy-metrics-cluster'],
    });
    assert.deepEqual(compareWithController(envoy, controller, { delta: true, stats: new Map([['listener_manager.lds.update_rejected', 0]]) }), []);
  });

  it('names missing and extra resources, versions, warming resources, rejected updates and fetch timeouts', () => {
    const envoy = dump({
      cdsVersion: 'c0', ldsVersion: 'l1',
      clusters: [['a|80', 'ca'], ['old|80', 'co']], listeners: [['outbound-listener', 'older']], routes: [['rds-outbound.80', 'r0']],
      secrets: [['service-cert', 's1']], endpoints: [], warmingClusters: ['b|80'], warmingListeners: ['inbound-listener'],
    });
    const stats = new Map([['cluster_manager.cds.update_rejected', 1], ['sds.x.init_fetch_timeout', 1]]);
    assert.deepEqual(compareWithController(envoy, controller, { delta: true, stats }), [
      'cluster b|80 is warming',
      'listener inbound-listener is warming',
      'CDS: Envoy has version c0, the controller sent c1',
      'CDS old|80: Envoy has it, the controller did not send it',
      'CDS b|80: the controller sent it, Envoy does not have it',
      "EDS a|80: Envoy's EDS cluster has no endpoints",
      "EDS old|80: Envoy's EDS cluster has no endpoints",
      'RDS rds-outbound.80: Envoy has version r0, the controller sent r1',
      'cluster_manager.cds.update_rejected is 1',
      'sds.x.init_fetch_timeout is 1: Envoy asked for a resource that never came',
    ]);
  });

  it('compares only the CDS and LDS versions in state of the world (Envoy records the response\'s version per resource)', () => {
    const sotw = (ldsVersion: string) => dump({
      cdsVersion: 'c1', ldsVersion,
      clusters: [['a|80', 'c1'], ['b|80', 'c1']], listeners: [['outbound-listener', 'l1']], routes: [['rds-outbound.80', 'x']],
      secrets: [['service-cert', 'y']], endpoints: ['a|80', 'b|80'],
    });
    assert.deepEqual(compareWithController(sotw('l1'), controller), []);
    assert.deepEqual(compareWithController(sotw('l0'), controller), ['LDS: Envoy has version l0, the controller sent l1']);
  });
});

describe('findEnvoy', () => {
  it('takes $TRELLIS_ENVOY, else the venv .ci/run makes under .cache/, else nothing', () => {
    const root = mkdtempSync(path.join(os.tmpdir(), 'trellis-find-envoy-'));
    try {
      assert.equal(findEnvoy({ TRELLIS_ENVOY: '/opt/envoy' }, root), '/opt/envoy');
      assert.equal(findEnvoy({}, root), undefined);
      const bin = path.join(root, '.cache/envoy-venv/lib/python3.11/site-packages/envoy/_bin');
      mkdirSync(bin, { recursive: true });
      writeFileSync(path.join(bin, 'envoy'), '');
      chmodSync(path.join(bin, 'envoy'), 0o755);
      assert.equal(findEnvoy({}, root), path.join(bin, 'envoy'));
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});
