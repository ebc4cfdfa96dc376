/**
 * Admission of proxy streams: the UUID check and registration, the pod identity check, the
 * claimed-identity rule, the connect and disconnect log lines, and the first configuration.
 */
import type { Logger } from 'pino';
import type { Counter } from 'prom-client';
import type { Timers } from '../messaging/debouncer.js';
import { withClientType, type NodeSoftware } from '../proxy/client-type.js';
import { ProxyRefusedError } from '../proxy/refusal.js';
import type { ProxyRegistry } from '../proxy/registry.js';
import { identityParts, type Proxy, type ServiceIdentity } from '../proxy/types.js';
import { RateLimiter } from '../util/rate-limit.js';
import type { SnapshotCache } from '../xds/cache/snapshot-cache.js';
import { awaitProxyPod, DEFAULT_POD_IDENTITY_GRACE_MS } from './pod-identity.js';

/** Connect and disconnect lines logged at info level per identity and kind per {@link PROXY_LOG_WINDOW_MS}. */
export const PROXY_LOG_LIMIT = 10;
/** Window of {@link PROXY_LOG_LIMIT}, in ms. */
export const PROXY_LOG_WINDOW_MS = 60_000;

/** What {@link ProxyAdmission} works with. */
export interface AdmissionInputs {
  readonly registry: ProxyRegistry;
  readonly cache: Pick<SnapshotCache, 'getSnapshot' | 'clearSnapshot'>;
  /** Where pods are looked up (and waited for, see `awaitProxyPod`). */
  readonly store: Parameters<typeof awaitProxyPod>[0];
  readonly logger: Logger;
  readonly timers: Timers;
  /** Mesh name, for messages. */
  readonly meshName: string;
  /** Refuse a proxy unless its pod checks out (`awaitProxyPod`): Kubernetes mode. */
  readonly verifyPodIdentity: boolean;
  /** How long a proxy whose pod is not in the store yet is held before it is refused, in ms (default {@link DEFAULT_POD_IDENTITY_GRACE_MS}). */
  readonly podIdentityGraceMs?: number;
  /** `trellis_proxy_refusals_total{reason}`. */
  readonly refusals: Counter<'reason'>;
  /** Runs a pending push, if any, so that a proxy is configured from the current MeshSnapshot. */
  readonly settle: () => Promise<void>;
  /** The identities of the current MeshSnapshot. */
  readonly meshIdentities: () => ReadonlySet<ServiceIdentity>;
  /** The monitored namespaces of the current MeshSnapshot. */
  readonly meshNamespaces: () => ReadonlySet<string>;
  /**
   * Generates and publishes the proxy's first configuration.
   * @returns false when that failed.
   */
  readonly configure: (proxy: Proxy) => Promise<boolean>;
}

/**
 * Admits proxy streams. Admission is atomic: the UUID check and the registration happen before
 * anything is awaited, so of two streams of one UUID and two identities only the first is
 * registered, whatever runs between (a pending push, the pod check). A stream that closes while
 * it waits is unregistered by {@link close} and gets nothing. A proxy whose identity is only
 * claimed (not `verified`, the plaintext listener) is refused unless its identity is in the mesh.
 */
export class ProxyAdmission {
  private readonly logLimit = new RateLimiter(PROXY_LOG_LIMIT, PROXY_LOG_WINDOW_MS, () => performance.now(), 10_000);

  constructor(private readonly inputs: AdmissionInputs) {}

  /**
   * A proxy's stream opened: registers it and gives it its first configuration. `node` (the
   * first request's) decides the configuration format (`withClientType`).
   * @throws ProxyRefusedError when the proxy is refused (UUID held by another identity, pod
   *   identity check, claimed identity outside the mesh); Error when its configuration cannot
   *   be generated. Either way the stream is unregistered.
   */
  async open(connected: Proxy, streamId: number, node?: NodeSoftware | null): Promise<void> {
    const { registry, cache } = this.inputs;
    const proxy = node === undefined ? connected : withClientType(connected, node);
    const existing = registry.get(proxy.uuid);
    if (existing && existing.proxy.identity !== proxy.identity) {
      // Proxies are keyed by UUID: a second identity under the same UUID would be served the
      // first one's configuration (and service certificate). Refuse it.
      this.inputs.refusals.inc({ reason: 'uuid_conflict' });
      throw new ProxyRefusedError('uuid_conflict', `proxy UUID ${proxy.uuid} is already connected as ${existing.proxy.identity}; refusing ${proxy.identity}`);
    }
    registry.register(proxy, streamId, new Date(this.inputs.timers.now()));
    try {
      await this.admit(proxy, streamId);
    } catch (err) {
      // Refused or failed: the reservation goes at once (the ADS server's onStreamClose finds nothing more to do).
      if (registry.unregister(proxy.uuid, streamId) === 0) cache.clearSnapshot(proxy.uuid);
      throw err;
    }
  }

  /** The part of {@link open} after the reservation: checks, first push, first snapshot. */
  private async admit(proxy: Proxy, streamId: number): Promise<void> {
    const { inputs } = this;
    const refuse = (reason: string, message: string): never => {
      inputs.refusals.inc({ reason });
      throw new ProxyRefusedError(reason, `proxy ${proxy.uuid} refused: ${message}`);
    };
    if (inputs.verifyPodIdentity) {
      const check = await awaitProxyPod(inputs.store, proxy, { graceMs: inputs.podIdentityGraceMs ?? DEFAULT_POD_IDENTITY_GRACE_MS, timers: inputs.timers });
      if (!check.ok) refuse(check.reason, check.message);
    }
    // A proxy connecting while a push is pending (right after a source synced, or in a burst
    // of changes) would get configuration from the stale MeshSnapshot: run the push first.
    await inputs.settle();
    if (!inputs.registry.get(proxy.uuid)?.streamIds.has(streamId)) return; // the stream closed meanwhile
    const { namespace, serviceAccount } = identityParts(proxy.identity);
    const inMesh = inputs.meshIdentities().has(proxy.identity);
    if (!proxy.verified && !inMesh) {
      refuse('identity_not_in_mesh', `identity ${proxy.identity} (claimed in node.id, not proven by a certificate) is not in mesh ${inputs.meshName}`);
    }
    const log = this.log(proxy.identity, 'connected');
    log.info({ proxy: proxy.uuid, identity: proxy.identity, clientType: proxy.clientType ?? 'envoy', verified: proxy.verified === true, streamId }, 'proxy connected');
    if (!proxy.verified && proxy.clientType !== 'grpc') {
      log.warn(
        { proxy: proxy.uuid, identity: proxy.identity },
        'sidecar with a claimed identity (plaintext listener): served without its service certificate, so its mTLS does not work; connect it to the mTLS listener',
      );
    }
    if (!inMesh) {
      // Served all the same (its certificate is the mesh's), but most likely a mistake: say so.
      log.warn(
        { proxy: proxy.uuid, identity: proxy.identity },
        inputs.meshNamespaces().has(namespace)
          ? `proxy of an unknown identity: no ServiceAccount ${serviceAccount} in namespace ${namespace}; it reaches only what policies naming it allow`
          : `proxy of an identity outside the mesh: namespace ${namespace} is not monitored by mesh ${inputs.meshName}; it reaches only what policies naming it allow`,
      );
    }
    const ok = await inputs.configure(proxy);
    if (!ok && !inputs.cache.getSnapshot(proxy.uuid)) throw new Error(`no configuration could be generated for proxy ${proxy.uuid}`);
  }

  /**
   * A proxy's stream closed: unregisters it and logs it.
   * @returns how many streams of that proxy remain (0 = it is gone from the registry).
   */
  close(proxy: Proxy, streamId: number): number {
    const remaining = this.inputs.registry.unregister(proxy.uuid, streamId);
    this.log(proxy.identity, 'disconnected').info({ proxy: proxy.uuid, identity: proxy.identity, streamId }, 'proxy disconnected');
    return remaining;
  }

  /**
   * The logger for a proxy's connect or disconnect lines: the controller's, at most
   * {@link PROXY_LOG_LIMIT} times per identity and kind per {@link PROXY_LOG_WINDOW_MS}; past
   * that, one whose lines go to debug level (a reconnect loop must not fill the log).
   */
  private log(identity: string, kind: 'connected' | 'disconnected'): Pick<Logger, 'info' | 'warn'> {
    const { logger } = this.inputs;
    if (this.logLimit.take(`${identity}\n${kind}`) !== undefined) return logger;
    const debug = logger.debug.bind(logger);
    return { info: debug, warn: debug };
  }
}
