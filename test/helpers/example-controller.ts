import { cp, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { runController, type ControllerOptions, type RunningController } from '../../src/main.js';
import type { DiscoveryResponse__Output } from '../../src/xds/server/discovery-types.js';
import type { AdsTestClient } from './ads-client.js';
import type { SimulatedSidecar } from './sidecar.js';
import { connectMeshSidecar, type MeshProxyStream } from './status-mesh.js';

/** examples/bookstore, as committed. */
export const EXAMPLE_DIR = path.resolve(import.meta.dirname, '../../examples/bookstore');

/** A controller of {@link startExampleController}: its files, ports, and the sidecars connected through it. */
export interface ExampleController {
  /** The temporary directory holding `manifests/`, `state/` and the sidecars' files; removed by `stop`. */
  readonly dir: string;
  /** The copy of examples/bookstore the controller reads (edit it to change the mesh). */
  readonly manifests: string;
  /** The controller's `--state-dir` (its CA). */
  readonly stateDir: string;
  readonly running: RunningController;
  /** `http://127.0.0.1:<port>`: its operations server. */
  readonly controllerUrl: string;
  /** `127.0.0.1:<port>`: its mTLS ADS listener. */
  readonly xdsAddress: string;
  /** The sidecars `connect` connected, in order. */
  readonly sidecars: readonly SimulatedSidecar[];
  /** The gRPC clients `stop` closes: `connect`'s, and any a test adds. */
  readonly clients: AdsTestClient[];
  /**
   * Connects a sidecar of `namespace/serviceAccount` with a certificate of the mesh CA (a real
   * mTLS gRPC client driven by a {@link SimulatedSidecar}: ACKs, or NACKs what `reject` names).
   */
  connect(namespace: string, serviceAccount: string, reject?: (response: DiscoveryResponse__Output) => string | undefined): Promise<MeshProxyStream & { sidecar: SimulatedSidecar }>;
  /** Stops the sidecars connected by `connect` and the controller, and removes {@link ExampleController.dir}. */
  stop(): Promise<void>;
}

/**
 * Runs a controller in this process (`runController`) on a copy of examples/bookstore in a new
 * temporary directory named after `prefix`: mesh `osm`, ADS and operations on loopback ports the
 * system picks, a silent log, a 20 ms debounce, no periodic resync; `options` overrides any of these.
 */
export async function startExampleController(prefix: string, options: Partial<ControllerOptions> = {}): Promise<ExampleController> {
  const dir = await mkdtemp(path.join(os.tmpdir(), prefix));
  const manifests = path.join(dir, 'manifests');
  const stateDir = path.join(dir, 'state');
  const clients: AdsTestClient[] = [];
  const sidecars: SimulatedSidecar[] = [];
  let running: RunningController;
  try {
    await cp(EXAMPLE_DIR, manifests, { recursive: true });
    running = await runController({
      manifests,
      meshName: 'osm',
      stateDir,
      xdsAddress: '127.0.0.1:0',
      httpAddress: '127.0.0.1:0',
      resyncIntervalMs: 0,
      debounceQuietMs: 20,
      logger: pino({ level: 'silent' }),
      ...options,
    });
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
  const xdsAddress = `127.0.0.1:${running.xdsPort}`;
  return {
    dir,
    manifests,
    stateDir,
    running,
    controllerUrl: `http://127.0.0.1:${running.httpPort}`,
    xdsAddress,
    sidecars,
    clients,
    async connect(namespace, serviceAccount, reject) {
      const out = path.join(dir, `${namespace}-${serviceAccount}-${sidecars.length}`);
      const connected = await connectMeshSidecar({ stateDir, xdsAddress, out, namespace, serviceAccount, reject });
      clients.push(connected.client);
      sidecars.push(connected.sidecar);
      return connected;
    },
    async stop() {
      for (const s of sidecars) s.stop();
      for (const c of clients) c.close();
      await running.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
