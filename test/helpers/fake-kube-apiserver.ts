/**
 * A loopback Kubernetes API server for tests: enough of the real REST and list/watch wire
 * protocol for `@kubernetes/client-node` (informers, `Watch`, typed and generic clients) and
 * for a real `kubectl` (`apply`, `get -o json`, `delete`, `label`, `patch`).
 *
 * What it speaks:
 * - discovery: `/api`, `/api/v1`, `/apis`, `/apis/<group>`, `/apis/<group>/<version>`,
 *   `/version`; `/openapi/v2` answers 404 (kubectl then falls back to its built-in schemes).
 * - `GET` list (all namespaces or one) with `metadata.resourceVersion` (one global counter);
 *   items of built-in groups come without `apiVersion`/`kind`, as the real server sends them;
 *   `labelSelector` (`k=v`, `k==v`, `k!=v`, `k`, `!k`, comma-separated) and `fieldSelector`
 *   (`metadata.name`, `metadata.namespace`, `=`/`==`/`!=`).
 * - `?watch=true|1`: a chunked stream of `{"type":…,"object":…}` lines. Without a
 *   `resourceVersion` (or `"0"`) it starts with an `ADDED` per current object; with one, it
 *   replays every change after it. A resourceVersion older than the compaction point
 *   ({@link FakeKubeApiServer.compact}) is answered as the real server does — HTTP 200 and one
 *   `ERROR` event holding a `410 Expired` Status — or, with `expiredWatch: 'http-410'`, with an
 *   HTTP 410 Status. `allowWatchBookmarks` sends `BOOKMARK` events every `bookmarkIntervalMs`;
 *   `timeoutSeconds` ends the stream cleanly. A label-selected watch sees an object that starts
 *   (stops) matching as `ADDED` (`DELETED`).
 * - `POST` create (409 AlreadyExists), `PUT` update (409 Conflict on a stale
 *   `metadata.resourceVersion`), `DELETE` (a namespace deletes what is in it), `PATCH` with
 *   `application/merge-patch+json`, `application/strategic-merge-patch+json` (a merge patch
 *   that also merges the usual keyed lists — containers, ports, env, volumes, … — and honours
 *   `$patch`, `$setElementOrder`, `$retainKeys`, `$deleteFromPrimitiveList`) and
 *   `application/json-patch+json`. Server-side apply is refused with 415.
 *
 * Not modelled: authentication, admission, defaulting, finalizers, subresources other than
 * `status` (treated like the object), namespace existence on create, pagination (`limit` is
 * ignored: everything comes in one page).
 *
 * Test controls: {@link FakeKubeApiServer.dropWatches}, {@link FakeKubeApiServer.failNext},
 * {@link FakeKubeApiServer.stop}/{@link FakeKubeApiServer.start} (same port),
 * {@link FakeKubeApiServer.compact}, {@link FakeKubeApiServer.objects}, direct writes
 * ({@link FakeKubeApiServer.apply}, {@link FakeKubeApiServer.remove}) and a request log.
 */
import { randomUUID } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import path from 'node:path';

/** A resource type the server serves: what discovery lists and what the REST paths accept. */
export interface FakeResourceType {
  /** API group; `''` for core. */
  group: string;
  version: string;
  /** URL name, e.g. `services`. */
  plural: string;
  singular: string;
  kind: string;
  namespaced: boolean;
  shortNames?: string[];
  /** Served as a CustomResourceDefinition: list items keep `apiVersion` and `kind`. */
  crd?: boolean;
}

/** Every resource type served unless {@link FakeKubeApiServerOptions.resources} says otherwise. */
export const DEFAULT_RESOURCE_TYPES: readonly FakeResourceType[] = [
  { group: '', version: 'v1', plural: 'namespaces', singular: 'namespace', kind: 'Namespace', namespaced: false, shortNames: ['ns'] },
  { group: '', version: 'v1', plural: 'services', singular: 'service', kind: 'Service', namespaced: true, shortNames: ['svc'] },
  { group: '', version: 'v1', plural: 'endpoints', singular: 'endpoints', kind: 'Endpoints', namespaced: true, shortNames: ['ep'] },
  { group: '', version: 'v1', plural: 'pods', singular: 'pod', kind: 'Pod', namespaced: true, shortNames: ['po'] },
  { group: '', version: 'v1', plural: 'serviceaccounts', singular: 'serviceaccount', kind: 'ServiceAccount', namespaced: true, shortNames: ['sa'] },
  { group: '', version: 'v1', plural: 'secrets', singular: 'secret', kind: 'Secret', namespaced: true },
  { group: '', version: 'v1', plural: 'configmaps', singular: 'configmap', kind: 'ConfigMap', namespaced: true, shortNames: ['cm'] },
  { group: 'discovery.k8s.io', version: 'v1', plural: 'endpointslices', singular: 'endpointslice', kind: 'EndpointSlice', namespaced: true },
  { group: 'networking.k8s.io', version: 'v1', plural: 'ingresses', singular: 'ingress', kind: 'Ingress', namespaced: true, shortNames: ['ing'] },
  { group: 'coordination.k8s.io', version: 'v1', plural: 'leases', singular: 'lease', kind: 'Lease', namespaced: true },
  { group: 'apps', version: 'v1', plural: 'deployments', singular: 'deployment', kind: 'Deployment', namespaced: true, shortNames: ['deploy'] },
  { group: 'access.smi-spec.io', version: 'v1alpha3', plural: 'traffictargets', singular: 'traffictarget', kind: 'TrafficTarget', namespaced: true, shortNames: ['tt'], crd: true },
  { group: 'specs.smi-spec.io', version: 'v1alpha4', plural: 'httproutegroups', singular: 'httproutegroup', kind: 'HTTPRouteGroup', namespaced: true, shortNames: ['htr'], crd: true },
  { group: 'specs.smi-spec.io', version: 'v1alpha4', plural: 'tcproutes', singular: 'tcproute', kind: 'TCPRoute', namespaced: true, crd: true },
  { group: 'split.smi-spec.io', version: 'v1alpha2', plural: 'trafficsplits', singular: 'trafficsplit', kind: 'TrafficSplit', namespaced: true, shortNames: ['ts'], crd: true },
  { group: 'config.openservicemesh.io', version: 'v1alpha2', plural: 'meshconfigs', singular: 'meshconfig', kind: 'MeshConfig', namespaced: true, shortNames: ['meshconfig'], crd: true },
  { group: 'policy.openservicemesh.io', version: 'v1alpha1', plural: 'egresses', singular: 'egress', kind: 'Egress', namespaced: true, shortNames: ['egress'], crd: true },
  { group: 'policy.openservicemesh.io', version: 'v1alpha1', plural: 'ingressbackends', singular: 'ingressbackend', kind: 'IngressBackend', namespaced: true, shortNames: ['ingressbackend'], crd: true },
  { group: 'policy.openservicemesh.io', version: 'v1alpha1', plural: 'retries', singular: 'retry', kind: 'Retry', namespaced: true, shortNames: ['retry'], crd: true },
  { group: 'policy.openservicemesh.io', version: 'v1alpha1', plural: 'upstreamtrafficsettings', singular: 'upstreamtrafficsetting', kind: 'UpstreamTrafficSetting', namespaced: true, shortNames: ['upstreamtrafficsetting'], crd: true },
];

/** Options of {@link FakeKubeApiServer}. */
export interface FakeKubeApiServerOptions {
  /** Resource types served (default {@link DEFAULT_RESOURCE_TYPES}); leave one out to model a missing CRD. */
  resources?: readonly FakeResourceType[];
  /** How a watch from a compacted resourceVersion is refused (default `'error-event'`, as kube-apiserver does). */
  expiredWatch?: 'error-event' | 'http-410';
  /** Interval of `BOOKMARK` events on watches that allow them (default 1000 ms). */
  bookmarkIntervalMs?: number;
  /** Port to listen on (default 0: any free port). */
  port?: number;
}

/** A JSON object as stored: `apiVersion`, `kind`, `metadata` and anything else. */
export type FakeObject = Record<string, unknown> & {
  apiVersion: string;
  kind: string;
  metadata: Record<string, unknown> & { name: string; namespace?: string; resourceVersion?: string; labels?: Record<string, string> };
};

/** One request the server received (after it was answered or started streaming). */
export interface FakeRequestRecord {
  method: string;
  /** Path and query. */
  url: string;
  contentType?: string;
  /** The HTTP status answered. */
  status: number;
  watch: boolean;
}

interface WatchEvent {
  rv: number;
  type: 'ADDED' | 'MODIFIED' | 'DELETED';
  resource: FakeResourceType;
  object: FakeObject;
  previous?: FakeObject;
}

interface Watcher {
  resource: FakeResourceType;
  namespace?: string;
  selector: Selector;
  res: http.ServerResponse;
  close(abrupt: boolean): void;
}

type Selector = (object: FakeObject) => boolean;

class HttpError extends Error {
  constructor(
    readonly code: number,
    readonly reason: string,
    message: string,
    readonly details?: Record<string, unknown>,
  ) {
    super(message);
  }
}

/** A loopback fake of kube-apiserver. Create it, `await start()`, point clients at {@link url}. */
export class FakeKubeApiServer {
  readonly #resources: readonly FakeResourceType[];
  readonly #options: FakeKubeApiServerOptions;
  /** resource key (`group/plural`) → object key (`ns/name`) → object. */
  readonly #store = new Map<string, Map<string, FakeObject>>();
  #log: WatchEvent[] = [];
  #rv = 1;
  #compactedRv = 0;
  readonly #watchers = new Set<Watcher>();
  readonly #sockets = new Set<Socket>();
  #server: http.Server | undefined;
  #port: number;
  #failures: { remaining: number; status: number } | undefined;
  /** Every request answered, in order (for assertions). */
  readonly requests: FakeRequestRecord[] = [];

  /** Creates a stopped server; call {@link start}. */
  constructor(options: FakeKubeApiServerOptions = {}) {
    this.#options = options;
    this.#resources = options.resources ?? DEFAULT_RESOURCE_TYPES;
    this.#port = options.port ?? 0;
  }

  /** Listens on 127.0.0.1 (the same port again after {@link stop}). Resolves once listening. */
  async start(): Promise<this> {
    if (this.#server) return this;
    const server = http.createServer((req, res) => {
      this.#handle(req, res);
    });
    server.on('connection', (socket) => {
      this.#sockets.add(socket);
      socket.on('close', () => this.#sockets.delete(socket));
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.#port, '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
    this.#port = (server.address() as AddressInfo).port;
    this.#server = server;
    return this;
  }

  /** Stops listening and cuts every connection (watches end abruptly); the objects are kept. */
  async stop(): Promise<void> {
    const server = this.#server;
    if (!server) return;
    this.#server = undefined;
    for (const w of [...this.#watchers]) w.close(true);
    for (const socket of this.#sockets) socket.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  /** Whether the server is listening. */
  get running(): boolean {
    return this.#server !== undefined;
  }

  /** The port (stable across {@link stop}/{@link start}). */
  get port(): number {
    return this.#port;
  }

  /** `http://127.0.0.1:<port>`. */
  get url(): string {
    return `http://127.0.0.1:${this.#port}`;
  }

  /** The current (latest) resourceVersion. */
  get resourceVersion(): string {
    return String(this.#rv);
  }

  /** The number of watch streams currently open. */
  get activeWatches(): number {
    return this.#watchers.size;
  }

  /** A kubeconfig (YAML) with one context pointing at this server, no credentials (works for kubectl and client-node). */
  kubeconfigYaml(namespace = 'default'): string {
    return [
      'apiVersion: v1',
      'kind: Config',
      'clusters:',
      '- name: fake',
      '  cluster:',
      `    server: ${this.url}`,
      // @kubernetes/client-node refuses a plain-http server unless TLS verification is "skipped".
      '    insecure-skip-tls-verify: true',
      'users:',
      '- name: fake',
      '  user: {}',
      'contexts:',
      '- name: fake',
      '  context:',
      '    cluster: fake',
      '    user: fake',
      `    namespace: ${namespace}`,
      'current-context: fake',
      '',
    ].join('\n');
  }

  /** Writes {@link kubeconfigYaml} to `<dir>/kubeconfig` and returns its path. */
  async writeKubeconfig(dir: string, namespace?: string): Promise<string> {
    await mkdir(dir, { recursive: true });
    const file = path.join(dir, 'kubeconfig');
    await writeFile(file, this.kubeconfigYaml(namespace));
    return file;
  }

  /**
   * Forgets the change history up to now: a watch from any older resourceVersion gets 410.
   * @returns the compaction point (the current resourceVersion).
   */
  compact(): string {
    this.#compactedRv = this.#rv;
    this.#log = [];
    return String(this.#rv);
  }

  /**
   * Ends every open watch stream mid-way.
   * @param abrupt true (default) destroys the connection; false ends the chunked response cleanly.
   * @returns how many streams were ended.
   */
  dropWatches(abrupt = true): number {
    const n = this.#watchers.size;
    for (const w of [...this.#watchers]) w.close(abrupt);
    return n;
  }

  /**
   * The next `n` requests (any path, discovery included) are answered with `status` and a
   * Status body, without any effect.
   * @param filter only requests for which it returns true are failed (and counted).
   */
  failNext(n: number, status = 500, filter?: (method: string, url: string) => boolean): void {
    this.#failures = n > 0 ? { remaining: n, status } : undefined;
    this.#failFilter = filter;
  }
  #failFilter: ((method: string, url: string) => boolean) | undefined;

  /** Sends a BOOKMARK now on every watch that allows them. */
  sendBookmarks(): void {
    for (const w of this.#watchers) (w as Watcher & { bookmark?: () => void }).bookmark?.();
  }

  /**
   * The stored objects of a kind (`Service`), plural (`services`) or `group/plural`, sorted by
   * namespace and name; deep copies.
   * @param namespace only that namespace.
   */
  objects(kind: string, namespace?: string): FakeObject[] {
    const resource = this.#resourceFor(kind);
    const all = [...(this.#store.get(resourceKey(resource))?.values() ?? [])];
    return all
      .filter((o) => namespace === undefined || o.metadata.namespace === namespace)
      .sort((a, b) => objectKey(a).localeCompare(objectKey(b)))
      .map((o) => clone(o));
  }

  /** One stored object (a deep copy), or undefined. */
  get(kind: string, namespace: string | undefined, name: string): FakeObject | undefined {
    const resource = this.#resourceFor(kind);
    const found = this.#store.get(resourceKey(resource))?.get(keyOf(resource.namespaced ? namespace : undefined, name));
    return found ? clone(found) : undefined;
  }

  /**
   * Creates or replaces an object directly (no preconditions), as if some other client wrote
   * it; watchers see ADDED or MODIFIED.
   * @returns the stored object.
   */
  apply(object: Record<string, unknown>): FakeObject {
    const obj = clone(object) as FakeObject;
    const resource = this.#resourceForObject(obj);
    const ns = resource.namespaced ? (obj.metadata.namespace ?? 'default') : undefined;
    const existing = this.#bucket(resource).get(keyOf(ns, obj.metadata.name));
    if (existing) {
      obj.metadata.resourceVersion = existing.metadata.resourceVersion;
      return this.#update(resource, ns, obj.metadata.name, obj);
    }
    return this.#create(resource, ns, obj);
  }

  /**
   * Deletes an object directly; watchers see DELETED.
   * @returns whether it existed.
   */
  remove(kind: string, namespace: string | undefined, name: string): boolean {
    const resource = this.#resourceFor(kind);
    try {
      this.#delete(resource, resource.namespaced ? namespace : undefined, name);
      return true;
    } catch {
      return false;
    }
  }

  // ---------------------------------------------------------------- resources and storage

  #resourceFor(kindOrPlural: string): FakeResourceType {
    const lower = kindOrPlural.toLowerCase();
    const found =
      this.#resources.find((r) => r.kind === kindOrPlural) ??
      this.#resources.find((r) => r.plural === lower || `${r.group}/${r.plural}` === lower || r.kind.toLowerCase() === lower);
    if (!found) throw new Error(`fake-kube-apiserver: unknown resource ${kindOrPlural}`);
    return found;
  }

  #resourceForObject(obj: FakeObject): FakeResourceType {
    const [group, version] = obj.apiVersion.includes('/') ? obj.apiVersion.split('/') : ['', obj.apiVersion];
    const found = this.#resources.find((r) => r.kind === obj.kind && r.group === group && r.version === version);
    if (!found) throw new Error(`fake-kube-apiserver: unknown resource ${obj.apiVersion} ${obj.kind}`);
    return found;
  }

  #bucket(resource: FakeResourceType): Map<string, FakeObject> {
    const key = resourceKey(resource);
    let bucket = this.#store.get(key);
    if (!bucket) {
      bucket = new Map();
      this.#store.set(key, bucket);
    }
    return bucket;
  }

  #record(type: WatchEvent['type'], resource: FakeResourceType, object: FakeObject, previous?: FakeObject): void {
    const event: WatchEvent = { rv: this.#rv, type, resource, object: clone(object), previous: previous && clone(previous) };
    this.#log.push(event);
    for (const w of this.#watchers) this.#deliver(w, event);
  }

  #create(resource: FakeResourceType, ns: string | undefined, input: FakeObject): FakeObject {
    const name = input.metadata.name;
    if (!name) {
      if (typeof input.metadata.generateName === 'string') input.metadata.name = `${input.metadata.generateName}${randomUUID().slice(0, 5)}`;
      else throw new HttpError(422, 'Invalid', `${resource.kind} "" is invalid: metadata.name: Required value: name or generateName is required`);
    }
    const bucket = this.#bucket(resource);
    const key = keyOf(ns, input.metadata.name);
    if (bucket.has(key)) {
      throw new HttpError(409, 'AlreadyExists', `${groupResource(resource)} "${input.metadata.name}" already exists`, {
        name: input.metadata.name,
        group: resource.group,
        kind: resource.plural,
      });
    }
    const obj = clone(input);
    obj.apiVersion = apiVersionOf(resource);
    obj.kind = resource.kind;
    if (ns === undefined) delete obj.metadata.namespace;
    else obj.metadata.namespace = ns;
    delete obj.metadata.managedFields;
    this.#rv += 1;
    obj.metadata.uid = randomUUID();
    obj.metadata.creationTimestamp = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
    obj.metadata.resourceVersion = String(this.#rv);
    obj.metadata.generation = 1;
    if (resource.kind === 'Namespace') obj.status = { phase: 'Active' };
    bucket.set(key, obj);
    this.#record('ADDED', resource, obj);
    return clone(obj);
  }

  #update(resource: FakeResourceType, ns: string | undefined, name: string, input: FakeObject): FakeObject {
    const bucket = this.#bucket(resource);
    const key = keyOf(ns, name);
    const current = bucket.get(key);
    if (!current) throw notFound(resource, name);
    if (input.metadata?.name !== undefined && input.metadata.name !== name) {
      throw new HttpError(400, 'BadRequest', `the name of the object (${input.metadata.name}) does not match the name on the URL (${name})`);
    }
    const wanted = input.metadata?.resourceVersion;
    if (wanted !== undefined && wanted !== '' && wanted !== current.metadata.resourceVersion) {
      throw new HttpError(
        409,
        'Conflict',
        `Operation cannot be fulfilled on ${groupResource(resource)} "${name}": the object has been modified; please apply your changes to the latest version and try again`,
        { name, group: resource.group, kind: resource.plural },
      );
    }
    const obj = clone(input);
    obj.apiVersion = apiVersionOf(resource);
    obj.kind = resource.kind;
    obj.metadata = { ...obj.metadata, name };
    if (ns === undefined) delete obj.metadata.namespace;
    else obj.metadata.namespace = ns;
    delete obj.metadata.managedFields;
    obj.metadata.uid = current.metadata.uid;
    obj.metadata.creationTimestamp = current.metadata.creationTimestamp;
    const specChanged = JSON.stringify(obj.spec) !== JSON.stringify(current.spec);
    obj.metadata.generation = Number(current.metadata.generation ?? 1) + (specChanged ? 1 : 0);
    if (resource.kind === 'Namespace' && obj.status === undefined) obj.status = current.status;
    // A no-op update keeps the resourceVersion and emits nothing (as the real server does).
    obj.metadata.resourceVersion = current.metadata.resourceVersion;
    if (JSON.stringify(sortKeys(obj)) === JSON.stringify(sortKeys(current))) return clone(current);
    this.#rv += 1;
    obj.metadata.resourceVersion = String(this.#rv);
    bucket.set(key, obj);
    this.#record('MODIFIED', resource, obj, current);
    return clone(obj);
  }

  #delete(resource: FakeResourceType, ns: string | undefined, name: string): FakeObject {
    const bucket = this.#bucket(resource);
    const key = keyOf(ns, name);
    const current = bucket.get(key);
    if (!current) throw notFound(resource, name);
    if (resource.kind === 'Namespace') {
      for (const r of this.#resources) {
        if (!r.namespaced) continue;
        for (const o of [...this.#bucket(r).values()]) {
          if (o.metadata.namespace === name) this.#delete(r, name, o.metadata.name);
        }
      }
    }
    bucket.delete(key);
    this.#rv += 1;
    const gone = clone(current);
    gone.metadata.resourceVersion = String(this.#rv);
    this.#record('DELETED', resource, gone);
    return gone;
  }

  // ---------------------------------------------------------------- HTTP

  #handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const url = new URL(req.url ?? '/', 'http://localhost');
    const method = req.method ?? 'GET';
    const isWatch = url.searchParams.get('watch') === 'true' || url.searchParams.get('watch') === '1';
    const record: FakeRequestRecord = { method, url: `${url.pathname}${url.search}`, contentType: req.headers['content-type'], status: 0, watch: isWatch };
    this.requests.push(record);
    res.on('finish', () => {
      if (record.status === 0) record.status = res.statusCode;
    });
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      try {
        if (this.#failures && (!this.#failFilter || this.#failFilter(method, record.url))) {
          const status = this.#failures.status;
          this.#failures.remaining -= 1;
          if (this.#failures.remaining <= 0) this.#failures = undefined;
          throw new HttpError(status, status === 503 ? 'ServiceUnavailable' : 'InternalError', `injected failure (${status})`);
        }
        const body = Buffer.concat(chunks).toString('utf8');
        this.#route(method, url, req.headers['content-type'] ?? '', body, res, isWatch, record);
      } catch (err) {
        const e = err instanceof HttpError ? err : new HttpError(500, 'InternalError', String(err instanceof Error ? err.message : err));
        sendJson(res, e.code, statusObject(e));
      }
    });
  }

  #route(method: string, url: URL, contentType: string, body: string, res: http.ServerResponse, isWatch: boolean, record: FakeRequestRecord): void {
    const parts = url.pathname.split('/').filter((p) => p !== '');
    if (method === 'GET' && this.#discovery(parts, res)) return;
    // /api/v1/... or /apis/<group>/<version>/...
    let group: string;
    let version: string;
    let rest: string[];
    if (parts[0] === 'api' && parts.length >= 3) {
      group = '';
      version = parts[1];
      rest = parts.slice(2);
    } else if (parts[0] === 'apis' && parts.length >= 4) {
      group = parts[1];
      version = parts[2];
      rest = parts.slice(3);
    } else {
      throw new HttpError(404, 'NotFound', 'the server could not find the requested resource');
    }
    let ns: string | undefined;
    if (rest[0] === 'namespaces' && rest.length >= 3) {
      ns = rest[1];
      rest = rest.slice(2);
    }
    const [plural, name, subresource] = rest;
    const resource = this.#resources.find((r) => r.group === group && r.version === version && r.plural === plural);
    if (!resource || rest.length > 3 || (subresource !== undefined && subresource !== 'status')) {
      throw new HttpError(404, 'NotFound', 'the server could not find the requested resource');
    }
    if (!resource.namespaced && ns !== undefined) throw new HttpError(404, 'NotFound', 'the server could not find the requested resource');
    const params = url.searchParams;
    if (name === undefined) {
      if (method === 'GET' && isWatch) return this.#watch(resource, ns, params, res, record);
      if (method === 'GET') return sendJson(res, 200, this.#list(resource, ns, params));
      if (method === 'POST') {
        if (resource.namespaced && ns === undefined) throw new HttpError(404, 'NotFound', 'the server could not find the requested resource');
        const input = parseBody(body);
        const bodyNs = input.metadata?.namespace;
        if (ns !== undefined && bodyNs !== undefined && bodyNs !== ns) {
          throw new HttpError(400, 'BadRequest', 'the namespace of the provided object does not match the namespace sent on the request');
        }
        return sendJson(res, 201, this.#create(resource, ns, input));
      }
      if (method === 'DELETE') throw new HttpError(405, 'MethodNotAllowed', 'deletecollection is not supported by the fake');
      throw new HttpError(405, 'MethodNotAllowed', `${method} is not supported`);
    }
    if (resource.namespaced && ns === undefined) throw new HttpError(404, 'NotFound', 'the server could not find the requested resource');
    const bucket = this.#bucket(resource);
    switch (method) {
      case 'GET': {
        const found = bucket.get(keyOf(ns, name));
        if (!found) throw notFound(resource, name);
        return sendJson(res, 200, found);
      }
      case 'PUT':
        return sendJson(res, 200, this.#update(resource, ns, name, parseBody(body)));
      case 'DELETE':
        return sendJson(res, 200, this.#delete(resource, ns, name));
      case 'PATCH': {
        const current = bucket.get(keyOf(ns, name));
        if (!current) throw notFound(resource, name);
        const type = contentType.split(';')[0].trim();
        let patched: unknown;
        const patch = safeJson(body);
        if (type === 'application/merge-patch+json') patched = mergePatch(current, patch);
        else if (type === 'application/strategic-merge-patch+json') patched = strategicMergePatch(current, patch);
        else if (type === 'application/json-patch+json') patched = jsonPatch(current, patch);
        else throw new HttpError(415, 'UnsupportedMediaType', `the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json`);
        const obj = patched as FakeObject;
        if (!isRecord(obj) || !isRecord(obj.metadata)) throw new HttpError(422, 'Invalid', 'patched object has no metadata');
        // A patch without a resourceVersion applies to the current one.
        const patchMeta = isRecord(patch) && isRecord(patch.metadata) ? patch.metadata : undefined;
        if (patchMeta?.resourceVersion === undefined) obj.metadata.resourceVersion = current.metadata.resourceVersion;
        return sendJson(res, 200, this.#update(resource, ns, name, obj));
      }
      default:
        throw new HttpError(405, 'MethodNotAllowed', `${method} is not supported`);
    }
  }

  #discovery(parts: string[], res: http.ServerResponse): boolean {
    const p = parts.join('/');
    if (p === 'version') {
      sendJson(res, 200, { major: '1', minor: '29', gitVersion: 'v1.29.0-fake', platform: 'linux/amd64' });
      return true;
    }
    if (p === 'api') {
      sendJson(res, 200, { kind: 'APIVersions', versions: ['v1'], serverAddressByClientCIDRs: [{ clientCIDR: '0.0.0.0/0', serverAddress: `127.0.0.1:${this.#port}` }] });
      return true;
    }
    if (p === 'api/v1') {
      sendJson(res, 200, this.#resourceList('', 'v1'));
      return true;
    }
    const groups = this.#groups();
    if (p === 'apis') {
      sendJson(res, 200, { kind: 'APIGroupList', apiVersion: 'v1', groups: [...groups.entries()].map(([g, versions]) => groupObject(g, versions)) });
      return true;
    }
    if (parts[0] === 'apis' && parts.length === 2) {
      const versions = groups.get(parts[1]);
      if (!versions) return false;
      sendJson(res, 200, { apiVersion: 'v1', ...groupObject(parts[1], versions) });
      return true;
    }
    if (parts[0] === 'apis' && parts.length === 3) {
      if (!groups.get(parts[1])?.includes(parts[2])) return false;
      sendJson(res, 200, this.#resourceList(parts[1], parts[2]));
      return true;
    }
    return false;
  }

  #groups(): Map<string, string[]> {
    const groups = new Map<string, string[]>();
    for (const r of this.#resources) {
      if (r.group === '') continue;
      const versions = groups.get(r.group) ?? [];
      if (!versions.includes(r.version)) versions.push(r.version);
      groups.set(r.group, versions);
    }
    return groups;
  }

  #resourceList(group: string, version: string): Record<string, unknown> {
    const verbs = ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'];
    const resources: Record<string, unknown>[] = [];
    for (const r of this.#resources) {
      if (r.group !== group || r.version !== version) continue;
      resources.push({
        name: r.plural,
        singularName: r.singular,
        namespaced: r.namespaced,
        kind: r.kind,
        verbs,
        ...(r.shortNames ? { shortNames: r.shortNames } : {}),
        storageVersionHash: Buffer.from(`${r.group}/${r.plural}`).toString('base64').slice(0, 11),
      });
      resources.push({ name: `${r.plural}/status`, singularName: '', namespaced: r.namespaced, kind: r.kind, verbs: ['get', 'patch', 'update'] });
    }
    return { kind: 'APIResourceList', apiVersion: 'v1', groupVersion: group === '' ? version : `${group}/${version}`, resources };
  }

  #list(resource: FakeResourceType, ns: string | undefined, params: URLSearchParams): Record<string, unknown> {
    const selector = makeSelector(params);
    const items = [...this.#bucket(resource).values()]
      .filter((o) => (ns === undefined || o.metadata.namespace === ns) && selector(o))
      .sort((a, b) => objectKey(a).localeCompare(objectKey(b)))
      .map((o) => {
        const item = clone(o) as Record<string, unknown>;
        if (!resource.crd) {
          delete item.apiVersion;
          delete item.kind;
        }
        return item;
      });
    return { kind: `${resource.kind}List`, apiVersion: apiVersionOf(resource), metadata: { resourceVersion: String(this.#rv) }, items };
  }

  #watch(resource: FakeResourceType, ns: string | undefined, params: URLSearchParams, res: http.ServerResponse, record: FakeRequestRecord): void {
    const selector = makeSelector(params);
    const fromParam = params.get('resourceVersion');
    const from = fromParam === null || fromParam === '' || fromParam === '0' ? undefined : Number(fromParam);
    if (from !== undefined && (!Number.isFinite(from) || from < 0)) throw new HttpError(400, 'BadRequest', `invalid resource version ${fromParam}`);
    const expired = from !== undefined && from < this.#compactedRv;
    if (expired && this.#options.expiredWatch === 'http-410') {
      throw new HttpError(410, 'Expired', `too old resource version: ${from} (${this.#compactedRv})`);
    }
    res.writeHead(200, { 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked', 'Cache-Control': 'no-cache, private' });
    res.flushHeaders();
    record.status = 200;
    if (expired) {
      const status = statusObject(new HttpError(410, 'Expired', `too old resource version: ${from} (${this.#compactedRv})`));
      res.end(`${JSON.stringify({ type: 'ERROR', object: status })}\n`);
      return;
    }
    const timers: NodeJS.Timeout[] = [];
    const watcher: Watcher & { bookmark?: () => void } = {
      resource,
      namespace: ns,
      selector,
      res,
      close: (abrupt) => {
        this.#watchers.delete(watcher);
        for (const t of timers) clearTimeout(t);
        if (abrupt) res.socket?.destroy();
        else if (!res.writableEnded) res.end();
      },
    };
    res.on('close', () => watcher.close(false));
    if (from === undefined) {
      const initial = [...this.#bucket(resource).values()]
        .filter((o) => (ns === undefined || o.metadata.namespace === ns) && selector(o))
        .sort((a, b) => objectKey(a).localeCompare(objectKey(b)));
      for (const o of initial) writeEvent(res, 'ADDED', o);
    } else {
      for (const event of this.#log) if (event.rv > from) this.#deliver(watcher, event);
    }
    this.#watchers.add(watcher);
    if (params.get('allowWatchBookmarks') === 'true') {
      watcher.bookmark = () => {
        writeEvent(res, 'BOOKMARK', { apiVersion: apiVersionOf(resource), kind: resource.kind, metadata: { name: '', resourceVersion: String(this.#rv) } });
      };
      const interval = this.#options.bookmarkIntervalMs ?? 1000;
      const tick = (): void => {
        if (!this.#watchers.has(watcher)) return;
        watcher.bookmark?.();
        timers[0] = setTimeout(tick, interval);
      };
      timers[0] = setTimeout(tick, interval);
    }
    const timeout = Number(params.get('timeoutSeconds') ?? '0');
    if (timeout > 0) timers.push(setTimeout(() => watcher.close(false), timeout * 1000));
  }

  #deliver(w: Watcher, event: WatchEvent): void {
    if (event.resource !== w.resource) return;
    const inNs = (o: FakeObject | undefined): boolean => o !== undefined && (w.namespace === undefined || o.metadata.namespace === w.namespace);
    const now = inNs(event.object) && w.selector(event.object);
    const before = event.previous !== undefined && inNs(event.previous) && w.selector(event.previous);
    let type: string | undefined;
    if (event.type === 'MODIFIED') type = now && before ? 'MODIFIED' : now ? 'ADDED' : before ? 'DELETED' : undefined;
    else type = now ? event.type : undefined;
    if (type) writeEvent(w.res, type, event.object);
  }
}

// ---------------------------------------------------------------- helpers

function resourceKey(r: FakeResourceType): string {
  return `${r.group}/${r.plural}`;
}

function apiVersionOf(r: FakeResourceType): string {
  return r.group === '' ? r.version : `${r.group}/${r.version}`;
}

function groupResource(r: FakeResourceType): string {
  return r.group === '' ? r.plural : `${r.plural}.${r.group}`;
}

function keyOf(ns: string | undefined, name: string): string {
  return `${ns ?? ''}/${name}`;
}

function objectKey(o: FakeObject): string {
  return keyOf(o.metadata.namespace, o.metadata.name);
}

function groupObject(group: string, versions: string[]): Record<string, unknown> {
  const list = versions.map((v) => ({ groupVersion: `${group}/${v}`, version: v }));
  return { kind: 'APIGroup', name: group, versions: list, preferredVersion: list[0] };
}

function notFound(resource: FakeResourceType, name: string): HttpError {
  return new HttpError(404, 'NotFound', `${groupResource(resource)} "${name}" not found`, { name, group: resource.group, kind: resource.plural });
}

function statusObject(e: HttpError): Record<string, unknown> {
  return {
    kind: 'Status',
    apiVersion: 'v1',
    metadata: {},
    status: 'Failure',
    message: e.message,
    reason: e.reason,
    ...(e.details ? { details: e.details } : {}),
    code: e.code,
  };
}

function sendJson(res: http.ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}

function writeEvent(res: http.ServerResponse, type: string, object: unknown): void {
  if (!res.writableEnded && !res.destroyed) res.write(`${JSON.stringify({ type, object })}\n`);
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

function clone<T>(v: T): T {
  return structuredClone(v);
}

function sortKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (!isRecord(v)) return v;
  return Object.fromEntries(Object.keys(v).sort().map((k) => [k, sortKeys(v[k])]));
}

function safeJson(body: string): unknown {
  try {
    return JSON.parse(body) as unknown;
  } catch {
    throw new HttpError(400, 'BadRequest', 'the request body is not valid JSON');
  }
}

function parseBody(body: string): FakeObject {
  const obj = safeJson(body);
  if (!isRecord(obj) || !isRecord(obj.metadata)) throw new HttpError(422, 'Invalid', 'the object has no metadata');
  return obj as FakeObject;
}

/** `labelSelector` and `fieldSelector` of a request as one predicate. */
function makeSelector(params: URLSearchParams): Selector {
  const tests: Selector[] = [];
  for (const term of splitTerms(params.get('labelSelector'))) tests.push(termTest(term, (o) => o.metadata.labels ?? {}));
  for (const term of splitTerms(params.get('fieldSelector'))) {
    tests.push(
      termTest(term, (o) => ({
        'metadata.name': o.metadata.name,
        ...(o.metadata.namespace !== undefined ? { 'metadata.namespace': o.metadata.namespace } : {}),
      })),
    );
  }
  return (o) => tests.every((t) => t(o));
}

function splitTerms(s: string | null): string[] {
  return (s ?? '')
    .split(',')
    .map((t) => t.trim())
    .filter((t) => t !== '');
}

function termTest(term: string, values: (o: FakeObject) => Record<string, string>): Selector {
  let m = /^([^!=\s]+)\s*!=\s*(.*)$/.exec(term);
  if (m) {
    const [, k, v] = m;
    return (o) => values(o)[k] !== v;
  }
  m = /^([^!=\s]+)\s*==?\s*(.*)$/.exec(term);
  if (m) {
    const [, k, v] = m;
    return (o) => values(o)[k] === v;
  }
  m = /^!\s*(\S+)$/.exec(term);
  if (m) {
    const k = m[1];
    return (o) => !(k in values(o));
  }
  m = /^(\S+)\s+(in|notin)\s+\((.*)\)$/.exec(term);
  if (m) {
    const [, k, op, list] = m;
    const set = new Set(list.split(',').map((x) => x.trim()));
    return op === 'in' ? (o) => set.has(values(o)[k]) : (o) => !set.has(values(o)[k]);
  }
  return (o) => term in values(o);
}

/** RFC 7386 JSON merge patch. */
function mergePatch(target: unknown, patch: unknown): unknown {
  if (!isRecord(patch)) return clone(patch);
  const result: Record<string, unknown> = isRecord(target) ? clone(target) : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete result[k];
    else result[k] = mergePatch(result[k], v);
  }
  return result;
}

/** Lists merged by key in strategic merge patches (field name → merge key), as Kubernetes' built-in types declare them. */
const MERGE_KEYS: Record<string, string> = {
  containers: 'name',
  initContainers: 'name',
  ephemeralContainers: 'name',
  env: 'name',
  volumes: 'name',
  volumeMounts: 'mountPath',
  imagePullSecrets: 'name',
  conditions: 'type',
  tolerations: 'key',
  hostAliases: 'ip',
  secrets: 'name',
};

/** Merge key of the list `field` whose patch elements are `items`, or undefined (the list is replaced). */
function mergeKeyFor(field: string, items: unknown[]): string | undefined {
  if (field === 'ports') {
    const first = items.find(isRecord);
    if (first && 'containerPort' in first) return 'containerPort';
    if (first && 'port' in first) return 'port';
    return undefined;
  }
  return MERGE_KEYS[field];
}

/**
 * A strategic merge patch, enough for what `kubectl apply` sends: a merge patch in which the
 * keyed lists of built-in types are merged element by element, `$patch: replace|delete`,
 * `$retainKeys`, `$setElementOrder/<field>` and `$deleteFromPrimitiveList/<field>`.
 */
function strategicMergePatch(target: unknown, patch: unknown): unknown {
  if (!isRecord(patch)) return clone(patch);
  const directive = patch.$patch;
  if (directive === 'delete') return undefined;
  const base: Record<string, unknown> = directive === 'replace' || !isRecord(target) ? {} : clone(target);
  if (Array.isArray(patch.$retainKeys)) {
    const keep = new Set(patch.$retainKeys as unknown[]);
    for (const k of Object.keys(base)) if (!keep.has(k)) delete base[k];
  }
  for (const [k, v] of Object.entries(patch)) {
    if (k === '$patch' || k === '$retainKeys' || k.startsWith('$setElementOrder/')) continue;
    if (k.startsWith('$deleteFromPrimitiveList/')) {
      const field = k.slice('$deleteFromPrimitiveList/'.length);
      const drop = new Set(Array.isArray(v) ? v : []);
      if (Array.isArray(base[field])) base[field] = (base[field] as unknown[]).filter((x) => !drop.has(x));
      continue;
    }
    if (v === null) {
      delete base[k];
      continue;
    }
    if (Array.isArray(v)) {
      const key = mergeKeyFor(k, v);
      const current = base[k];
      if (key && Array.isArray(current)) base[k] = mergeList(current, v, key);
      else base[k] = v.filter((x) => !(isRecord(x) && x.$patch === 'delete')).map((x) => (isRecord(x) ? strategicMergePatch(undefined, x) : x));
      continue;
    }
    if (isRecord(v)) {
      const merged = strategicMergePatch(base[k], v);
      if (merged === undefined) delete base[k];
      else base[k] = merged;
      continue;
    }
    base[k] = v;
  }
  return base;
}

function mergeList(current: unknown[], patch: unknown[], key: string): unknown[] {
  if (patch.some((x) => isRecord(x) && x.$patch === 'replace')) {
    return patch.filter((x) => !(isRecord(x) && x.$patch === 'replace'));
  }
  const result = current.map((x) => clone(x));
  for (const item of patch) {
    if (!isRecord(item)) continue;
    const index = result.findIndex((x) => isRecord(x) && x[key] === item[key]);
    if (item.$patch === 'delete') {
      if (index >= 0) result.splice(index, 1);
      continue;
    }
    if (index >= 0) result[index] = strategicMergePatch(result[index], item);
    else result.push(strategicMergePatch(undefined, item));
  }
  return result;
}

/** RFC 6902 JSON patch (add, remove, replace, test, copy, move). */
function jsonPatch(target: unknown, ops: unknown): unknown {
  if (!Array.isArray(ops)) throw new HttpError(400, 'BadRequest', 'a JSON patch must be an array');
  let doc = clone(target);
  const walk = (pointer: string): { parent: Record<string, unknown> | unknown[]; key: string } => {
    const tokens = pointer.split('/').slice(1).map((t) => t.replace(/~1/g, '/').replace(/~0/g, '~'));
    let parent: unknown = doc;
    for (const t of tokens.slice(0, -1)) {
      parent = Array.isArray(parent) ? parent[Number(t)] : isRecord(parent) ? parent[t] : undefined;
      if (parent === undefined) throw new HttpError(422, 'Invalid', `path ${pointer} does not exist`);
    }
    return { parent: parent as Record<string, unknown> | unknown[], key: tokens[tokens.length - 1] };
  };
  const read = (pointer: string): unknown => {
    const { parent, key } = walk(pointer);
    return Array.isArray(parent) ? parent[Number(key)] : parent[key];
  };
  const remove = (pointer: string): void => {
    const { parent, key } = walk(pointer);
    if (Array.isArray(parent)) parent.splice(Number(key), 1);
    else delete parent[key];
  };
  const add = (pointer: string, value: unknown, replace: boolean): void => {
    if (pointer === '') {
      doc = clone(value);
      return;
    }
    const { parent, key } = walk(pointer);
    if (Array.isArray(parent)) {
      const i = key === '-' ? parent.length : Number(key);
      if (replace) parent[i] = clone(value);
      else parent.splice(i, 0, clone(value));
    } else parent[key] = clone(value);
  };
  for (const raw of ops) {
    if (!isRecord(raw)) continue;
    const op = String(raw.op);
    const p = String(raw.path);
    if (op === 'add') add(p, raw.value, false);
    else if (op === 'replace') add(p, raw.value, true);
    else if (op === 'remove') remove(p);
    else if (op === 'test') {
      if (JSON.stringify(read(p)) !== JSON.stringify(raw.value)) throw new HttpError(422, 'Invalid', `test failed at ${p}`);
    } else if (op === 'copy') add(p, read(String(raw.from)), false);
    else if (op === 'move') {
      const v = read(String(raw.from));
      remove(String(raw.from));
      add(p, v, false);
    }
  }
  return doc;
}
