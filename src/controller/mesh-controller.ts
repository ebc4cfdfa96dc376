import type { Logger } from 'pino';
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { TYPE_SHORT_NAME, TypeUrl } from '../api/type-urls.js';
import { buildMeshSnapshot, DEFAULT_MESH_CONFIG } from '../catalog/build-snapshot.js';
import { diffMeshSnapshots, onlyEndpointsChanged, onlySplitWeightsChanged, type MeshChange } from '../catalog/snapshot-diff.js';
import { serviceKey } from '../catalog/names.js';
import { sharedClusterLoadAssignment } from '../envoy/eds/eds.js';
import { formatProblem, type PolicyProblem } from '../catalog/problems.js';
import type { MeshService, MeshSnapshot } from '../catalog/types.js';
import type { CertificateManager } from '../certificate/manager.js';
import { affectedBy } from '../envoy/dependencies.js';
import { GenerationContext, proxyProfile } from '../envoy/context.js';
import { generateProxyRouteConfigurations } from '../envoy/generate.js';
import { encodeResources, generateConfiguration, type EncodedConfiguration } from './configuration.js';
import { formatViolation, ResourceCheckCache, validateProxyResources, type Violation } from '../envoy/validate/index.js';
import { Debouncer, type Timers, REAL_TIMERS } from '../messaging/debouncer.js';
import { withClientType, type NodeSoftware } from '../proxy/client-type.js';
import { ProxyRefusedError } from '../proxy/refusal.js';
import { ProxyRegistry } from '../proxy/registry.js';
import { RateLimiter } from '../util/rate-limit.js';
import { awaitProxyPod, DEFAULT_POD_IDENTITY_GRACE_MS } from './pod-identity.js';
import { identityParts, parseCommonName, proxyCommonName, serviceIdentity, type Proxy, type ServiceIdentity } from '../proxy/types.js';
import type { ObjectChange, StoreReader } from '../store/store.js';
import { buildProxySnapshot, replaceResources, type NamedResource as EncodedNamedResource, type SnapshotCache } from '../xds/cache/snapshot-cache.js';
import type { ProxySnapshot } from '../xds/cache/types.js';

/** Longest stretch of proxy generation between two yields to the event loop during a push, in ms. */
export const PUSH_SLICE_MS = 20;

/** One computation of a configuration, shared by the proxies of one identity and client type. */
interface GeneratedConfig {
  readonly violations: readonly Violation[];
  /** `CDS name`, `LDS name`, … of the resources left out of {@link validSnapshot}. */
  readonly dropped: readonly string[];
  /** Everything, encoded; undefined when there are violations. */
  readonly snapshot: ProxySnapshot | undefined;
  /** The valid subset, encoded, when there are violations. */
  readonly validSnapshot: ProxySnapshot | undefined;
  /** The services this configuration was generated from (`proxyDependencies`). */
  readonly dependencies: ReadonlySet<string>;
  /** The proxy it was generated for (its identity and client type are what it depends on). */
  readonly proxy: Proxy;
  /** Generated ahead by {@link MeshController.warmUp}, within its budget. */
  ahead: boolean;
}

/** Why a push happens; merged by the debouncer into one {@link PushRequest}. */
export interface PushRequest {
  /** Objects changed since the last push: the MeshSnapshot must be rebuilt. */
  readonly configChanged: boolean;
  /** The periodic resync asked for it. */
  readonly resync: boolean;
  /** Identities whose certificates rotated (only their proxies need new SDS). */
  readonly rotated: ReadonlySet<ServiceIdentity>;
  /** Kinds of the changed objects, for logs. */
  readonly kinds: ReadonlySet<string>;
  /** When the earliest merged event happened (`Timers.now()`, ms): the push logs how long it waited. */
  readonly firstEventAt: number;
}

/** Merges two push requests: the union of their reasons (nothing is dropped). */
export function mergePushRequests(a: PushRequest | undefined, b: PushRequest): PushRequest {
  if (!a) return b;
  return {
    configChanged: a.configChanged || b.configChanged,
    resync: a.resync || b.resync,
    rotated: new Set([...a.rotated, ...b.rotated]),
    kinds: new Set([...a.kinds, ...b.kinds]),
    firstEventAt: Math.min(a.firstEventAt, b.firstEventAt),
  };
}

/** Options of {@link MeshController}. */
export interface MeshControllerOptions {
  readonly store: StoreReader & { onChange(listener: (changes: readonly ObjectChange[]) => void): () => void };
  readonly certificates: CertificateManager;
  readonly cache: SnapshotCache;
  readonly logger: Logger;
  readonly metrics: Registry;
  /** Mesh name matched against namespaces' `openservicemesh.io/monitored-by` label. */
  readonly meshName: string;
  /** Namespace of the MeshConfig `osm-mesh-config` the controller reads (default `osm-system`). */
  readonly meshConfigNamespace?: string;
  /**
   * The source's error that may hide the MeshConfig `wanted` (an invalid document of it, a file
   * that could not be parsed), formatted, or undefined (see `BuildOptions.meshConfigUnreadable`).
   */
  readonly meshConfigUnreadable?: (wanted: { readonly namespace: string; readonly name: string }) => string | undefined;
  /** Quiet period of the push debouncer, in ms (default 100). */
  readonly debounceQuietMs?: number;
  /** Longest a change waits for a push, in ms (default 1000). */
  readonly debounceMaxDelayMs?: number;
  /** Interval of the periodic resync, in ms (default 60 000); 0 turns it off. MeshConfig `sidecar.configResyncInterval` overrides it. */
  readonly resyncIntervalMs?: number;
  readonly timers?: Timers;
  /**
   * Kubernetes mode: refuse a proxy unless a Running pod in its certificate's namespace has the label
   * `osm-proxy-uuid=<uuid>` and runs as the certificate's service account (see `checkProxyPod`).
   * Off in manifests mode, where there are no live pods.
   */
  readonly verifyPodIdentity?: boolean;
  /** How long a proxy whose pod is not in the store yet is held before it is refused, in ms (default {@link DEFAULT_POD_IDENTITY_GRACE_MS}). */
  readonly podIdentityGraceMs?: number;
}

/** Default of {@link WarmUpOptions.configurationBytes}: 64 MiB of encoded configuration. */
export const DEFAULT_WARM_UP_CONFIGURATION_BYTES = 64 * 1024 * 1024;

/** The UUID of the stand-in proxy configurations are generated for ahead (generation does not read it). */
const WARM_UP_UUID = '00000000-0000-4000-8000-000000000000';

/** Options of {@link MeshController.warmUp}. */
export interface WarmUpOptions {
  /** Identities worked on at once (default 4). */
  readonly concurrency?: number;
  /**
   * Budget of encoded configuration generated ahead, in bytes (default
   * {@link DEFAULT_WARM_UP_CONFIGURATION_BYTES}): no identity is started once this much is
   * generated (the last one may pass it); 0 issues certificates only.
   */
  readonly configurationBytes?: number;
}

/** What {@link MeshController.warmUp} did. */
export interface WarmUpResult {
  /** Identities of the mesh. */
  readonly identities: number;
  readonly certificatesIssued: number;
  readonly configurationsGenerated: number;
  /** Encoded size of the configurations generated, in bytes. */
  readonly configurationBytes: number;
  /** Some identities got no configuration ahead: the budget was used up first. */
  readonly budgetReached: boolean;
}

/** The kind of a proxy: its identity, client type and whether it is verified, which are all its configuration depends on. */
function proxyKind(proxy: Proxy): string {
  return `${proxy.identity}|${proxy.clientType ?? 'envoy'}|${proxy.verified === true ? 'verified' : 'claimed'}`;
}

/** Whether `proxy` is given its identity's service certificate and key: a verified sidecar only (never a claimed identity, never a proxyless client, which has no SDS). */
function getsServiceCertificate(proxy: Proxy): boolean {
  return proxy.verified === true && proxy.clientType !== 'grpc';
}

/** The memo key of a configuration: proxies of one kind, with one certificate, share it. */
function memoKey(proxy: Proxy, certificateSerial: string): string {
  return `${proxyKind(proxy)}|${certificateSerial}`;
}

/** What the controller remembers of a configuration: its snapshot (or the valid subset's) built from the encodings. */
function generatedConfig(configuration: EncodedConfiguration, proxy: Proxy): GeneratedConfig {
  const snapshot = buildProxySnapshot(configuration.encoded);
  const valid = configuration.violations.length === 0;
  return {
    violations: configuration.violations,
    dropped: configuration.dropped,
    snapshot: valid ? snapshot : undefined,
    validSnapshot: valid ? undefined : snapshot,
    dependencies: new Set(configuration.dependencies),
    proxy,
    ahead: false,
  };
}

/** Encoded size of a proxy snapshot's resources, in bytes (0 for none). */
function snapshotBytes(snapshot: ProxySnapshot | undefined): number {
  let bytes = 0;
  for (const resources of snapshot?.resources.values() ?? []) for (const r of resources.values()) bytes += r.resource.value.length;
  return bytes;
}

/** Connect and disconnect lines logged at info level per identity and kind per {@link PROXY_LOG_WINDOW_MS}. */
export const PROXY_LOG_LIMIT = 10;
/** Window of {@link PROXY_LOG_LIMIT}, in ms. */
export const PROXY_LOG_WINDOW_MS = 60_000;

/**
 * The composition of the push pipeline: store changes, certificate rotations and the resync
 * timer feed a debouncer; each merged {@link PushRequest} rebuilds the MeshSnapshot (when
 * objects changed), regenerates the affected proxies' resources, encodes them, and sets their
 * snapshots in the cache, from which the ADS server sends what changed. A proxy whose
 * resources fail to generate or encode keeps its last good snapshot.
 */
export class MeshController {
  readonly registry = new ProxyRegistry();
  private mesh: MeshSnapshot;
  /** The generation context of {@link mesh}: one per MeshSnapshot generation, made with the one before. */
  private context: GenerationContext;
  private problems: readonly PolicyProblem[] = [];
  private generation = 0;
  /** The store changed since the MeshSnapshot was last built (a debounced push is pending). */
  private storeChanged = false;
  private readonly debouncer: Debouncer<PushRequest>;
  private resyncTimer: unknown;
  private readonly timers: Timers;
  private readonly unsubscribe: (() => void)[] = [];
  private readonly lastErrors = new Map<string, string>();
  /** Configurations computed for the current generation, by identity, client type and certificate. */
  private memo: { generation: number; entries: Map<string, GeneratedConfig> } = { generation: -1, entries: new Map() };
  /** The services each connected proxy's current configuration was generated from, by UUID. */
  private readonly dependencies = new Map<string, ReadonlySet<string>>();
  private readonly proxyLogLimit = new RateLimiter(PROXY_LOG_LIMIT, PROXY_LOG_WINDOW_MS, () => performance.now(), 10_000);
  /** Encodings and rule checks by resource content, shared by every proxy and push. */
  private readonly checked = new ResourceCheckCache();
  /** Latest validation violations per proxy UUID (only proxies that have some). */
  private readonly violations = new Map<string, { proxy: Proxy; violations: readonly Violation[] }>();
  /** The identities of the mesh, for one MeshSnapshot generation (see {@link meshIdentities}). */
  private identities: { generation: number; set: ReadonlySet<ServiceIdentity> } = { generation: -1, set: new Set() };
  /** Which service certificates the certificate manager keeps: those of the mesh's identities and of connected proxies. */
  private readonly keepsCertificate = (identity: ServiceIdentity): boolean => this.meshIdentities().has(identity) || this.registry.hasIdentity(identity);
  private readonly metrics: {
    pushes: Counter<'reason'>;
    generationErrors: Counter;
    problems: Gauge;
    buildSeconds: Histogram;
    proxiesUpdated: Counter;
    configurationsGenerated: Counter;
    validationFailures: Counter<'type'>;
    refusals: Counter<'reason'>;
  };

  constructor(private readonly options: MeshControllerOptions) {
    this.timers = options.timers ?? REAL_TIMERS;
    this.mesh = this.rebuild();
    this.context = new GenerationContext(this.mesh);
    this.debouncer = new Debouncer<PushRequest>(
      { quietMs: options.debounceQuietMs ?? 100, maxDelayMs: options.debounceMaxDelayMs ?? 1000, timers: this.timers },
      mergePushRequests,
      (request) => this.push(request),
      (err) => options.logger.error({ err }, 'push failed'),
    );
    const registers = [options.metrics];
    this.metrics = {
      pushes: new Counter({ name: 'trellis_pushes_total', help: 'Pushes run, by reason', labelNames: ['reason'], registers }),
      generationErrors: new Counter({
        name: 'trellis_generation_errors_total',
        help: 'Proxy configurations that failed to generate or encode (the proxy kept its last good one)',
        registers,
      }),
      problems: new Gauge({ name: 'trellis_policy_problems', help: 'Policies skipped because they are invalid', registers }),
      buildSeconds: new Histogram({
        name: 'trellis_push_build_seconds',
        help: 'Time to rebuild the mesh snapshot and every affected proxy snapshot, in seconds',
        buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5],
        registers,
      }),
      proxiesUpdated: new Counter({ name: 'trellis_proxy_snapshots_total', help: 'Proxy snapshots generated', registers }),
      configurationsGenerated: new Counter({
        name: 'trellis_configurations_generated_total',
        help: 'Configurations generated, validated and encoded (proxies of one identity and client type share one per mesh snapshot)',
        registers,
      }),
      validationFailures: new Counter({
        name: 'trellis_config_validation_failures_total',
        help: 'Violations of Envoy validate.rules and cross-resource rules found in generated proxy configuration, by xDS type',
        labelNames: ['type'],
        registers,
      }),
      refusals: new Counter({
        name: 'trellis_proxy_refusals_total',
        help: 'Proxy streams refused by the controller, by reason (pod identity checks, UUID conflicts, claimed identities outside the mesh)',
        labelNames: ['reason'],
        registers,
      }),
    };
    this.metrics.problems.set(this.problems.length);
    for (const reason of ['config', 'resync', 'certificate']) this.metrics.pushes.inc({ reason }, 0);
    for (const type of Object.values(TYPE_SHORT_NAME)) this.metrics.validationFailures.inc({ type }, 0);
  }

  /** The current MeshSnapshot. */
  get snapshot(): MeshSnapshot {
    return this.mesh;
  }

  /** Policies the last snapshot had to skip, with object and field. */
  policyProblems(): readonly PolicyProblem[] {
    return this.problems;
  }

  /**
   * The identities of the mesh: the service accounts of monitored namespaces and the
   * identities behind services (computed once per MeshSnapshot).
   */
  meshIdentities(): ReadonlySet<ServiceIdentity> {
    const mesh = this.mesh;
    if (this.identities.generation === mesh.generation) return this.identities.set;
    const set = new Set<ServiceIdentity>(mesh.servicesByIdentity.keys());
    for (const sa of this.options.store.list('ServiceAccount')) {
      const ns = sa.metadata.namespace ?? 'default';
      if (mesh.namespaces.has(ns)) set.add(serviceIdentity(ns, sa.metadata.name));
    }
    this.identities = { generation: mesh.generation, set };
    return set;
  }

  /** Starts listening to the store and rotations, and the resync timer. */
  start(): void {
    // Certificates of identities that left the mesh and have no connected proxy are forgotten
    // (applied again after every rebuild and every disconnect).
    this.options.certificates.retain(this.keepsCertificate);
    this.unsubscribe.push(
      this.options.store.onChange((changes) => {
        this.storeChanged = true;
        this.debouncer.push({ configChanged: true, resync: false, rotated: new Set(), kinds: new Set(changes.map((c) => c.kind)), firstEventAt: this.timers.now() });
      }),
      this.options.certificates.onRotated((identity) =>
        this.debouncer.push({ configChanged: false, resync: false, rotated: new Set([identity]), kinds: new Set(), firstEventAt: this.timers.now() }),
      ),
    );
    this.armResync();
  }

  /**
   * Prepares for a mesh connecting at once (a restart while proxies run): for every identity of
   * the mesh (service accounts of monitored namespaces, and the identities behind services),
   * issues its service certificate and, while `configurationBytes` last, generates, validates
   * and encodes the configuration of a sidecar of that identity, so that its proxies find both
   * ready instead of each waiting for them. `concurrency` identities at a time. A failure is
   * logged; that identity's certificate and configuration are then made on first connection as
   * before. A configuration generated ahead is kept through changes that cannot alter it (see
   * `affectedBy`); a change that can makes the identity's next proxy generate again.
   * @returns the certificates issued, the configurations generated and their encoded size (bytes).
   */
  async warmUp(options: WarmUpOptions = {}): Promise<WarmUpResult> {
    if (this.storeChanged) await this.flush();
    const identities = this.meshIdentities();
    const budget = options.configurationBytes ?? DEFAULT_WARM_UP_CONFIGURATION_BYTES;
    const result = { identities: identities.size, certificatesIssued: 0, configurationsGenerated: 0, configurationBytes: 0, budgetReached: false };
    const todo = [...identities].sort().reverse();
    // One generation at a time (it runs on this thread anyway): the budget is checked right
    // before each, so at most the last one passes it.
    let generating: Promise<void> = Promise.resolve();
    const generate = (id: ServiceIdentity): Promise<void> => {
      const run = generating.then(async () => {
        if (result.configurationBytes >= budget) {
          result.budgetReached = budget > 0;
          return;
        }
        const { namespace, serviceAccount } = identityParts(id);
        const config = await this.configFor({ ...parseCommonName(proxyCommonName(WARM_UP_UUID, 'sidecar', namespace, serviceAccount)), verified: true });
        config.ahead = true;
        result.configurationsGenerated++;
        result.configurationBytes += snapshotBytes(config.snapshot ?? config.validSnapshot);
      });
      generating = run.catch(() => undefined);
      return run;
    };
    const worker = async (): Promise<void> => {
      for (let id = todo.pop(); id !== undefined; id = todo.pop()) {
        try {
          if (!this.options.certificates.peekServiceCertificate(id)) {
            await this.options.certificates.getServiceCertificate(id);
            result.certificatesIssued++;
          }
        } catch (err) {
          this.options.logger.warn({ identity: id, err: err instanceof Error ? err.message : String(err) }, 'service certificate not issued ahead; it will be on first connection');
          continue;
        }
        try {
          await generate(id);
        } catch (err) {
          this.options.logger.warn({ identity: id, err: err instanceof Error ? err.message : String(err) }, 'configuration not generated ahead; it will be on first connection');
        }
      }
    };
    await Promise.all(Array.from({ length: Math.max(1, options.concurrency ?? 4) }, worker));
    return result;
  }

  /** The resync interval in force, in ms: MeshConfig `sidecar.configResyncInterval` when set, else the option. */
  resyncIntervalMs(): number {
    const fromMeshConfig = this.mesh.settings.configResyncIntervalSeconds;
    return fromMeshConfig !== undefined ? fromMeshConfig * 1000 : (this.options.resyncIntervalMs ?? 60_000);
  }

  private armResync(): void {
    // Re-read on every arming so a MeshConfig change takes effect from the next resync on.
    const interval = this.resyncIntervalMs();
    if (interval <= 0) return;
    this.resyncTimer = this.timers.setTimeout(() => {
      this.debouncer.push({ configChanged: true, resync: true, rotated: new Set(), kinds: new Set(), firstEventAt: this.timers.now() });
      this.armResync();
    }, interval);
  }

  /** Stops timers and listeners. */
  stop(): void {
    for (const u of this.unsubscribe.splice(0)) u();
    if (this.resyncTimer !== undefined) this.timers.clearTimeout(this.resyncTimer);
    this.debouncer.stop();
  }

  /** Runs any pending push now and waits for it (for tests and shutdown). */
  flush(): Promise<void> {
    return this.debouncer.flushNow();
  }

  private rebuild(): MeshSnapshot {
    this.storeChanged = false;
    const meshConfig = this.options.meshConfigNamespace === undefined ? DEFAULT_MESH_CONFIG : { ...DEFAULT_MESH_CONFIG, namespace: this.options.meshConfigNamespace };
    const { snapshot, problems } = buildMeshSnapshot(this.options.store, {
      meshName: this.options.meshName,
      meshConfig,
      meshConfigUnreadable: this.options.meshConfigUnreadable?.(meshConfig),
      generation: ++this.generation,
      previous: this.generation > 1 ? this.mesh : undefined,
    });
    const before = new Set(this.problems.map(formatProblem));
    for (const p of problems) {
      const text = formatProblem(p);
      if (!before.has(text)) this.options.logger.warn({ problem: p }, `policy problem: ${text}`);
    }
    this.problems = problems;
    this.metrics?.problems.set(problems.length);
    if (snapshot.settings.serviceCertValiditySeconds !== this.options.certificates.validitySeconds) {
      this.options.certificates.setValidity(snapshot.settings.serviceCertValiditySeconds);
    }
    return snapshot;
  }

  /**
   * ADS hook: a proxy's stream opened. Registers it and sets its first snapshot before the
   * server answers anything. `node` (the first request's) decides the configuration format:
   * a proxyless gRPC client gets the `api_listener` form (`detectClientType`).
   *
   * Admission is atomic: the UUID check and the registration happen before anything is awaited,
   * so of two streams of one UUID and two identities only the first is registered, whatever
   * runs between (a pending push, the pod check). A stream that closes while this waits is
   * unregistered by {@link onStreamClose} and gets nothing. A proxy whose identity is only
   * claimed (not `verified`, the plaintext listener) is refused unless its identity is in the
   * mesh, and is never issued a certificate nor sent a private key.
   * @throws ProxyRefusedError when the proxy is refused (UUID held by another identity, pod
   *   identity check, claimed identity outside the mesh); Error when its configuration cannot
   *   be generated.
   */
  async onStreamOpen(connected: Proxy, streamId: number, node?: NodeSoftware | null): Promise<void> {
    const proxy = node === undefined ? connected : withClientType(connected, node);
    const existing = this.registry.get(proxy.uuid);
    if (existing && existing.proxy.identity !== proxy.identity) {
      // Proxies are keyed by UUID: a second identity under the same UUID would be served the
      // first one's configuration (and service certificate). Refuse it.
      this.metrics.refusals.inc({ reason: 'uuid_conflict' });
      throw new ProxyRefusedError('uuid_conflict', `proxy UUID ${proxy.uuid} is already connected as ${existing.proxy.identity}; refusing ${proxy.identity}`);
    }
    this.registry.register(proxy, streamId, new Date(this.timers.now()));
    try {
      await this.admit(proxy, streamId);
    } catch (err) {
      // Refused or failed: the reservation goes at once (the ADS server's onStreamClose finds nothing more to do).
      if (this.registry.unregister(proxy.uuid, streamId) === 0) this.options.cache.clearSnapshot(proxy.uuid);
      throw err;
    }
  }

  /** The part of {@link onStreamOpen} after the reservation: checks, first push, first snapshot. */
  private async admit(proxy: Proxy, streamId: number): Promise<void> {
    const refuse = (reason: string, message: string): never => {
      this.metrics.refusals.inc({ reason });
      throw new ProxyRefusedError(reason, `proxy ${proxy.uuid} refused: ${message}`);
    };
    if (this.options.verifyPodIdentity) {
      const check = await awaitProxyPod(this.options.store, proxy, {
        graceMs: this.options.podIdentityGraceMs ?? DEFAULT_POD_IDENTITY_GRACE_MS,
        timers: this.timers,
      });
      if (!check.ok) refuse(check.reason, check.message);
    }
    // A proxy connecting while a push is pending (right after a source synced, or in a burst
    // of changes) would get configuration from the stale MeshSnapshot: run the push first.
    if (this.storeChanged) await this.flush();
    if (!this.registry.get(proxy.uuid)?.streamIds.has(streamId)) return; // the stream closed meanwhile
    const { namespace, serviceAccount } = identityParts(proxy.identity);
    const inMesh = this.meshIdentities().has(proxy.identity);
    if (!proxy.verified && !inMesh) {
      refuse('identity_not_in_mesh', `identity ${proxy.identity} (claimed in node.id, not proven by a certificate) is not in mesh ${this.options.meshName}`);
    }
    const log = this.proxyLog(proxy.identity, 'connected');
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
        this.mesh.namespaces.has(namespace)
          ? `proxy of an unknown identity: no ServiceAccount ${serviceAccount} in namespace ${namespace}; it reaches only what policies naming it allow`
          : `proxy of an identity outside the mesh: namespace ${namespace} is not monitored by mesh ${this.options.meshName}; it reaches only what policies naming it allow`,
      );
    }
    const ok = await this.updateProxy(proxy);
    if (!ok && !this.options.cache.getSnapshot(proxy.uuid)) throw new Error(`no configuration could be generated for proxy ${proxy.uuid}`);
  }

  /**
   * The logger for a proxy's connect or disconnect lines: the controller's, at most
   * {@link PROXY_LOG_LIMIT} times per identity and kind per {@link PROXY_LOG_WINDOW_MS}; past
   * that, one whose lines go to debug level (a reconnect loop must not fill the log).
   */
  private proxyLog(identity: string, kind: 'connected' | 'disconnected'): Pick<Logger, 'info' | 'warn'> {
    if (this.proxyLogLimit.take(`${identity}\n${kind}`) !== undefined) return this.options.logger;
    const debug = this.options.logger.debug.bind(this.options.logger);
    return { info: debug, warn: debug };
  }

  /**
   * ADS hook: a proxy's stream closed. Unregisters it (its snapshot goes once no stream of it is
   * left, and its identity's certificate once that identity is neither connected nor in the mesh).
   */
  onStreamClose(proxy: Proxy, streamId: number): void {
    const remaining = this.registry.unregister(proxy.uuid, streamId);
    if (remaining === 0) this.dependencies.delete(proxy.uuid);
    this.proxyLog(proxy.identity, 'disconnected').info({ proxy: proxy.uuid, identity: proxy.identity, streamId }, 'proxy disconnected');
    if (remaining === 0) {
      this.options.cache.clearSnapshot(proxy.uuid);
      this.violations.delete(proxy.uuid);
      if (!this.keepsCertificate(proxy.identity)) this.options.certificates.forget(proxy.identity);
    }
  }

  /**
   * The latest validation violations of each connected proxy that has some (for the debug
   * API): `validate.rules` and cross-resource rules its generated configuration broke.
   */
  validationFailures(): readonly { proxy: Proxy; violations: readonly Violation[] }[] {
    return [...this.violations.values()];
  }

  /**
   * Counts and logs a proxy's validation violations (each distinct one once, while it
   * persists) and remembers them for {@link validationFailures}.
   */
  private recordViolations(proxy: Proxy, violations: readonly Violation[]): void {
    if (violations.length === 0) {
      this.violations.delete(proxy.uuid);
      return;
    }
    const logged = new Set((this.violations.get(proxy.uuid)?.violations ?? []).map(formatViolation));
    this.violations.set(proxy.uuid, { proxy, violations });
    for (const v of violations) {
      const type = TYPE_SHORT_NAME[v.typeUrl];
      this.metrics.validationFailures.inc({ type });
      const text = formatViolation(v);
      if (logged.has(text)) continue;
      logged.add(text);
      this.options.logger.error(
        { proxy: proxy.uuid, identity: proxy.identity, type, resource: v.name, path: v.path, rule: v.rule },
        `invalid configuration not sent: ${text}`,
      );
    }
  }

  /**
   * The generated, validated and encoded configuration for proxies like `proxy`: generation
   * is a pure function of the MeshSnapshot, the identity, the client type and the identity's
   * certificate, so proxies that share those share one computation per generation.
   */
  private async configFor(proxy: Proxy): Promise<GeneratedConfig> {
    // Only a verified sidecar's identity gets a certificate: a claimed identity (plaintext) must
    // not make the controller issue (and keep) one, and a proxyless client has no SDS.
    const cert = getsServiceCertificate(proxy) ? await this.options.certificates.getServiceCertificate(proxy.identity) : undefined;
    if (this.memo.generation !== this.mesh.generation) this.memo = { generation: this.mesh.generation, entries: new Map() };
    const key = memoKey(proxy, cert?.serialNumber ?? 'none');
    const found = this.memo.entries.get(key);
    if (found) return found;
    this.metrics.configurationsGenerated.inc();
    const caPem = this.options.certificates.caPem;
    const certs = cert ? { certChainPem: cert.certPem, privateKeyPem: cert.keyPem, caPem } : { caPem };
    const config = generatedConfig(generateConfiguration(this.context, proxy, certs, this.checked), proxy);
    this.memo.entries.set(key, config);
    return config;
  }

  private async push(request: PushRequest): Promise<void> {
    const end = this.metrics.buildSeconds.startTimer();
    const reason = request.resync ? 'resync' : request.configChanged ? 'config' : 'certificate';
    this.metrics.pushes.inc({ reason });
    // Which proxies can be affected: all on a resync or a mesh-wide change; else those whose
    // configuration was generated from a changed service, those of an identity whose access
    // changed (see affectedBy), and those whose certificate rotated. A proxy that failed last
    // time has no recorded dependencies and is retried.
    const startedAt = this.timers.now();
    let scope: 'all' | MeshChange = { services: new Set(), identities: new Set(), servicesChanged: false };
    let rebuiltAt = startedAt;
    const before = this.mesh;
    if (request.configChanged) {
      this.mesh = this.rebuild();
      this.context = new GenerationContext(this.mesh, this.context);
      rebuiltAt = this.timers.now();
      scope = request.resync ? 'all' : diffMeshSnapshots(before, this.mesh);
      this.carryMemo(scope, request.rotated);
      this.options.certificates.retain(this.keepsCertificate);
    }
    const diffedAt = this.timers.now();
    // Only endpoints changed: proxies keep their configuration but for the changed services'
    // ClusterLoadAssignments, which are replaced in place of regenerating everything.
    const change = scope;
    const endpointsPatch =
      change !== 'all' && change.services.size > 0 && onlyEndpointsChanged(before, this.mesh, change)
        ? this.encodedAssignments(this.mesh.services.filter((s) => change.services.has(serviceKey(s))))
        : undefined;
    // Only TrafficSplit weights changed: proxies keep their configuration but for their route
    // configurations, generated again (once per identity and client type) and replaced.
    const routesPatch =
      change !== 'all' && endpointsPatch === undefined && onlySplitWeightsChanged(before, this.mesh, change) ? new Map<string, readonly EncodedNamedResource[] | undefined>() : undefined;
    const affected = (p: Proxy): boolean => {
      if (change === 'all' || request.rotated.has(p.identity)) return true;
      const deps = this.dependencies.get(p.uuid);
      if (!deps) return request.configChanged;
      return affectedBy(change, p, deps);
    };
    const proxies = this.registry.proxies().filter(affected);
    let slice = this.timers.now();
    for (const proxy of proxies) {
      const patched =
        !request.rotated.has(proxy.identity) &&
        ((endpointsPatch !== undefined && this.patchEndpoints(proxy, endpointsPatch)) || (routesPatch !== undefined && this.patchRoutes(proxy, routesPatch)));
      if (!patched) await this.updateProxy(proxy);
      // Generation is synchronous: without a break the ADS server could write nothing until
      // every proxy is done. Yield to the event loop every few milliseconds so each proxy's
      // responses go out as soon as its snapshot is set.
      if (this.timers.now() - slice >= PUSH_SLICE_MS) {
        await new Promise<void>((resolve) => setImmediate(resolve));
        slice = this.timers.now();
      }
    }
    end();
    const fields = {
      reason,
      kinds: [...request.kinds].sort(),
      proxies: proxies.length,
      generation: this.mesh.generation,
      // Where the time went, in ms: debounce wait, MeshSnapshot rebuild, diff, proxy snapshots.
      waitedMs: startedAt - request.firstEventAt,
      rebuildMs: rebuiltAt - startedAt,
      diffMs: diffedAt - rebuiltAt,
      proxiesMs: this.timers.now() - diffedAt,
    };
    // A resync with nothing new is routine: keep it out of the info log.
    if (request.resync && request.kinds.size === 0 && request.rotated.size === 0) this.options.logger.debug(fields, 'resync pushed');
    else this.options.logger.info(fields, 'configuration pushed');
  }

  /**
   * Starts the memo of the new MeshSnapshot with the configurations `change` cannot alter
   * (`affectedBy`), of identities whose certificate did not rotate: those generated ahead, and
   * those a connected proxy uses (the rest would only hold memory).
   */
  private carryMemo(change: 'all' | MeshChange, rotated: ReadonlySet<ServiceIdentity>): void {
    const entries = new Map<string, GeneratedConfig>();
    if (change !== 'all') {
      const connected = new Set(this.registry.proxies().map(proxyKind));
      for (const [key, config] of this.memo.entries) {
        if (rotated.has(config.proxy.identity) || !(config.ahead || connected.has(proxyKind(config.proxy)))) continue;
        if (!affectedBy(change, config.proxy, config.dependencies)) entries.set(key, config);
      }
    }
    this.memo = { generation: this.mesh.generation, entries };
  }

  /**
   * The ClusterLoadAssignments of `services` from the current MeshSnapshot, validated and encoded
   * once for every proxy of a push; undefined when one breaks a rule (proxies then get a full
   * update, which records the violation).
   */
  private encodedAssignments(services: readonly MeshService[]): readonly EncodedNamedResource[] | undefined {
    const resources = new Map([[TypeUrl.ClusterLoadAssignment, services.map((svc) => sharedClusterLoadAssignment(this.context, svc))]]);
    if (validateProxyResources(resources, this.checked).violations.length > 0) return undefined;
    return encodeResources(resources, this.checked).get(TypeUrl.ClusterLoadAssignment);
  }

  /**
   * Replaces, in the proxy's current snapshot, those of `assignments` it has (the rest of its
   * configuration does not depend on endpoints, see `onlyEndpointsChanged`).
   * @returns false when the proxy needs a full update instead: it has no snapshot or had violations.
   */
  private patchEndpoints(proxy: Proxy, assignments: readonly EncodedNamedResource[]): boolean {
    const previous = this.patchableSnapshot(proxy);
    if (!previous) return false;
    this.replaceInSnapshot(proxy, previous, TypeUrl.ClusterLoadAssignment, assignments);
    return true;
  }

  /** The proxy's current snapshot, when it can be patched: it has one, from a full generation without violations. */
  private patchableSnapshot(proxy: Proxy): ProxySnapshot | undefined {
    const snapshot = this.options.cache.getSnapshot(proxy.uuid);
    return snapshot && !this.violations.has(proxy.uuid) && this.dependencies.has(proxy.uuid) ? snapshot : undefined;
  }

  /** Publishes `previous` with `replacements` of `typeUrl` (see `replaceResources`), unless nothing differs. */
  private replaceInSnapshot(proxy: Proxy, previous: ProxySnapshot, typeUrl: TypeUrl, replacements: readonly EncodedNamedResource[]): void {
    const next = replaceResources(previous, typeUrl, replacements);
    if (next === previous) return;
    this.metrics.proxiesUpdated.inc();
    this.options.cache.setSnapshot(proxy.uuid, next);
  }

  /**
   * Replaces the proxy's route configurations with ones generated from the current MeshSnapshot
   * (the rest of its configuration does not depend on split weights, see
   * `onlySplitWeightsChanged`), validated against the rest of its configuration. `byKind`
   * remembers them per identity and client type for the push.
   * @returns false when the proxy needs a full update instead: it has no snapshot, had
   *   violations, or its new route configurations break a rule or are not the same names.
   */
  private patchRoutes(proxy: Proxy, byKind: Map<string, readonly EncodedNamedResource[] | undefined>): boolean {
    const previous = this.patchableSnapshot(proxy);
    const current = previous?.resources.get(TypeUrl.RouteConfiguration);
    if (!previous || !current) return false;
    const kind = proxyKind(proxy);
    if (!byKind.has(kind)) {
      const resources = new Map([[TypeUrl.RouteConfiguration, generateProxyRouteConfigurations(this.context, proxyProfile(proxy))]]);
      const others = new Map([...previous.resources].filter(([type]) => type !== TypeUrl.RouteConfiguration).map(([type, map]) => [type, map.keys()]));
      const ok = validateProxyResources(resources, this.checked, others).violations.length === 0;
      byKind.set(kind, ok ? encodeResources(resources, this.checked).get(TypeUrl.RouteConfiguration) : undefined);
    }
    const routes = byKind.get(kind);
    if (!routes || routes.length !== current.size || routes.some((r) => !current.has(r.name))) return false;
    this.replaceInSnapshot(proxy, previous, TypeUrl.RouteConfiguration, routes);
    return true;
  }

  /**
   * Generates, encodes and publishes one proxy's snapshot.
   * @returns false when that failed (the proxy keeps its last good snapshot).
   */
  private async updateProxy(proxy: Proxy): Promise<boolean> {
    try {
      const config = await this.configFor(proxy);
      // Disconnected meanwhile, or its UUID is now another proxy's (another identity, or no
      // longer verified): this configuration, with its key, is not for the stream there now.
      const current = this.registry.get(proxy.uuid);
      if (!current || proxyKind(current.proxy) !== proxyKind(proxy)) return true;
      this.recordViolations(proxy, config.violations);
      let snapshot = config.snapshot;
      if (!snapshot) {
        // Violations: a proxy that has a snapshot keeps it (a partial LDS/CDS set would delete
        // working listeners and clusters); a new one gets the valid, referentially closed subset.
        // Without recorded dependencies, every later change retries it (the fix may be anywhere).
        if (this.options.cache.getSnapshot(proxy.uuid)) {
          this.dependencies.delete(proxy.uuid);
          return false;
        }
        this.options.logger.warn({ proxy: proxy.uuid, identity: proxy.identity, dropped: config.dropped }, 'first configuration of this proxy sent without its invalid resources');
        snapshot = config.validSnapshot!;
      }
      this.lastErrors.delete(proxy.uuid);
      // A partial first configuration (violations left out) is retried on every later change too.
      if (config.violations.length > 0) this.dependencies.delete(proxy.uuid);
      else this.dependencies.set(proxy.uuid, config.dependencies);
      this.metrics.proxiesUpdated.inc();
      this.options.cache.setSnapshot(proxy.uuid, snapshot);
      return true;
    } catch (err) {
      this.dependencies.delete(proxy.uuid); // retried on every later change
      this.metrics.generationErrors.inc();
      const message = err instanceof Error ? err.message : String(err);
      if (this.lastErrors.get(proxy.uuid) !== message) {
        this.options.logger.error({ proxy: proxy.uuid, identity: proxy.identity, err: message }, 'configuration not generated; proxy keeps its last good one');
      }
      this.lastErrors.set(proxy.uuid, message);
      return false;
    }
  }
}

export { encodeResources } from './configuration.js';
