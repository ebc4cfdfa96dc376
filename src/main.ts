import * as grpc from '@grpc/grpc-js';
import { isIP } from 'node:net';
import path from 'node:path';
import pino, { type Logger } from 'pino';
import { collectDefaultMetrics, Registry } from 'prom-client';
import { formatProblem } from './catalog/problems.js';
import { formatViolation } from './envoy/validate/index.js';
import { CertificateAuthority } from './certificate/authority.js';
import { CertificateManager } from './certificate/manager.js';
import { defaultControllerNamespace, startReplicaCoordination, type ReplicaCoordination } from './controller/kubernetes-replica.js';
import { MeshController } from './controller/mesh-controller.js';
import { configDump } from './debug/config-dump.js';
import { OpsServer } from './debug/ops-server.js';
import { KubernetesSource, loadKubeConfig } from './sources/kubernetes/kubernetes-source.js';
import type { BackoffOptions } from './sources/kubernetes/reflector.js';
import { ManifestsSource } from './sources/manifests/manifests-source.js';
import { formatManifestError } from './sources/manifests/parse.js';
import { ObjectStore } from './store/object-store.js';
import { SnapshotCache } from './xds/cache/snapshot-cache.js';
import { AdsServer, authenticateFromNodeId, authenticateFromPeerCertificate } from './xds/server/ads-server.js';
import { splitHostPort } from './util/address.js';

/**
 * Longest /readyz waits at start-up for the mesh's identities to get their service certificates
 * and configurations ahead, in ms ({@link MeshController.warmUp}); the work goes on after it.
 */
export const WARM_UP_LIMIT_MS = 30_000;

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
  /** Periodic resync interval, in ms. */
  readonly resyncIntervalMs: number;
  /** An ADS stream whose response stays unread this long (ms) is closed (default 30 s; 0: never). See `AdsServerOptions.unreadTimeoutMs`. */
  readonly xdsUnreadTimeoutMs?: number;
  /** Validity of service certificates when no MeshConfig says otherwise, in seconds. */
  readonly certValiditySeconds?: number;
  /** Push debounce quiet period, in ms. */
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
  /** Stops every listener, watcher and timer. */
  stop(): Promise<void>;
}

/** The error for an address that cannot be bound, naming the flag (the ADS server's own `cannot listen on ADDRESS: ` prefix dropped). */
function listenError(flag: string, address: string, err: unknown): Error {
  const reason = err instanceof Error ? err.message.replace(/^cannot listen on \S+: /, '') : String(err);
  return new Error(`cannot listen on ${flag} ${address}: ${reason}`);
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

/**
 * The composition root: builds the store, the manifests source, the CA and certificate
 * manager, the mesh controller, the ADS server (mTLS, and plaintext when asked) and the
 * operations server, and starts them. Resolves once the ADS and HTTP listeners are bound and
 * the manifests are loaded.
 * @throws Error when the plaintext address is not loopback without `insecureAllowRemote`,
 *   the state directory's CA files are unusable, the manifests directory cannot be read, or
 *   an address cannot be bound.
 */
export async function runController(options: ControllerOptions): Promise<RunningController> {
  const logger = options.logger ?? pino({ level: 'info' });
  routeGrpcLogs(logger.child({ component: 'grpc' }));
  if (options.xdsPlaintextAddress && !options.insecureAllowRemote && !isLoopbackHost(splitHostPort(options.xdsPlaintextAddress).host)) {
    throw new Error(
      `--xds-plaintext-address ${options.xdsPlaintextAddress} is not a loopback address: plaintext ADS trusts node.id; pass --insecure-allow-remote to allow it`,
    );
  }
  if ((options.manifests === undefined) === (options.kubernetes === undefined)) throw new Error('give exactly one of manifests and kubernetes');
  const metrics = new Registry();
  collectDefaultMetrics({ register: metrics });

  // The operations server comes first: /healthz answers and /readyz says "not ready" while
  // the rest starts (in Kubernetes mode, possibly waiting for an unreachable API server).
  const parts: {
    controller?: MeshController;
    ads?: AdsServer;
    cache?: SnapshotCache;
    source?: { synced: boolean };
    kube?: KubernetesSource;
    warm?: boolean;
  } = {};
  const ops = new OpsServer(
    {
      ready: () => parts.source?.synced === true && parts.controller !== undefined && parts.warm === true,
      metrics,
      proxies: () => (parts.controller && parts.ads ? proxiesView(parts.controller, parts.ads) : []),
      configDump: (uuid) => {
        const { controller, cache } = parts;
        if (!controller || !cache || !controller.registry.get(uuid)) return undefined;
        const snapshot = cache.getSnapshot(uuid);
        return snapshot ? { proxy: uuid, ...configDump(snapshot) } : undefined;
      },
      policies: () => {
        const { controller, source, kube } = parts;
        if (!controller || !source) return { meshName: options.meshName, starting: true };
        return {
        meshName: options.meshName,
        settings: controller.snapshot.settings,
        meshConfig: controller.snapshot.meshConfig ?? null,
        generation: controller.snapshot.generation,
        trafficTargets: controller.snapshot.trafficTargets,
        trafficSplits: controller.snapshot.trafficSplits,
        ingressBackends: controller.snapshot.ingressBackends,
        egressPolicies: controller.snapshot.egressPolicies,
        retryPolicies: controller.snapshot.retryPolicies,
        upstreamTrafficSettings: controller.snapshot.upstreamTrafficSettings,
        configValidationFailures: controller.validationFailures().map((f) => ({
          proxy: f.proxy.uuid,
          identity: f.proxy.identity,
          violations: f.violations.map(formatViolation),
        })),
        problems: controller.policyProblems().map((p) => ({ ...p, text: formatProblem(p) })),
        manifestErrors: source instanceof ManifestsSource ? source.errors().map((e) => ({ ...e, text: formatManifestError(e) })) : [],
        manifestWarnings: source instanceof ManifestsSource ? source.warnings().map((e) => ({ ...e, text: formatManifestError(e) })) : [],
        ...(kube ? { kubernetes: kube.status() } : {}),
        };
      },
    },
    logger.child({ component: 'ops' }),
  );
  let httpPort: number;
  try {
    httpPort = await ops.start(options.httpAddress);
  } catch (err) {
    throw listenError('--http-address', options.httpAddress, err);
  }

  // Kubernetes mode: every replica shares the CA root (a Secret) and issues service certificates
  // deterministically, so a proxy gets the same configuration from any replica.
  // Until `stop` exists below, a failure must at least close the operations server.
  const orStopOps = async <T>(step: Promise<T>): Promise<T> => {
    try {
      return await step;
    } catch (err) {
      await ops.stop();
      throw err;
    }
  };
  const replica = options.kubernetes
    ? await orStopOps(startReplicaCoordination({
        kubeConfig: loadKubeConfig(options.kubernetes.kubeconfig),
        namespace: options.controllerNamespace ?? defaultControllerNamespace(),
        caSecretName: options.caSecretName,
        leaseName: options.leaseName,
        identity: options.replicaIdentity,
        logger: logger.child({ component: 'replica' }),
      }))
    : undefined;
  const ca = replica?.ca ?? (await orStopOps(CertificateAuthority.loadOrCreate(options.stateDir)));
  const certificates = new CertificateManager({
    ca,
    validitySeconds: options.certValiditySeconds,
    logger: logger.child({ component: 'certificate' }),
    deterministic: replica !== undefined,
  });
  const store = new ObjectStore({ logger });
  // The Kubernetes source syncs in the background (/readyz says when); proxies wait for it.
  const kube = options.kubernetes
    ? new KubernetesSource({
        store,
        kubeConfig: loadKubeConfig(options.kubernetes.kubeconfig),
        meshName: options.meshName,
        logger: logger.child({ component: 'kubernetes' }),
        backoff: options.kubernetes.backoff,
        watchTimeoutSeconds: options.kubernetes.watchTimeoutSeconds,
      })
    : undefined;
  const source = kube ?? new ManifestsSource({ dir: options.manifests ?? '', store, logger: logger.child({ component: 'manifests' }), maxFileBytes: options.maxManifestBytes, maxTotalBytes: options.maxManifestsTotalBytes });
  parts.source = source;
  parts.kube = kube;
  await orStopOps(Promise.resolve(source.start()));

  const cache = new SnapshotCache();
  const controller = new MeshController({
    store,
    certificates,
    cache,
    logger: logger.child({ component: 'controller' }),
    metrics,
    meshName: options.meshName,
    meshConfigNamespace: options.controllerNamespace ?? defaultControllerNamespace(),
    meshConfigUnreadable: source instanceof ManifestsSource
      ? (wanted) => {
          const error = source.errorHiding('MeshConfig', wanted.namespace, wanted.name);
          return error && formatManifestError(error);
        }
      : undefined,
    resyncIntervalMs: options.resyncIntervalMs,
    debounceQuietMs: options.debounceQuietMs,
    verifyPodIdentity: options.kubernetes !== undefined,
    podIdentityGraceMs: options.podIdentityGraceMs,
  });
  controller.start();
  parts.controller = controller;
  parts.cache = cache;
  // Ready once the known identities have their service certificates and configurations (bounded
  // wait): a mesh reconnecting all at once then gets its configuration without waiting for either.
  const warmUp = (async () => {
    try {
      await kube?.whenSynced();
      const started = Date.now();
      const limit = new Promise<-1>((r) => setTimeout(() => r(-1), WARM_UP_LIMIT_MS).unref());
      const done = await Promise.race([controller.warmUp({ configurationBytes: options.warmUpConfigurationBytes }), limit]);
      if (done === -1) logger.info({ ms: Date.now() - started }, 'certificates and configurations still being prepared ahead; ready meanwhile');
      else if (options.warmUpConfigurationBytes === 0) logger.info({ identities: done.identities, certificatesIssued: done.certificatesIssued, ms: Date.now() - started }, 'certificates issued ahead (configuration warm-up off)');
      else logger.info({ ...done, ms: Date.now() - started }, done.budgetReached ? 'certificates issued and configurations generated ahead, until --warm-up-config was used up' : 'certificates issued and configurations generated ahead');
    } catch (err) {
      logger.warn({ err: err instanceof Error ? err.message : String(err) }, 'nothing prepared ahead; certificates and configurations will be made on first connection');
    } finally {
      parts.warm = true;
    }
  })();

  const ads = new AdsServer({
    watcher: cache,
    logger: logger.child({ component: 'ads' }),
    metrics,
    unreadTimeoutMs: options.xdsUnreadTimeoutMs,
    hooks: {
      onStreamOpen: async (proxy, streamId, node) => {
        await kube?.whenSynced();
        return controller.onStreamOpen(proxy, streamId, node ?? null);
      },
      onStreamClose: (proxy, streamId) => controller.onStreamClose(proxy, streamId),
      // NACKs are logged by the ADS server (once, cut, rate-limited per proxy identity and type).
    },
  });
  parts.ads = ads;
  const stop = async (): Promise<void> => {
    controller.stop();
    await ads.stop(1000);
    await ops.stop();
    await source.stop();
    certificates.stop();
    await replica?.stop();
  };
  const listen = async <T>(flag: string, address: string, start: () => Promise<T>): Promise<T> => {
    try {
      return await start();
    } catch (err) {
      await stop();
      throw listenError(flag, address, err);
    }
  };

  const serverCert = await certificates.issueServerCertificate({});
  const xdsPort = await listen('--xds-address', options.xdsAddress, () => ads.start({
    address: options.xdsAddress,
    mutualTls: { caPem: certificates.caPem, certPem: serverCert.certPem, keyPem: serverCert.keyPem },
    authenticate: authenticateFromPeerCertificate,
  }));
  let xdsPlaintextPort: number | undefined;
  if (options.xdsPlaintextAddress) {
    logger.warn(
      { address: options.xdsPlaintextAddress },
      'plaintext ADS listener enabled: proxies are identified by node.id without any certificate; use it for proxyless gRPC clients and local tests only',
    );
    const address = options.xdsPlaintextAddress;
    xdsPlaintextPort = await listen('--xds-plaintext-address', address, () =>
      ads.start({ address, credentials: grpc.ServerCredentials.createInsecure(), authenticate: authenticateFromNodeId }),
    );
  }

  // With manifests everything is known already: return once ready. A Kubernetes source may
  // take long to sync (an unreachable API server); /readyz tells when then.
  if (!kube) await warmUp;
  logger.info(
    { ...(options.manifests !== undefined ? { manifests: path.resolve(options.manifests) } : { kubernetes: true }), xdsPort, xdsPlaintextPort, httpPort, mesh: options.meshName, services: controller.snapshot.services.length },
    'controller started',
  );

  return {
    xdsPort,
    xdsPlaintextPort,
    httpPort,
    controller,
    replica,
    stop,
  };
}

/** The `/debug/proxies` view: each connected proxy with its streams and per-type xDS state. */
function proxiesView(controller: MeshController, ads: AdsServer): unknown {
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
            },
          ]),
        ),
      })),
  }));
}
