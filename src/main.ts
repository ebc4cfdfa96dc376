import * as grpc from '@grpc/grpc-js';
import { isIP } from 'node:net';
import path from 'node:path';
import pino, { type Logger } from 'pino';
import { collectDefaultMetrics, Registry } from 'prom-client';
import { formatProblem } from './catalog/problems.js';
import { formatViolation } from './envoy/validate/index.js';
import { CertificateAuthority } from './certificate/authority.js';
import { CertificateManager } from './certificate/manager.js';
import type { ReplicaCoordination } from './controller/kubernetes-replica.js';
import { Lifecycle } from './controller/lifecycle.js';
import { MeshController } from './controller/mesh-controller.js';
import { configDump } from './debug/config-dump.js';
import { observedHooks } from './debug/mesh-events.js';
import { meshView } from './debug/mesh-view.js';
import { OpsServer } from './debug/ops-server.js';
import { explainResponse } from './explain/http.js';
import { podProxy } from './debug/pod-proxy.js';
import { typeSync } from './debug/proxy-sync.js';
// Kubernetes mode's modules are imported in Kubernetes mode only (see loadKubernetesMode): types only here.
import type { KubernetesSource } from './sources/kubernetes/kubernetes-source.js';
import type { BackoffOptions } from './sources/kubernetes/reflector.js';
import { ManifestsSource } from './sources/manifests/manifests-source.js';
import { formatManifestError } from './sources/manifests/parse.js';
import { ObjectStore } from './store/object-store.js';
import { isPolicyKind } from './status/object-versions.js';
import type { ObjectError } from './status/policy-objects.js';
import { SnapshotCache } from './xds/cache/snapshot-cache.js';
import { AdsServer, authenticateFromNodeId, authenticateFromPeerCertificate } from './xds/server/ads-server.js';
import { splitHostPort } from './util/address.js';

/**
 * Longest /readyz waits at start-up for the mesh's identities to get their service certificates
 * and configurations ahead, in ms ({@link MeshController.warmUp}); the work goes on after it.
 */
export const WARM_UP_LIMIT_MS = 30_000;

/** The namespace the controller runs in when nothing says otherwise. */
export const DEFAULT_CONTROLLER_NAMESPACE = 'osm-system';

/** The controller's namespace: `$POD_NAMESPACE` (downward API) when set, else {@link DEFAULT_CONTROLLER_NAMESPACE}. */
export function defaultControllerNamespace(env: NodeJS.ProcessEnv = process.env): string {
  return env.POD_NAMESPACE || DEFAULT_CONTROLLER_NAMESPACE;
}

/** Options of {@link runController}; the CLI's `trellis controller` flags. */
export interface ControllerOptions {
  /** Directory of manifests to load and watch (exclusive with {@link ControllerOptions.kubernetes}). */
  readonly manifests?: string;
  /**
   * Watch a Kubernetes API server instead of a manifests directory: `kubeconfig` (else
   * in-cluster credentials, else the default kubeconfig); `backoff` and `watchTimeoutSeconds`
   * tune the reflectors (tests).
   */
  readonly kubernetes?: { readonly kubeconfig?: string; readonly backoff?: BackoffOptions; readonly watchTimeoutSeconds?: number };
  /**
   * Aborted: the start stops waiting where it waits without bound (Kubernetes mode: the CA Secret
   * while the API server is unreachable) and rejects, once the parts started are stopped.
   */
  readonly signal?: AbortSignal;
  readonly meshName: string;
  /** Where the CA's root certificate and key persist. */
  readonly stateDir: string;
  /** `host:port` of the mTLS ADS listener (port 0: any free port). */
  readonly xdsAddress: string;
  /** `host:port` of the plaintext ADS listener, or undefined for none. */
  readonly xdsPlaintextAddress?: string;
  /** Allow a plaintext listener on a non-loopback address. */
  readonly insecureAllowRemote?: boolean;
  /** `host:port` of the operations HTTP server. */
  readonly httpAddress: string;
  /** Host names requests to the operations server may name besides its addresses, localhost and Kubernetes service names (`OpsServerLimits.allowedHosts`). */
  readonly httpAllowedHosts?: readonly string[];
  /** Periodic resync interval, in ms. */
  readonly resyncIntervalMs: number;
  /** An ADS stream whose response stays unread this long (ms) is closed (default 30 s; 0: never). See `AdsServerOptions.unreadTimeoutMs`. */
  readonly xdsUnreadTimeoutMs?: number;
  /** Validity of service certificates when no MeshConfig says otherwise, in seconds. */
  readonly certValiditySeconds?: number;
  /**
   * Push debounce quiet period, in ms (default: {@link MANIFESTS_PUSH_QUIET_MS} with a
   * manifests directory, the controller's 100 ms with Kubernetes).
   */
  readonly debounceQuietMs?: number;
  /** Kubernetes mode: namespace of the CA Secret and the leader Lease (default `$POD_NAMESPACE`, else `osm-system`). */
  readonly controllerNamespace?: string;
  /** Kubernetes mode: name of the CA Secret (default `trellis-ca`). */
  readonly caSecretName?: string;
  /** Kubernetes mode: name of the leader Lease (default `trellis-controller-leader`). */
  readonly leaseName?: string;
  /** Kubernetes mode: this replica's Lease holder identity (default `$POD_NAME`, else hostname and pid). */
  readonly replicaIdentity?: string;
  /** Kubernetes mode: how long a proxy whose pod is not in the store yet is held before it is refused, in ms. */
  readonly podIdentityGraceMs?: number;
  /**
   * Encoded configuration generated ahead at start-up, for the mesh's identities, in bytes
   * (default `DEFAULT_WARM_UP_CONFIGURATION_BYTES`, 64 MiB; 0: none). See `MeshController.warmUp`.
   */
  readonly warmUpConfigurationBytes?: number;
  /** Manifests mode: the largest manifest file read, in bytes (default 4 MiB); a larger one is a manifest error. */
  readonly maxManifestBytes?: number;
  /** Manifests mode: the most bytes of manifests loaded, all files together (default 64 MiB); a file past it is a manifest error. */
  readonly maxManifestsTotalBytes?: number;
  readonly logger?: Logger;
}

/** A running controller: its bound ports and a way to stop it. */
export interface RunningController {
  readonly xdsPort: number;
  readonly xdsPlaintextPort: number | undefined;
  readonly httpPort: number;
  readonly controller: MeshController;
  /** Kubernetes mode: the shared CA and the leader election. */
  readonly replica?: ReplicaCoordination;
  /**
   * Stops every part, in the reverse order of their start (the ADS server first, the operations
   * server last), each within a time bound (5 s); once: later calls return the same promise.
   * @throws StopError (from `controller/lifecycle.ts`) naming the parts that did not stop cleanly, after every part was stopped.
   */
  stop(): Promise<void>;
}

/**
 * Sends grpc-js's own log lines (which it writes to stderr as `E …` text by default) to `logger`,
 * as JSON: gRPC errors at `error`, its info and debug lines at `debug`. grpc-js's logger is one
 * per process: the last controller started in a process owns it.
 */
export function routeGrpcLogs(logger: Logger): void {
  const text = (message: unknown, rest: unknown[]): string => [message, ...rest].map((x) => (typeof x === 'string' ? x : String(x))).join(' ');
  grpc.setLogger({
    error: (message?: unknown, ...rest: unknown[]) => logger.error(text(message, rest)),
    info: (message?: unknown, ...rest: unknown[]) => logger.debug(text(message, rest)),
    debug: (message?: unknown, ...rest: unknown[]) => logger.debug(text(message, rest)),
  });
}

/** True for a loopback host: `localhost`, 127.0.0.0/8, `::1`. */
export function isLoopbackHost(host: string): boolean {
  if (host === 'localhost') return true;
  if (isIP(host) === 4) return host.startsWith('127.');
  return host === '::1';
}

/** The parts the operations server reports on, filled in as they start (it starts first). */
interface Parts {
  source?: ManifestsSource | KubernetesSource;
  kube?: KubernetesSource;
  /** The store the source fills (`/debug/pod-proxy` reads its Pods). */
  store?: ObjectStore;
  controller?: MeshController;
  cache?: SnapshotCache;
  ads?: AdsServer;
  /** The warm-up is over (done, failed or past {@link WARM_UP_LIMIT_MS}). */
  warm: boolean;
  /** Kubernetes mode: the policy status writer, told when a proxy's ACK state changes. */
  statusWriter?: { poke(): void };
}

/**
 * The composition root: assembles the parts — the operations server, in Kubernetes mode the
 * replica coordination (shared CA, leader election), the CA and certificate manager, the
 * store and its source (manifests or Kubernetes), the mesh controller, the warm-up, the ADS
 * server (mTLS, and plaintext when asked) — and starts them in that order through a
 * {@link Lifecycle}: a part that fails to start stops those started before it, in reverse order.
 * Resolves once the ADS and HTTP listeners are bound and, with manifests, the manifests are
 * loaded and the warm-up is over. `@kubernetes/client-node` is imported in Kubernetes mode only.
 * @throws Error when the plaintext address is not loopback without `insecureAllowRemote`, or
 *   not exactly one of `manifests` and `kubernetes` is given; `StartError` naming the part
 *   when one fails to start (the state directory's CA files are unusable, the manifests
 *   directory cannot be read, an address cannot be bound, no kubeconfig).
 */
export async function runController(options: ControllerOptions): Promise<RunningController> {
  const logger = options.logger ?? pino({ level: 'info' });
  routeGrpcLogs(logger.child({ component: 'grpc' }));
  checkOptions(options);
  const lifecycle = new Lifecycle({ onStopError: (part, err) => logger.error({ part, err: err.message }, 'a part of the controller did not stop cleanly') });
  const metrics = new Registry();
  collectDefaultMetrics({ register: metrics });
  const parts: Parts = { warm: false };
  const controllerNamespace = options.controllerNamespace ?? defaultControllerNamespace();

  // The operations server comes first: /healthz answers and /readyz says "not ready" while
  // the rest starts (in Kubernetes mode, possibly waiting for an unreachable API server).
  const ops = opsServer(options.meshName, parts, metrics, () => lifecycle.stopping, logger.child({ component: 'ops' }), options.httpAllowedHosts ?? []);
  const httpPort = await lifecycle.start('operations server', () => listen('--http-address', options.httpAddress, () => ops.start(options.httpAddress)), () => ops.stop());

  // Kubernetes mode: every replica shares the CA root (a Secret) and issues service certificates
  // deterministically, so a proxy gets the same configuration from any replica.
  const kubernetes = options.kubernetes && (await lifecycle.start('Kubernetes client', () => loadKubernetesMode(options.kubernetes?.kubeconfig)));
  const replica = kubernetes
    ? await lifecycle.start(
        'replica coordination',
        () => kubernetes.startReplicaCoordination({
          kubeConfig: kubernetes.kubeConfig,
          namespace: controllerNamespace,
          caSecretName: options.caSecretName,
          leaseName: options.leaseName,
          identity: options.replicaIdentity,
          logger: logger.child({ component: 'replica' }),
          signal: options.signal,
        }),
        (r) => r.stop(),
      )
    : undefined;
  const ca = replica?.ca ?? (await lifecycle.start('certificate authority', () => CertificateAuthority.loadOrCreate(options.stateDir)));
  const certificates = await lifecycle.start(
    'certificate manager',
    () => new CertificateManager({ ca, validitySeconds: options.certValiditySeconds, logger: logger.child({ component: 'certificate' }), deterministic: replica !== undefined }),
    (c) => c.stop(),
  );

  const store = new ObjectStore({ logger });
  // The Kubernetes source syncs in the background (/readyz says when); proxies wait for it.
  const source = newSource(options, store, kubernetes, logger);
  const kube = source instanceof ManifestsSource ? undefined : source;
  await lifecycle.start(kube ? 'Kubernetes source' : 'manifests source', async () => {
    try {
      await source.start();
    } catch (err) {
      await source.stop(); // what it started before failing (a watcher)
      throw err;
    }
  }, () => source.stop());
  Object.assign(parts, { source, kube, store });

  const cache = new SnapshotCache();
  const controller = await lifecycle.start('mesh controller', () => {
    const c = newMeshController(options, { store, certificates, cache, source, metrics, meshConfigNamespace: controllerNamespace, logger });
    c.start();
    return c;
  }, (c) => c.stop());
  Object.assign(parts, { controller, cache });

  // Ready once the known identities have their service certificates and configurations (bounded
  // wait): a mesh reconnecting all at once then gets its configuration without waiting for either.
  const warmUp = warmUpInBackground(controller, kube, options.warmUpConfigurationBytes, () => lifecycle.stopping, logger).finally(() => (parts.warm = true));

  const ads = newAdsServer(options, { cache, controller, kube, metrics, logger, changed: () => ops.events.changed(), syncChanged: () => {
    parts.statusWriter?.poke();
    ops.events.changed(); // the page's policy status: what a cached /debug/mesh answer must not outlive
  } });
  parts.ads = ads;
  // The ADS server's stop closes each of its listeners (the plaintext one too).
  const xdsPort = await lifecycle.start('ADS server', async () => {
    const serverCert = await certificates.issueServerCertificate({});
    return listen('--xds-address', options.xdsAddress, () => ads.start({
      address: options.xdsAddress,
      mutualTls: { caPem: certificates.caPem, certPem: serverCert.certPem, keyPem: serverCert.keyPem },
      authenticate: authenticateFromPeerCertificate,
    }));
  }, () => ads.stop(1000));
  const plaintextAddress = options.xdsPlaintextAddress;
  const xdsPlaintextPort = plaintextAddress
    ? await lifecycle.start('plaintext ADS listener', () => {
        logger.warn(
          { address: plaintextAddress },
          'plaintext ADS listener enabled: proxies are identified by node.id without any certificate; use it for proxyless gRPC clients and local tests only',
        );
        return listen('--xds-plaintext-address', plaintextAddress, () =>
          ads.start({ address: plaintextAddress, credentials: grpc.ServerCredentials.createInsecure(), authenticate: authenticateFromNodeId }),
        );
      })
    : undefined;

  if (kubernetes && replica) {
    parts.statusWriter = await lifecycle.start('policy status writer', () => startStatusWriter(kubernetes, { controller, ads, store, replica, logger }), (w) => w.stop());
  }

  // With manifests everything is known already: return once ready. A Kubernetes source may
  // take long to sync (an unreachable API server); /readyz tells when then.
  if (!kube) await warmUp;
  logger.info(
    { ...(options.manifests !== undefined ? { manifests: path.resolve(options.manifests) } : { kubernetes: true }), xdsPort, xdsPlaintextPort, httpPort, meshPage: meshPageUrl(options.httpAddress, httpPort), mesh: options.meshName, services: controller.snapshot.services.length },
    'controller started',
  );
  return { xdsPort, xdsPlaintextPort, httpPort, controller, replica, stop: () => lifecycle.stop() };
}

/** @throws Error when the plaintext ADS address is not loopback without `insecureAllowRemote`, or not exactly one of `manifests` and `kubernetes` is given. */
function checkOptions(options: ControllerOptions): void {
  if (options.xdsPlaintextAddress && !options.insecureAllowRemote && !isLoopbackHost(splitHostPort(options.xdsPlaintextAddress).host)) {
    throw new Error(
      `--xds-plaintext-address ${options.xdsPlaintextAddress} is not a loopback address: plaintext ADS trusts node.id; pass --insecure-allow-remote to allow it`,
    );
  }
  if ((options.manifests === undefined) === (options.kubernetes === undefined)) throw new Error('give exactly one of manifests and kubernetes');
}

/** Kubernetes mode's modules and kubeconfig (see {@link loadKubernetesMode}). */
type KubernetesMode = Awaited<ReturnType<typeof loadKubernetesMode>>;

/** The (stopped) source writing into `store`: the Kubernetes API server when `kubernetes` is given, else the manifests directory. */
function newSource(options: ControllerOptions, store: ObjectStore, kubernetes: KubernetesMode | undefined, logger: Logger): ManifestsSource | KubernetesSource {
  if (kubernetes) {
    return new kubernetes.KubernetesSource({
      store,
      kubeConfig: kubernetes.kubeConfig,
      meshName: options.meshName,
      logger: logger.child({ component: 'kubernetes' }),
      backoff: options.kubernetes?.backoff,
      watchTimeoutSeconds: options.kubernetes?.watchTimeoutSeconds,
    });
  }
  return new ManifestsSource({ dir: options.manifests ?? '', store, logger: logger.child({ component: 'manifests' }), maxFileBytes: options.maxManifestBytes, maxTotalBytes: options.maxManifestsTotalBytes });
}

/**
 * The push quiet period with a manifests directory, in ms: none. The source gives the store one
 * batch per rescan, after its own quiet period and the settle of what was just written, so the
 * files an editor or `git checkout` touches together are already one change. (Kubernetes watch
 * events come one object at a time: the controller's 100 ms quiet period merges them.)
 */
export const MANIFESTS_PUSH_QUIET_MS = 0;

/** The (stopped) mesh controller over the parts started before it. */
function newMeshController(
  options: ControllerOptions,
  parts: { store: ObjectStore; certificates: CertificateManager; cache: SnapshotCache; source: ManifestsSource | KubernetesSource; metrics: Registry; meshConfigNamespace: string; logger: Logger },
): MeshController {
  const { source } = parts;
  return new MeshController({
    store: parts.store,
    certificates: parts.certificates,
    cache: parts.cache,
    logger: parts.logger.child({ component: 'controller' }),
    metrics: parts.metrics,
    meshName: options.meshName,
    meshConfigNamespace: parts.meshConfigNamespace,
    meshConfigUnreadable: source instanceof ManifestsSource
      ? (wanted) => {
          const error = source.errorHiding('MeshConfig', wanted.namespace, wanted.name);
          return error && formatManifestError(error);
        }
      : undefined,
    resyncIntervalMs: options.resyncIntervalMs,
    debounceQuietMs: options.debounceQuietMs ?? (source instanceof ManifestsSource ? MANIFESTS_PUSH_QUIET_MS : undefined),
    verifyPodIdentity: !(source instanceof ManifestsSource),
    podIdentityGraceMs: options.podIdentityGraceMs,
    sourceSynced: () => source.synced,
  });
}

/** The ADS server (not listening yet) serving `cache`; a stream opened before a Kubernetes source's first sync waits for it. */
function newAdsServer(
  options: ControllerOptions,
  parts: { cache: SnapshotCache; controller: MeshController; kube: KubernetesSource | undefined; metrics: Registry; logger: Logger; changed: () => void; syncChanged: () => void },
): AdsServer {
  const { controller, kube } = parts;
  return new AdsServer({
    watcher: parts.cache,
    logger: parts.logger.child({ component: 'ads' }),
    metrics: parts.metrics,
    unreadTimeoutMs: options.xdsUnreadTimeoutMs,
    // The mesh page hears of each stream opened or closed, ACK and NACK (observedHooks).
    hooks: observedHooks({
      onStreamOpen: async (proxy, streamId, node) => {
        await kube?.whenSynced();
        return controller.onStreamOpen(proxy, streamId, node ?? null);
      },
      onStreamClose: (proxy, streamId) => controller.onStreamClose(proxy, streamId),
      onSyncChanged: () => parts.syncChanged(),
      // NACKs are logged by the ADS server (once, cut, rate-limited per proxy identity and type).
    }, parts.changed),
  });
}

/** Binds one listener; its error names the flag (the ADS server's own `cannot listen on ADDRESS: ` prefix dropped). */
async function listen<T>(flag: string, address: string, start: () => Promise<T>): Promise<T> {
  try {
    return await start();
  } catch (err) {
    const reason = err instanceof Error ? err.message.replace(/^cannot listen on \S+: /, '') : String(err);
    throw new Error(`cannot listen on ${flag} ${address}: ${reason}`);
  }
}

/**
 * Kubernetes mode's modules, imported here on demand (they import `@kubernetes/client-node`,
 * about 0.5 s to load, which manifests mode never needs), and the kubeconfig they use.
 * @throws Error when the kubeconfig cannot be loaded (see `loadKubeConfig`).
 */
async function loadKubernetesMode(kubeconfig: string | undefined) {
  const [{ KubernetesSource, loadKubeConfig }, { startReplicaCoordination }, { PolicyStatusWriter, statusPatcherFor }] = await Promise.all([
    import('./sources/kubernetes/kubernetes-source.js'),
    import('./controller/kubernetes-replica.js'),
    import('./controller/policy-status-writer.js'),
  ]);
  return { KubernetesSource, startReplicaCoordination, PolicyStatusWriter, statusPatcherFor, kubeConfig: loadKubeConfig(kubeconfig) };
}

/**
 * Kubernetes mode: starts writing the policy status of the objects whose CRD has a status
 * subresource (the leader only; `PolicyStatusWriter`), from the controller's status and the
 * store's copy of each object's status.
 */
function startStatusWriter(
  kubernetes: KubernetesMode,
  parts: { controller: MeshController; ads: AdsServer; store: ObjectStore; replica: ReplicaCoordination; logger: Logger },
): InstanceType<KubernetesMode['PolicyStatusWriter']> {
  const { controller, ads, store, replica } = parts;
  const writer = new kubernetes.PolicyStatusWriter({
    patch: kubernetes.statusPatcherFor(kubernetes.kubeConfig),
    statuses: (kinds) => controller.policyStatuses(ads.syncStates(), [], kinds),
    storedStatus: (kind, namespace, name) => store.get(kind, namespace, name)?.status,
    isLeader: () => replica.elector.isLeader,
    generation: () => controller.settledGeneration,
    logger: parts.logger.child({ component: 'policy-status' }),
  });
  store.onChange(() => writer.poke());
  writer.start();
  return writer;
}

/**
 * Runs the controller's warm-up (after a Kubernetes source's first sync) and logs what it
 * prepared; resolves when it is over or after {@link WARM_UP_LIMIT_MS} (the work goes on), never
 * rejects. Skipped when the controller is stopping by then.
 */
async function warmUpInBackground(controller: MeshController, kube: KubernetesSource | undefined, configurationBytes: number | undefined, stopping: () => boolean, logger: Logger): Promise<void> {
  try {
    await kube?.whenSynced();
    if (stopping()) return;
    const started = Date.now();
    const limit = new Promise<-1>((r) => setTimeout(() => r(-1), WARM_UP_LIMIT_MS).unref());
    const done = await Promise.race([controller.warmUp({ configurationBytes }), limit]);
    if (done === -1) logger.info({ ms: Date.now() - started }, 'certificates and configurations still being prepared ahead; ready meanwhile');
    else if (configurationBytes === 0) logger.info({ identities: done.identities, certificatesIssued: done.certificatesIssued, ms: Date.now() - started }, 'certificates issued ahead (configuration warm-up off)');
    else logger.info({ ...done, ms: Date.now() - started }, done.budgetReached ? 'certificates issued and configurations generated ahead, until --warm-up-config was used up' : 'certificates issued and configurations generated ahead');
  } catch (err) {
    logger.warn({ err: err instanceof Error ? err.message : String(err) }, 'nothing prepared ahead; certificates and configurations will be made on first connection');
  }
}

/** The operations server over `parts` (/readyz: ready once the source synced, the controller runs and the warm-up is over, until stopping). */
function opsServer(meshName: string, parts: Parts, metrics: Registry, stopping: () => boolean, logger: Logger, allowedHosts: readonly string[]): OpsServer {
  return new OpsServer(
    {
      ready: () => !stopping() && parts.source?.synced === true && parts.controller !== undefined && parts.warm,
      metrics,
      proxies: () => (parts.controller && parts.ads && parts.cache ? proxiesView(parts.controller, parts.ads, parts.cache) : []),
      configDump: (uuid) => {
        const { controller, cache } = parts;
        if (!controller || !cache || !controller.registry.get(uuid)) return undefined;
        const snapshot = cache.getSnapshot(uuid);
        return snapshot ? { proxy: uuid, ...configDump(snapshot) } : undefined;
      },
      policies: () => policiesView(meshName, parts),
      mesh: () => meshPageView(meshName, parts),
      meshVersion: () => {
        const errors = parts.source instanceof ManifestsSource ? `${parts.source.errors().length}:${parts.source.warnings().length}` : '';
        return `${parts.controller?.snapshot.generation ?? 0}:${errors}`;
      },
      explain: (params) => explainView(parts, params),
      podProxy: (namespace, pod) =>
        parts.store && parts.controller ? podProxy(parts.store, parts.controller.registry.proxies(), namespace, pod) : { status: 404, error: 'the controller is starting' },
      policyStatus: (kind, namespace, name) => policyStatusView(parts, kind, namespace, name),
    },
    logger,
    {},
    {},
    { allowedHosts },
  );
}

/** The mesh page's URL on the operations server (`http://HOST:PORT/`; an IPv6 host in brackets). */
function meshPageUrl(httpAddress: string, port: number): string {
  const { host } = splitHostPort(httpAddress);
  return `http://${host.includes(':') ? `[${host}]` : host}:${port}/`;
}

/** The `/debug/mesh` view (the mesh page's): see `meshView`; policy status from {@link policiesView}'s `status` when it has one. */
function meshPageView(meshName: string, parts: Parts): unknown {
  const { controller, source, ads, cache } = parts;
  if (!controller || !source) return { meshName, starting: true };
  const manifests = source instanceof ManifestsSource ? source : undefined;
  return meshView({
    snapshot: controller.snapshot,
    meshIdentities: controller.meshIdentities(),
    connected: controller.registry.connected(),
    streams: ads?.streams() ?? [],
    snapshotOf: (uuid) => cache?.getSnapshot(uuid),
    policies: policiesView(meshName, parts),
    manifestErrors: manifests?.errors().map(formatManifestError) ?? [],
    manifestWarnings: manifests?.warnings().length ?? 0,
    policyProblems: controller.policyProblems().map(formatProblem),
    validationFailures: controller.validationFailures().map((f) => `${f.proxy.identity} (${f.proxy.uuid}): ${f.violations.map(formatViolation).join('; ')}`),
  });
}

/** The `/debug/explain` answer from the controller's current MeshSnapshot and store (503 while starting). */
function explainView({ controller, store }: Parts, params: URLSearchParams): { status: number; body: unknown } {
  if (!controller || !store) return { status: 503, body: { error: 'the controller is starting' } };
  return explainResponse(controller.snapshot, store, params);
}

/** The `/debug/policies` view: the mesh's policies, the problems found in them and the sources' state. */
function policiesView(meshName: string, parts: Parts): unknown {
  const { controller, source, kube } = parts;
  if (!controller || !source) return { meshName, starting: true };
  const snapshot = controller.snapshot;
  return {
    meshName,
    settings: snapshot.settings,
    meshConfig: snapshot.meshConfig ?? null,
    generation: snapshot.generation,
    trafficTargets: snapshot.trafficTargets,
    trafficSplits: snapshot.trafficSplits,
    ingressBackends: snapshot.ingressBackends,
    egressPolicies: snapshot.egressPolicies,
    retryPolicies: snapshot.retryPolicies,
    upstreamTrafficSettings: snapshot.upstreamTrafficSettings,
    configValidationFailures: controller.validationFailures().map((f) => ({
      proxy: f.proxy.uuid,
      identity: f.proxy.identity,
      violations: f.violations.map(formatViolation),
    })),
    problems: controller.policyProblems().map((p) => ({ ...p, text: formatProblem(p) })),
    status: parts.ads ? controller.policyStatuses(parts.ads.syncStates(), sourceErrors(source)) : [],
    manifestErrors: source instanceof ManifestsSource ? source.errors().map((e) => ({ ...e, text: formatManifestError(e) })) : [],
    manifestWarnings: source instanceof ManifestsSource ? source.warnings().map((e) => ({ ...e, text: formatManifestError(e) })) : [],
    ...(kube ? { kubernetes: kube.status() } : {}),
  };
}

/** The source's errors that name an object (manifests mode), formatted, for the policy status. */
function sourceErrors(source: ManifestsSource | KubernetesSource): ObjectError[] {
  return source instanceof ManifestsSource ? source.errors().map((e) => ({ ...e, text: formatManifestError(e) })) : [];
}

/** The `/debug/policy-status` view of one policy object; undefined when there is none (or the controller is starting). */
function policyStatusView({ controller, source, ads }: Parts, kind: string, namespace: string, name: string): unknown {
  if (!controller || !source || !ads || !isPolicyKind(kind)) return undefined;
  return controller.policyStatusOf(kind, namespace, name, ads.syncStates(), sourceErrors(source));
}

/**
 * The `/debug/proxies` view: each connected proxy with its streams and per-type xDS state, and
 * whether it has its latest snapshot of each type (`state`: synced, stale, nacked; see `typeSync`).
 */
function proxiesView(controller: MeshController, ads: AdsServer, cache: SnapshotCache): unknown {
  const streams = ads.streams();
  return controller.registry.connected().map((c) => ({
    uuid: c.proxy.uuid,
    identity: c.proxy.identity,
    commonName: c.proxy.commonName,
    clientType: c.proxy.clientType ?? 'envoy',
    connectedSince: c.connectedSince.toISOString(),
    streams: streams
      .filter((s) => s.proxy.uuid === c.proxy.uuid)
      .map((s) => ({
        streamId: s.streamId,
        listener: s.listener,
        mode: s.mode,
        connectedAt: s.connectedAt.toISOString(),
        types: Object.fromEntries(
          s.types.map((t) => [
            t.type,
            {
              versionAcked: t.versionAcked ?? null,
              lastVersionSent: t.lastVersionSent ?? null,
              resourceNames: t.wildcard ? '*' : t.resourceNames,
              resourceNameCount: t.resourceNameCount,
              lastNack: t.lastNack ? { ...t.lastNack, at: t.lastNack.at.toISOString() } : null,
              ...typeSync(t, s.mode, cache.getSnapshot(c.proxy.uuid)),
            },
          ]),
        ),
      })),
  }));
}
