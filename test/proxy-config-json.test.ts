/**
 * `trellis proxy config UUID` prints the config dump as Envoy's admin `/config_dump` does (proto3
 * JSON mapping): a `google.protobuf.*Value` wrapper field as its plain value (`"weight": 50`,
 * not `{"value": 50}`), a duration as a string (`"1s"`), on examples/bookstore with a real mTLS gRPC sidecar.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { TypeUrl } from '../src/api/type-urls.js';
import { startExampleController, type ExampleController } from './helpers/example-controller.js';
import { eventually } from './helpers/wait.js';

type Decoded = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const CLI = path.resolve(import.meta.dirname, 'helpers/cli-main.ts');

function trellis(args: readonly string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, ['--import', 'tsx', CLI, ...args], { encoding: 'utf8', timeout: 60_000, maxBuffer: 64 * 1024 * 1024 }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : -1) : 0, stdout, stderr });
    });
  });
}

/** The config of `type` in a config dump. */
function section(dump: Decoded, type: string): Decoded {
  return dump.configs.find((c: Decoded) => c['@type'] === `type.googleapis.com/envoy.admin.v3.${type}`);
}

describe('trellis proxy config prints wrapper types as plain values and durations as strings', () => {
  let controller: ExampleController;
  let uuid: string;

  before(async () => {
    controller = await startExampleController('s10h-proxy-config-');
    const buyer = await controller.connect('bookbuyer', 'bookbuyer');
    uuid = buyer.uuid;
    await eventually(() => buyer.sidecar.get(TypeUrl.RouteConfiguration, 'rds-outbound.14001') !== undefined, 'bookbuyer\'s outbound routes', 30_000);
  });
  after(async () => {
    await controller?.stop();
  });

  it('the split\'s weights, the listener\'s and cluster\'s wrapper fields, as Envoy prints them', async () => {
    const r = await trellis(['proxy', 'config', uuid, '--controller', controller.controllerUrl]);
    assert.equal(r.code, 0, r.stderr);
    const dump = JSON.parse(r.stdout) as Decoded;
    assert.equal(dump.proxy, uuid);

    const routes = section(dump, 'RoutesConfigDump').dynamic_route_configs.map((d: Decoded) => d.route_config);
    const outbound = routes.find((rc: Decoded) => rc.name === 'rds-outbound.14001');
    const vh = outbound.virtual_hosts.find((v: Decoded) => v.name === 'outbound_virtual-host|bookstore.bookstore.svc.cluster.local');
    const clusters = vh.routes[0].route.weighted_clusters.clusters;
    assert.deepEqual(clusters.map((c: Decoded) => [c.name, c.weight]), [['bookstore/bookstore-v1|14001', 50], ['bookstore/bookstore-v2|14001', 50]]);

    // No wrapper is left as {"value": …} anywhere in the dump: every object with a lone `value`
    // key is a message of another type (Percent, …), never one of these fields.
    const wrappersLeft: string[] = [];
    const walk = (v: unknown, at: string): void => {
      if (Array.isArray(v)) v.forEach((item, i) => walk(item, `${at}[${i}]`));
      else if (v !== null && typeof v === 'object') {
        const keys = Object.keys(v);
        if (keys.length === 1 && keys[0] === 'value' && ['weight', 'per_connection_buffer_limit_bytes', 'max_requests', 'max_connections', 'max_pending_requests', 'max_retries', 'destination_port', 'use_remote_address', 'total_weight', 'num_retries'].some((f) => at.endsWith(`.${f}`))) wrappersLeft.push(at);
        for (const [k, item] of Object.entries(v)) walk(item, `${at}.${k}`);
      }
    };
    walk(dump, '');
    assert.deepEqual(wrappersLeft, []);

    // The listener's filter chain match on a port (UInt32Value), where there is one.
    const listeners = section(dump, 'ListenersConfigDump').dynamic_listeners.map((d: Decoded) => d.active_state.listener);
    const ports = listeners.flatMap((l: Decoded) => (l.filter_chains ?? []).map((fc: Decoded) => fc.filter_chain_match?.destination_port)).filter((p: unknown) => p !== undefined);
    assert.ok(ports.length > 0, 'a filter chain matches a destination port');
    for (const p of ports) assert.equal(typeof p, 'number', `destination_port ${JSON.stringify(p)}`);

    // Durations as strings of seconds, as Envoy prints them.
    const cds = section(dump, 'ClustersConfigDump').dynamic_active_clusters.map((d: Decoded) => d.cluster);
    assert.ok(cds.length > 0);
    for (const c of cds) assert.equal(c.connect_timeout, '1s', `${c.name}: connect_timeout ${JSON.stringify(c.connect_timeout)}`);
  });
});
