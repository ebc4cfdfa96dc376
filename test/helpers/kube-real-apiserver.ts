/**
 * A real kube-apiserver and etcd (built by `scripts/kube/install.sh`, started by
 * `scripts/kube/start.sh`, stopped by PID by `scripts/kube/stop.sh`) on loopback ports of
 * 19500-19599, one per test file, in its own temporary directory: test files that use it need
 * no lock. No controller-manager, scheduler or kubelet run (scripts/kube/README.md says what a
 * test must do instead: pods stay Pending unless their status is written, namespaces need their
 * service accounts, Endpoints are written by hand).
 *
 * Clients (the code under test) reach the server through a "front door": a TCP forwarder on
 * loopback that the test can close ({@link RealKubeApiServer.stop}) and re-open
 * ({@link RealKubeApiServer.start}) on the same port, so that "the API server is unreachable"
 * means the same as for {@link FakeKubeApiServer}. The test's own writes ({@link
 * RealKubeApiServer.apply} and friends) go to the API server directly, as the admin (group
 * `system:masters`), so they work while the front door is closed.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import * as k8s from '@kubernetes/client-node';
import { describe, it } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { DEFAULT_RESOURCE_TYPES, type FakeObject } from './fake-kube-apiserver.js';
import { eventually } from './wait.js';

const ROOT = path.resolve(import.meta.dirname, '../..');
const SCRIPTS = path.join(ROOT, 'scripts/kube');

/** Where `scripts/kube/install.sh` puts kube-apiserver and etcd (`$TRELLIS_KUBE_DIR/bin` when set). */
export const KUBE_BIN = path.join(process.env.TRELLIS_KUBE_DIR ?? path.join(ROOT, '.cache/kube'), 'bin');

/** The first port of the range the real servers use; each server takes a slot of {@link SLOT_PORTS}. */
const FIRST_PORT = 19500;
/** Ports per server: kube-apiserver, etcd client, etcd peer, the front door. */
const SLOT_PORTS = 4;
const SLOTS = 25;

/**
 * Whether the real API server can run: `{}` when its binaries are installed, else a reason to
 * skip. Under `CI` a missing binary throws instead (tests must not silently skip there).
 */
export function findRealKubeApiServer(): { skip?: string } {
  const missing = ['kube-apiserver', 'etcd'].filter((b) => !existsSync(path.join(KUBE_BIN, b)));
  if (missing.length === 0) return {};
  const message = `real kube-apiserver tests need ${missing.join(' and ')} in ${KUBE_BIN}: run .ci/run, or bash scripts/kube/install.sh (a cold build takes 4-10 min)`;
  if (process.env.CI) throw new Error(message);
  return { skip: message };
}

/**
 * `describe(name, body)`, or, when `target` is `'real'` and the real server cannot run
 * ({@link findRealKubeApiServer}), a suite of one skipped test that says why (a skipped suite's
 * tests are not counted as skipped in the summary).
 */
export function describeOn(target: 'fake' | 'real', name: string, body: () => void): void {
  const skip = target === 'real' ? findRealKubeApiServer().skip : undefined;
  if (skip) describe(name, () => it('needs a real kube-apiserver', { skip }, () => undefined));
  else describe(name, body);
}

/** Options of {@link RealKubeApiServer.start}. */
export interface RealKubeApiServerOptions {
  /** Names the temporary directory (`trellis-kube-real-<name>-…`) and the logs. */
  name: string;
  /** More kube-apiserver flags (start.sh `--apiserver-arg`). */
  apiserverArgs?: readonly string[];
  /** Install deploy/crds (SMI and OSM) and wait until each is served (default true). */
  crds?: boolean;
}

/** Runs a script of scripts/kube; rejects with its output when it exits non-zero. */
function script(name: string, args: readonly string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile('bash', [path.join(SCRIPTS, name), ...args], { timeout: 180_000, maxBuffer: 1 << 20 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`scripts/kube/${name} ${args.join(' ')} failed (${error.code ?? error.signal}):\n${stdout}${stderr}`));
      else resolve(stdout + stderr);
    });
  });
}

/** Whether something accepts connections on 127.0.0.1:`port`. */
function inUse(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port });
    socket.once('connect', () => (socket.destroy(), resolve(true)));
    socket.once('error', () => resolve(false));
  });
}

/** A loopback TCP forwarder to `target` that can be closed (cutting every connection) and re-opened on its port. */
class FrontDoor {
  #server: net.Server | undefined;
  /** Each client connection, with its connection to the API server. */
  readonly #pairs = new Map<net.Socket, net.Socket>();
  constructor(
    readonly port: number,
    private readonly target: number,
  ) {}

  /** Whether it listens. */
  get open(): boolean {
    return this.#server !== undefined;
  }

  /** Listens on {@link port} (again); a no-op while open. */
  async listen(): Promise<void> {
    if (this.#server) return;
    const server = net.createServer((client) => {
      const upstream = net.connect({ host: '127.0.0.1', port: this.target });
      this.#pairs.set(client, upstream);
      for (const s of [client, upstream]) s.on('error', () => undefined);
      client.pipe(upstream).pipe(client);
      client.on('close', () => (this.#pairs.delete(client), upstream.destroy()));
      upstream.on('close', () => client.destroy());
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', () => resolve());
    });
    this.#server = server;
  }

  /** Cuts every connection through the door; it stays open. @returns how many client connections were cut. */
  cut(): number {
    const n = this.#pairs.size;
    for (const [client, upstream] of this.#pairs) {
      client.destroy();
      upstream.destroy();
    }
    this.#pairs.clear();
    return n;
  }

  /** Stops listening and cuts every connection. */
  async close(): Promise<void> {
    const server = this.#server;
    if (!server) return;
    this.#server = undefined;
    this.cut();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

/** The apiVersion of a kind the tests write (from the fake's table, which follows the real API). */
function apiVersionOf(kind: string): string {
  const type = DEFAULT_RESOURCE_TYPES.find((r) => r.kind === kind || r.plural === kind);
  if (!type) throw new Error(`unknown kind ${kind}`);
  return type.group ? `${type.group}/${type.version}` : type.version;
}

/** The objects of every document of a YAML file, or of each `.yaml` file of a directory (by name). */
async function readManifests(file: string): Promise<Record<string, unknown>[]> {
  const files =
    (await readdir(file, { withFileTypes: true }).catch(() => undefined))
      ?.filter((e) => e.isFile() && e.name.endsWith('.yaml'))
      .map((e) => path.join(file, e.name))
      .sort() ?? [file];
  const objects: Record<string, unknown>[] = [];
  for (const f of files) {
    for (const doc of parseAllDocuments(await readFile(f, 'utf8'))) {
      const o = doc.toJS() as Record<string, unknown> | null;
      if (o) objects.push(o);
    }
  }
  return objects;
}

/** The HTTP status of a client-node error, or undefined. */
export function statusOf(err: unknown): number | undefined {
  const code = (err as { code?: unknown }).code;
  return typeof code === 'number' ? code : undefined;
}

/** One real kube-apiserver with its etcd; see the module comment. */
export class RealKubeApiServer {
  /** Admin client straight to the API server (not through the front door). */
  readonly objectsApi: k8s.KubernetesObjectApi;
  readonly core: k8s.CoreV1Api;

  private constructor(
    /** The state directory (certificates, logs, pid files, etcd data). */
    readonly dir: string,
    /** kube-apiserver's own port. */
    readonly apiserverPort: number,
    /** etcd's client port (its HTTP/JSON gateway serves compaction). */
    readonly etcdPort: number,
    private readonly door: FrontDoor,
    /** The admin kubeconfig start.sh wrote (YAML), pointing at {@link apiserverPort}. */
    private readonly adminYaml: string,
    /** How long start.sh took to get /readyz, in ms (a figure for the report). */
    readonly startMs: number,
  ) {
    const kc = new k8s.KubeConfig();
    kc.loadFromString(adminYaml);
    this.objectsApi = k8s.KubernetesObjectApi.makeApiClient(kc);
    this.core = kc.makeApiClient(k8s.CoreV1Api);
  }

  /**
   * Starts etcd and kube-apiserver in a new temporary directory, on the first free slot of
   * 19500-19599, and opens the front door.
   * @throws Error with start.sh's output when no slot could start.
   */
  static async start(options: RealKubeApiServerOptions): Promise<RealKubeApiServer> {
    const dir = await mkdtemp(path.join(os.tmpdir(), `trellis-kube-real-${options.name}-`));
    const first = Math.floor(Math.random() * SLOTS); // other test files start at the same time: spread them
    let lastError: unknown;
    for (let i = 0; i < SLOTS; i++) {
      const base = FIRST_PORT + ((first + i) % SLOTS) * SLOT_PORTS;
      const ports = [base, base + 1, base + 2, base + 3];
      if ((await Promise.all(ports.map(inUse))).some(Boolean)) continue;
      const t0 = Date.now();
      try {
        const args = ['--dir', dir, '--port', String(base), '--etcd-port', String(base + 1)];
        for (const a of options.apiserverArgs ?? []) args.push(`--apiserver-arg=${a}`);
        await script('start.sh', args);
      } catch (err) {
        lastError = err;
        if (/already in use|address already in use|bind/.test(String(err))) continue; // lost a race for the slot
        await rm(dir, { recursive: true, force: true });
        throw err;
      }
      const startMs = Date.now() - t0;
      const door = new FrontDoor(base + 3, base);
      const server = new RealKubeApiServer(dir, base, base + 1, door, await readFile(path.join(dir, 'kubeconfig'), 'utf8'), startMs);
      try {
        await door.listen();
        if (options.crds ?? true) await server.installCrds();
      } catch (err) {
        await server.shutdown();
        throw err;
      }
      return server;
    }
    await rm(dir, { recursive: true, force: true });
    throw new Error(`no free slot of ${SLOT_PORTS} ports in ${FIRST_PORT}-${FIRST_PORT + SLOTS * SLOT_PORTS - 1}: ${String(lastError ?? 'all in use')}`);
  }

  /** Stops kube-apiserver and etcd by PID (scripts/kube/stop.sh) and removes the directory. */
  async shutdown(): Promise<void> {
    await this.door.close();
    await script('stop.sh', ['--dir', this.dir]);
    await rm(this.dir, { recursive: true, force: true });
  }

  /** Closes the front door: clients get connection refused, open connections are cut. */
  async stop(): Promise<void> {
    await this.door.close();
  }

  /** Re-opens the front door on its port. */
  async start(): Promise<this> {
    await this.door.listen();
    return this;
  }

  /** Whether the front door is open. */
  get running(): boolean {
    return this.door.open;
  }

  /** Cuts every connection through the front door (watches end abruptly; clients reconnect). @returns how many. */
  dropConnections(): number {
    return this.door.cut();
  }

  /** `https://127.0.0.1:<front door>`. */
  get url(): string {
    return `https://127.0.0.1:${this.door.port}`;
  }

  /**
   * A kubeconfig (YAML) through the front door: the admin's client certificate, or `token` (a
   * bearer token, e.g. a ServiceAccount's from {@link serviceAccountToken}) instead.
   */
  kubeconfigYaml(namespace = 'default', token?: string): string {
    const kc = new k8s.KubeConfig();
    kc.loadFromString(this.adminYaml);
    const cluster = kc.getCurrentCluster()!;
    const user = kc.getCurrentUser()!;
    const config = {
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'trellis-test', cluster: { server: this.url, 'certificate-authority-data': cluster.caData } }],
      users: [{ name: 'user', user: token ? { token } : { 'client-certificate-data': user.certData, 'client-key-data': user.keyData } }],
      contexts: [{ name: 'trellis-test', context: { cluster: 'trellis-test', user: 'user', namespace } }],
      'current-context': 'trellis-test',
    };
    return JSON.stringify(config, null, 2);
  }

  /** Writes {@link kubeconfigYaml} to `<dir>/kubeconfig` (mode 600) and returns its path. */
  async writeKubeconfig(dir: string, namespace?: string, token?: string): Promise<string> {
    await mkdir(dir, { recursive: true });
    const file = path.join(dir, 'kubeconfig');
    await writeFile(file, this.kubeconfigYaml(namespace, token), { mode: 0o600 });
    return file;
  }

  /**
   * A token for ServiceAccount `namespace/name` (TokenRequest, the API's default audience).
   * @param expirationSeconds its lifetime (the API's minimum is 600).
   */
  async serviceAccountToken(namespace: string, name: string, expirationSeconds = 3600): Promise<string> {
    const response = await this.core.createNamespacedServiceAccountToken({
      namespace,
      name,
      body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: { audiences: [], expirationSeconds } },
    });
    const token = response.status?.token;
    if (!token) throw new Error(`TokenRequest for ${namespace}/${name} returned no token`);
    return token;
  }

  /**
   * Creates or replaces an object as the admin (as if some other client wrote it), as
   * {@link FakeKubeApiServer.apply} does. What the real server requires and the fake does not
   * check is filled in: a container without an image gets `registry.invalid/placeholder`; a Pod's
   * `status` (dropped on create) is written through its `status` subresource afterwards.
   * @returns the stored object.
   */
  async apply(object: Record<string, unknown>): Promise<FakeObject> {
    const obj = structuredClone(object) as FakeObject;
    obj.apiVersion ??= apiVersionOf(obj.kind);
    if (obj.kind === 'Pod') {
      for (const c of ((obj.spec as { containers?: { image?: string }[] } | undefined)?.containers ?? [])) c.image ??= 'registry.invalid/placeholder';
    }
    let stored: FakeObject;
    for (let attempt = 0; ; attempt++) {
      try {
        stored = (await this.objectsApi.create(obj as k8s.KubernetesObject)) as FakeObject;
        break;
      } catch (err) {
        if (statusOf(err) !== 409) throw new Error(`creating ${obj.kind} ${obj.metadata.namespace ?? ''}/${obj.metadata.name}: ${String(err)}`);
      }
      const existing = await this.objectsApi.read({ apiVersion: obj.apiVersion, kind: obj.kind, metadata: { name: obj.metadata.name, namespace: obj.metadata.namespace } });
      try {
        stored = (await this.objectsApi.replace({ ...obj, metadata: { ...obj.metadata, resourceVersion: existing.metadata?.resourceVersion } } as k8s.KubernetesObject)) as FakeObject;
        break;
      } catch (err) {
        if (statusOf(err) !== 409 || attempt > 5) throw new Error(`replacing ${obj.kind} ${obj.metadata.namespace ?? ''}/${obj.metadata.name}: ${String(err)}`);
      }
    }
    if (obj.kind === 'Pod' && obj.status) {
      stored = (await this.core.patchNamespacedPodStatus(
        { namespace: obj.metadata.namespace ?? 'default', name: obj.metadata.name, body: { status: obj.status } },
        k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
      )) as unknown as FakeObject;
    }
    return stored;
  }

  /** {@link apply} of each object in order, Namespaces (and ServiceAccounts) first. */
  async applyAll(objects: readonly Record<string, unknown>[]): Promise<void> {
    const rank = (o: Record<string, unknown>) => (o.kind === 'Namespace' ? 0 : o.kind === 'ServiceAccount' ? 1 : 2);
    for (const o of [...objects].sort((a, b) => rank(a) - rank(b))) await this.apply(o);
  }

  /** Applies every document of a YAML file, or of each `.yaml` file of a directory (sorted). */
  async applyFile(file: string): Promise<Record<string, unknown>[]> {
    const objects = await readManifests(file);
    await this.applyAll(objects);
    return objects;
  }

  /**
   * Writes the `status` of each Pod of a YAML file or directory (e.g. Running, its IP) through
   * the status subresource, as a kubelet would: `kubectl apply` drops a Pod's status.
   */
  async writePodStatuses(file: string): Promise<void> {
    for (const pod of (await readManifests(file)) as FakeObject[]) {
      if (pod.kind !== 'Pod' || !pod.status) continue;
      await this.core.patchNamespacedPodStatus(
        { namespace: pod.metadata.namespace ?? 'default', name: pod.metadata.name, body: { status: pod.status } },
        k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
      );
    }
  }

  /** Deletes an object as the admin. @returns whether it existed. */
  async remove(kind: string, namespace: string | undefined, name: string): Promise<boolean> {
    try {
      await this.objectsApi.delete({ apiVersion: apiVersionOf(kind), kind, metadata: { name, namespace } });
      return true;
    } catch (err) {
      if (statusOf(err) === 404) return false;
      throw err;
    }
  }

  /** One object, or undefined. */
  async get(kind: string, namespace: string | undefined, name: string): Promise<FakeObject | undefined> {
    try {
      return (await this.objectsApi.read({ apiVersion: apiVersionOf(kind), kind, metadata: { name, namespace } })) as FakeObject;
    } catch (err) {
      if (statusOf(err) === 404) return undefined;
      throw err;
    }
  }

  /** The objects of a kind, in `namespace` or all, sorted by namespace and name. */
  async objects(kind: string, namespace?: string): Promise<FakeObject[]> {
    const list = await this.objectsApi.list(apiVersionOf(kind), kind, namespace);
    const key = (o: k8s.KubernetesObject) => `${o.metadata?.namespace ?? ''}/${o.metadata?.name ?? ''}`;
    return (list.items as k8s.KubernetesObject[]).sort((a, b) => key(a).localeCompare(key(b))).map((o) => ({ ...o, apiVersion: apiVersionOf(kind), kind }) as FakeObject);
  }

  /**
   * Compacts etcd's history up to its current revision (etcd's HTTP/JSON gateway, as
   * `etcdctl compaction --physical` does): a watch that goes to etcd from an older
   * resourceVersion then gets `410 Expired`. kube-apiserver's watch cache keeps its own
   * history: a cached kind resumes from it; start the server with
   * `--watch-cache-sizes=<resource>#0` to send that kind's watches to etcd.
   * @returns the compaction revision.
   */
  async compact(): Promise<string> {
    const etcd = async (api: string, body: unknown) => {
      const res = await fetch(`http://127.0.0.1:${this.etcdPort}/v3/kv/${api}`, { method: 'POST', body: JSON.stringify(body) });
      if (!res.ok) throw new Error(`etcd ${api}: ${res.status} ${await res.text()}`);
      return (await res.json()) as { header: { revision: string } };
    };
    const { revision } = (await etcd('range', { key: Buffer.from('/').toString('base64') })).header;
    await etcd('compaction', { revision, physical: true });
    return revision;
  }

  /**
   * Installs deploy/crds and waits until each is Established and its list answers (right after
   * that, lists may answer `429 storage is (re)initializing` for a moment).
   */
  async installCrds(): Promise<void> {
    await this.applyFile(path.join(ROOT, 'deploy/crds'));
    for (const type of DEFAULT_RESOURCE_TYPES.filter((r) => r.crd)) {
      await eventually(
        async () => {
          try {
            await this.objectsApi.list(`${type.group}/${type.version}`, type.kind);
            return true;
          } catch {
            return false;
          }
        },
        `the ${type.kind} CRD to be served`,
        60_000,
        100,
      );
    }
  }
}
