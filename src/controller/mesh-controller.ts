import type { Logger } from 'pino';
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { TYPE_SHORT_NAME } from '../api/type-urls.js';
import { DEFAULT_MESH_CONFIG, MeshSnapshotBuilder } from '../catalog/build-snapshot.js';
import { diffMeshSnapshots, type MeshChange } from '../catalog/snapshot-diff.js';
import { formatProblem, type PolicyProblem } from '../catalog/problems.js';
import type { MeshSnapshot } from '../catalog/types.js';
import type { CertificateManager } from '../certificate/manager.js';
import { GenerationContext } from '../envoy/context.js';
import { affectedBy, proxyDependencies } from '../envoy/dependencies.js';
import { formatViolation, ResourceCheckCache, type Violation } from '../envoy/validate/index.js';
import { Debouncer, type Timers, REAL_TIMERS } from '../messaging/debouncer.js';
import type { NodeSoftware } from '../proxy/client-type.js';
import { ProxyRegistry, type ConnectedProxy } from '../proxy/registry.js';
import { serviceIdentity, type Proxy, type ServiceIdentity, type XdsClientType } from '../proxy/types.js';
import type { ObjectChange, StoreReader } from '../store/store.js';
import { ResourceInterner, type SnapshotCache } from '../xds/cache/snapshot-cache.js';
import type { ProxySnapshot } from '../xds/cache/types.js';
import type { StreamSync } from '../xds/server/stream-common.js';
import { FIRST_GENERATION, ObjectVersions, type PolicyKind } from '../status/object-versions.js';
import { policyObjects, type ObjectError } from '../status/policy-objects.js';
import { ProgressIndex, type PolicyStatus, type PolicyStatusDetail, type ProxyProgress } from '../status/policy-status.js';
import { SnapshotHistory } from '../status/snapshot-history.js';
import { ProxyAdmission } from './admission.js';
import type { ConfigurationCertificates } from './configuration.js';
import { ConfigurationMemo, memoKey, proxyKind, type GeneratedConfig } from './configuration-memo.js';
import { fullConfiguration, planRegeneration, PROXY_TYPES, updatedConfiguration, type Regeneration } from './regeneration.js';
import { snapshotBytes, warmUp, type WarmUpOptions, type WarmUpResult } from './warm-up.js';

/** Longest stretch of proxy generation between two yields to the event loop during a push, in ms. */
export const PUSH_SLICE_MS = 20;

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
  /**
   * Whether the source has listed everything once (default: always). Policy problems found before
   * are kept but not logged: a store still filling (no namespace labelled yet) is not a problem.
   */
  readonly sourceSynced?: () => boolean;
}


/** A MeshChange naming nothing: what a push changes for a proxy that only the certificate rotation affects. */
const NOTHING: MeshChange = { services: new Set(), identities: new Set(), servicesChanged: false };

/** Whether `proxy` is given its identity's service certificate and key: a verified sidecar only (never a claimed identity, never a proxyless client, which has no SDS). */
function getsServiceCertificate(proxy: Proxy): boolean {
  return proxy.verified === true && proxy.clientType !== 'grpc';
}

/**
 * The composition of the push pipeline: store changes, certificate rotations and the resync
 * timer feed a debouncer; each merged {@link PushRequest} rebuilds the MeshSnapshot (when
 * objects changed), finds the affected proxies and, for each, the types of its resources the
 * change makes regenerate (`typesToRegenerate`), regenerates those ({@link regenerate}), and
 * sets the proxies' snapshots in the cache, from which the ADS server sends what changed. A
 * proxy whose resources fail to generate, encode or validate keeps its last good snapshot.
 * Parts: {@link ProxyAdmission} (streams), {@link ConfigurationMemo} (one computation per kind
 * of proxy and generation), `warmUp` (configurations ahead); per-proxy state is the registry's
 * {@link ConnectedProxy} record.
 */
export class MeshController {
  readonly registry = new ProxyRegistry();
  private mesh: MeshSnapshot;
  /** Builds `mesh`, reusing what the store did not change since the last build. */
  private readonly builder = new MeshSnapshotBuilder();
  /** The generation context of {@link mesh}: one per MeshSnapshot generation, made with the one before. */
  private context: GenerationContext;
  private problems: readonly PolicyProblem[] = [];
  /** Whether {@link problems} were logged (they were found after the source synced). */
  private problemsLogged = false;
  private generation = 0;
  /** The store changed since the MeshSnapshot was last built (a debounced push is pending). */
  private storeChanged = false;
  private readonly debouncer: Debouncer<PushRequest>;
  private resyncTimer: unknown;
  private readonly timers: Timers;
  private readonly unsubscribe: (() => void)[] = [];
  /** Configurations computed for the current generation, by kind of proxy and certificate. */
  private readonly memo = new ConfigurationMemo();
  /** Encodings and rule checks by resource content, shared by every proxy and push. */
  private readonly checked = new ResourceCheckCache();
  /** The encoded resources of every proxy's snapshot, each distinct one held once, with their versions. */
  private readonly interner = new ResourceInterner();
  private readonly admission: ProxyAdmission;
  /** The newest MeshSnapshot generation whose push is complete (a proxy it did not pick is unaffected up to it). */
  private settled = FIRST_GENERATION;
  /** Policy objects' content versions and the generation each entered at (policy status). */
  private readonly versions = new ObjectVersions();
  /** Which generations each proxy's recent snapshots are right for (policy status). */
  private readonly history = new SnapshotHistory<ProxySnapshot>();
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
    typesGenerated: Counter<'type'>;
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
        help: 'Configurations generated in full, validated and encoded (proxies of one identity and client type share one per mesh snapshot)',
        registers,
      }),
      typesGenerated: new Counter({
        name: 'trellis_configuration_types_generated_total',
        help: 'Resource types generated, validated and encoded for a kind of proxy, by xDS type (a full configuration counts each type; a change of endpoints only, TrafficSplit weights only or a certificate only counts EDS, RDS or SDS)',
        labelNames: ['type'],
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
    for (const type of Object.values(TYPE_SHORT_NAME)) {
      this.metrics.validationFailures.inc({ type }, 0);
      this.metrics.typesGenerated.inc({ type }, 0);
    }
    this.admission = new ProxyAdmission({
      registry: this.registry,
      cache: options.cache,
      store: options.store,
      logger: options.logger,
      timers: this.timers,
      meshName: options.meshName,
      verifyPodIdentity: options.verifyPodIdentity === true,
      podIdentityGraceMs: options.podIdentityGraceMs,
      refusals: this.metrics.refusals,
      settle: () => (this.storeChanged ? this.flush() : Promise.resolve()),
      meshIdentities: () => this.meshIdentities(),
      meshNamespaces: () => this.mesh.namespaces,
      configure: (proxy) => this.regenerate(proxy),
    });
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
    const set = meshIdentitiesOf(mesh, this.options.store);
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
        this.versions.changed(changes);
        this.debouncer.push({ configChanged: true, resync: false, rotated: new Set(), kinds: new Set(changes.map((c) => c.kind)), firstEventAt: this.timers.now() });
      }),
      this.options.certificates.onRotated((identity) =>
        this.debouncer.push({ configChanged: false, resync: false, rotated: new Set([identity]), kinds: new Set(), firstEventAt: this.timers.now() }),
      ),
    );
    this.armResync();
  }

  /**
   * Prepares for a mesh connecting at once (see `warmUp`): for every identity of the mesh,
   * issues its service certificate and, within the budget, generates the configuration of a
   * sidecar of that identity. A configuration generated ahead is kept through changes that
   * cannot alter it (see `affectedBy`); a change that can makes the identity's next proxy
   * generate again.
   * @returns the certificates issued, the configurations generated and their encoded size (bytes).
   */
  async warmUp(options: WarmUpOptions = {}): Promise<WarmUpResult> {
    if (this.storeChanged) await this.flush();
    return warmUp(
      {
        identities: this.meshIdentities(),
        certificates: this.options.certificates,
        logger: this.options.logger,
        configure: async (proxy) => {
          const certs = await this.certificatesFor(proxy);
          const config = this.fullConfiguration(proxy, certs);
          config.ahead = true;
          return snapshotBytes(config.snapshot ?? config.validSnapshot);
        },
      },
      options,
    );
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

  /** The MeshConfig the controller reads. */
  private meshConfigName(): { namespace: string; name: string } {
    return this.options.meshConfigNamespace === undefined ? DEFAULT_MESH_CONFIG : { ...DEFAULT_MESH_CONFIG, namespace: this.options.meshConfigNamespace };
  }

  private rebuild(): MeshSnapshot {
    this.storeChanged = false;
    const meshConfig = this.meshConfigName();
    const { snapshot, problems } = this.builder.build(this.options.store, {
      meshName: this.options.meshName,
      meshConfig,
      meshConfigUnreadable: this.options.meshConfigUnreadable?.(meshConfig),
      generation: ++this.generation,
      previous: this.generation > 1 ? this.mesh : undefined,
    });
    this.versions.built(this.generation);
    const synced = this.options.sourceSynced?.() ?? true;
    const before = new Set(this.problemsLogged ? this.problems.map(formatProblem) : []);
    for (const p of synced ? problems : []) {
      const text = formatProblem(p);
      if (!before.has(text)) this.options.logger.warn({ problem: p }, `policy problem: ${text}`);
    }
    this.problems = problems;
    this.problemsLogged = synced;
    this.metrics?.problems.set(problems.length);
    if (snapshot.settings.serviceCertValiditySeconds !== this.options.certificates.validitySeconds) {
      this.options.certificates.setValidity(snapshot.settings.serviceCertValiditySeconds);
    }
    return snapshot;
  }

  /**
   * ADS hook: a proxy's stream opened. Registers it and sets its first snapshot before the
   * server answers anything (see {@link ProxyAdmission.open}). `node` (the first request's)
   * decides the configuration format: a proxyless gRPC client gets the `api_listener` form
   * (`detectClientType`). A proxy whose identity is only claimed (not `verified`) is refused
   * unless its identity is in the mesh, and is never issued a certificate nor sent a private key.
   * @throws ProxyRefusedError when the proxy is refused (UUID held by another identity, pod
   *   identity check, claimed identity outside the mesh); Error when its configuration cannot
   *   be generated.
   */
  onStreamOpen(connected: Proxy, streamId: number, node?: NodeSoftware | null): Promise<void> {
    return this.admission.open(connected, streamId, node);
  }

  /**
   * ADS hook: a proxy's stream closed. Unregisters it (its snapshot and state go once no stream
   * of it is left, and its identity's certificate once that identity is neither connected nor in
   * the mesh).
   */
  onStreamClose(proxy: Proxy, streamId: number): void {
    if (this.admission.close(proxy, streamId) > 0) return;
    this.options.cache.clearSnapshot(proxy.uuid);
    this.history.forget(proxy.uuid);
    if (!this.keepsCertificate(proxy.identity)) this.options.certificates.forget(proxy.identity);
  }

  /**
   * The latest validation violations of each connected proxy that has some (for the debug
   * API): `validate.rules` and cross-resource rules its generated configuration broke.
   */
  validationFailures(): readonly { proxy: Proxy; violations: readonly Violation[] }[] {
    return this.registry
      .connected()
      .filter((c) => c.violations.length > 0)
      .map((c) => ({ proxy: c.proxy, violations: c.violations }));
  }

  /**
   * Counts and logs a proxy's validation violations (each distinct one once, while it
   * persists) and records them in its registry record for {@link validationFailures}.
   */
  private recordViolations(record: ConnectedProxy, violations: readonly Violation[]): void {
    const logged = new Set(record.violations.map(formatViolation));
    this.registry.update(record.proxy.uuid, { violations });
    for (const v of violations) {
      const type = TYPE_SHORT_NAME[v.typeUrl];
      this.metrics.validationFailures.inc({ type });
      const text = formatViolation(v);
      if (logged.has(text)) continue;
      logged.add(text);
      this.options.logger.error(
        { proxy: record.proxy.uuid, identity: record.proxy.identity, type, resource: v.name, path: v.path, rule: v.rule },
        `invalid configuration not sent: ${text}`,
      );
    }
  }

  /**
   * The certificate material of `proxy`'s configuration. Only a verified sidecar's identity gets
   * a certificate: a claimed identity (plaintext) must not make the controller issue (and keep)
   * one, and a proxyless client has no SDS.
   */
  private async certificatesFor(proxy: Proxy): Promise<{ certs: ConfigurationCertificates; serial: string }> {
    const caPem = this.options.certificates.caPem;
    if (!getsServiceCertificate(proxy)) return { certs: { caPem }, serial: 'none' };
    const cert = await this.options.certificates.getServiceCertificate(proxy.identity);
    return { certs: { certChainPem: cert.certPem, privateKeyPem: cert.keyPem, caPem }, serial: cert.serialNumber };
  }

  /**
   * The full configuration of proxies like `proxy` for the current MeshSnapshot, generated,
   * validated and encoded once per kind and certificate (see {@link ConfigurationMemo}).
   */
  private fullConfiguration(proxy: Proxy, { certs, serial }: { certs: ConfigurationCertificates; serial: string }): GeneratedConfig {
    return this.memo.full(this.mesh.generation, memoKey(proxy, serial), () => {
      this.metrics.configurationsGenerated.inc();
      for (const type of PROXY_TYPES) this.metrics.typesGenerated.inc({ type: TYPE_SHORT_NAME[type] });
      return fullConfiguration({ context: this.context, proxy, certs, cache: this.checked, interner: this.interner });
    });
  }

  /**
   * `previous`, the snapshot of a connected proxy like `proxy`, with what `regeneration` says
   * generated again from the current MeshSnapshot (`updatedConfiguration`), once per kind,
   * certificate and previous snapshot; undefined when a full generation is needed instead.
   */
  private updatedConfiguration(
    proxy: Proxy,
    { certs, serial }: { certs: ConfigurationCertificates; serial: string },
    regeneration: Regeneration,
    previous: ProxySnapshot,
    dependencies: ReadonlySet<string>,
  ): GeneratedConfig | undefined {
    return this.memo.update(this.mesh.generation, memoKey(proxy, serial), regeneration.types, previous, () => {
      for (const type of regeneration.types) this.metrics.typesGenerated.inc({ type: TYPE_SHORT_NAME[type] });
      return updatedConfiguration({ context: this.context, proxy, certs, cache: this.checked, interner: this.interner }, regeneration, previous, dependencies);
    });
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
    let change: 'all' | MeshChange = NOTHING;
    let rebuiltAt = startedAt;
    const before = this.mesh;
    if (request.configChanged) {
      this.mesh = this.rebuild();
      this.context = new GenerationContext(this.mesh, this.context);
      rebuiltAt = this.timers.now();
      change = request.resync ? 'all' : diffMeshSnapshots(before, this.mesh);
      const connected = new Set(this.registry.proxies().map(proxyKind));
      this.memo.carry(this.mesh.generation, change, request.rotated, (config) => config.ahead || connected.has(proxyKind(config.proxy)));
      this.options.certificates.retain(this.keepsCertificate);
    }
    const diffedAt = this.timers.now();
    const plan = this.pushPlan(before, this.mesh, change);
    const work: { proxy: Proxy; regeneration: Regeneration | undefined }[] = [];
    for (const record of this.registry.connected()) {
      const { proxy, dependencies } = record;
      const rotated = request.rotated.has(proxy.identity);
      // Without recorded dependencies (no configuration yet, or the last failed or broke a rule): in full, on every change.
      if (dependencies === undefined) {
        if (rotated || request.configChanged) work.push({ proxy, regeneration: undefined });
        continue;
      }
      const changed = change === 'all' || affectedBy(change, proxy, dependencies);
      if (!changed && !rotated) continue;
      const regeneration = plan(changed, rotated, proxy.clientType ?? 'envoy');
      if (regeneration.types.size > 0) work.push({ proxy, regeneration });
    }
    let slice = this.timers.now();
    for (const { proxy, regeneration } of work) {
      await this.regenerate(proxy, regeneration);
      // Generation is synchronous: without a break the ADS server could write nothing until
      // every proxy is done. Yield to the event loop every few milliseconds so each proxy's
      // responses go out as soon as its snapshot is set.
      if (this.timers.now() - slice >= PUSH_SLICE_MS) {
        await new Promise<void>((resolve) => setImmediate(resolve));
        slice = this.timers.now();
      }
    }
    this.settled = this.mesh.generation;
    end();
    const fields = {
      reason,
      kinds: [...request.kinds].sort(),
      proxies: work.length,
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
   * What to regenerate of a proxy in a push from `before` to `after` (`typesToRegenerate`, and
   * `resourcesChangedBy`), by whether `change` can alter its configuration (`affected`), whether its
   * certificate rotated and its client type: computed once per push for each of those few cases.
   */
  private pushPlan(before: MeshSnapshot, after: MeshSnapshot, change: 'all' | MeshChange): (affected: boolean, rotated: boolean, clientType: XdsClientType) => Regeneration {
    const found = new Map<string, Regeneration>();
    return (affected, rotated, clientType) => {
      const key = `${affected}|${rotated}|${clientType}`;
      let regeneration = found.get(key);
      if (!regeneration) {
        regeneration = planRegeneration({ before, after, change: affected ? change : NOTHING, certificateRotated: rotated, clientType }, this.context, this.checked);
        found.set(key, regeneration);
      }
      return regeneration;
    };
  }

  /**
   * Regenerates what `regeneration` says of one proxy's resources (every type when absent, or
   * when the proxy has no valid snapshot from a full generation to update), keeping the rest as
   * it is, and publishes its snapshot. Fails closed: a proxy that has a snapshot keeps it when
   * the new resources break a rule (a partial LDS/CDS set would delete working listeners and
   * clusters); a new one gets the valid, referentially closed subset; either way it is
   * regenerated in full on every later change (the fix may be anywhere).
   * @returns false when that failed (the proxy keeps its last good snapshot).
   */
  private async regenerate(proxy: Proxy, regeneration?: Regeneration): Promise<boolean> {
    const types = regeneration?.types;
    const { uuid } = proxy;
    try {
      const certs = await this.certificatesFor(proxy);
      // Disconnected meanwhile, or its UUID is now another proxy's (another identity, or no
      // longer verified): this configuration, with its key, is not for the stream there now.
      const record = this.registry.get(uuid);
      if (!record || proxyKind(record.proxy) !== proxyKind(proxy)) return true;
      const previous = this.options.cache.getSnapshot(uuid);
      const partial = types !== undefined && !PROXY_TYPES.every((t) => types.has(t)) && previous !== undefined && record.dependencies !== undefined;
      const config = (partial && this.updatedConfiguration(proxy, certs, regeneration!, previous, record.dependencies!)) || this.fullConfiguration(proxy, certs);
      this.recordViolations(record, config.violations);
      let snapshot = config.snapshot;
      if (!snapshot) {
        if (previous) {
          this.registry.update(uuid, { dependencies: undefined });
          this.history.failed(uuid, this.mesh.generation);
          return false;
        }
        this.options.logger.warn({ proxy: uuid, identity: proxy.identity, dropped: config.dropped }, 'first configuration of this proxy sent without its invalid resources');
        snapshot = config.validSnapshot!;
      }
      if (previous && snapshot !== previous) this.history.replaced(uuid, { snapshot: previous, generation: record.generation, settled: this.settled });
      if (config.violations.length > 0) this.history.partial(uuid);
      else this.history.complete(uuid);
      // A partial first configuration (violations left out) is retried on every later change too.
      this.registry.update(uuid, {
        dependencies: config.violations.length > 0 ? undefined : config.dependencies,
        lastError: undefined,
        generation: this.mesh.generation,
      });
      if (snapshot === previous) return true;
      this.metrics.proxiesUpdated.inc();
      this.options.cache.setSnapshot(uuid, snapshot);
      return true;
    } catch (err) {
      this.metrics.generationErrors.inc();
      const message = err instanceof Error ? err.message : String(err);
      const record = this.registry.get(uuid);
      if (record?.lastError !== message) {
        this.options.logger.error({ proxy: uuid, identity: proxy.identity, err: message }, 'configuration not generated; proxy keeps its last good one');
      }
      this.registry.update(uuid, { dependencies: undefined, lastError: message }); // retried on every later change
      this.history.failed(uuid, this.mesh.generation);
      return false;
    }
  }

  /**
   * The policy status of every policy object (see `src/status`): accepted, and reached N of M
   * affected proxies, K NACKed, for its current generation. Computed on request.
   * @param syncs what each ADS stream's proxy ACKed (`AdsServer.syncStates`): a proxy's newest stream counts.
   * @param errors the source's errors (manifest errors), which make the objects they name not accepted.
   */
  policyStatuses(syncs: readonly StreamSync[], errors: readonly ObjectError[] = [], kinds?: ReadonlySet<PolicyKind>): PolicyStatus[] {
    const objects = this.policyObjectStates(errors, kinds);
    if (objects.length === 0) return [];
    const index = this.progressIndex(syncs);
    return objects.map((o) => index.status(o));
  }

  /** The newest MeshSnapshot generation whose push is complete (it changes when a push completes). */
  get settledGeneration(): number {
    return this.settled;
  }

  /** The status of one policy object, with the first proxies it waits for; undefined when there is no such object. */
  policyStatusOf(kind: PolicyKind, namespace: string, name: string, syncs: readonly StreamSync[], errors: readonly ObjectError[] = []): PolicyStatusDetail | undefined {
    const object = this.policyObjectStates(errors, new Set([kind])).find((o) => o.kind === kind && o.namespace === namespace && o.name === name);
    return object && this.progressIndex(syncs).detail(object);
  }

  private policyObjectStates(errors: readonly ObjectError[], kinds?: ReadonlySet<PolicyKind>) {
    const mc = this.meshConfigName();
    return policyObjects({ store: this.options.store, mesh: this.mesh, problems: this.problems, errors, versions: this.versions, meshConfigName: `${mc.namespace}/${mc.name}`, kinds });
  }

  /** Each connected proxy's progress (newest stream), indexed for the status. */
  private progressIndex(syncs: readonly StreamSync[]): ProgressIndex {
    const newest = new Map<string, StreamSync>();
    for (const s of syncs) {
      const other = newest.get(s.proxy.uuid);
      if (!other || s.streamId > other.streamId) newest.set(s.proxy.uuid, s);
    }
    const proxies: ProxyProgress[] = [];
    for (const record of this.registry.connected()) {
      const { uuid } = record.proxy;
      const sync = newest.get(uuid);
      const current = { snapshot: this.options.cache.getSnapshot(uuid), generation: record.generation, settled: this.settled };
      const rejected = sync?.rejected;
      const nackThrough = rejected?.snapshot ? this.history.through(uuid, rejected.snapshot, current) : undefined;
      proxies.push({
        uuid,
        identity: record.proxy.identity,
        clientType: record.proxy.clientType ?? 'envoy',
        programmedThrough: sync?.acked ? this.history.through(uuid, sync.acked, current) : undefined,
        nack: rejected && nackThrough !== undefined ? { through: nackThrough, type: rejected.type, message: rejected.message, at: rejected.at } : undefined,
        behind: record.lastError !== undefined
          ? `configuration not generated: ${record.lastError}`
          : record.violations.length > 0
            ? `configuration not sent: ${formatViolation(record.violations[0])}`
            : undefined,
      });
    }
    return new ProgressIndex(proxies, (identity, clientType) => proxyDependencies(this.context, { identity, clientType }));
  }
}

export { encodeResources } from './configuration.js';
export { PROXY_LOG_LIMIT, PROXY_LOG_WINDOW_MS } from './admission.js';
export { DEFAULT_WARM_UP_CONFIGURATION_BYTES, type WarmUpOptions, type WarmUpResult } from './warm-up.js';

/**
 * The identities of `mesh`: those behind its services and the service accounts of its monitored
 * namespaces in `store` (what the controller warms up, and `trellis validate` generates for).
 */
export function meshIdentitiesOf(mesh: MeshSnapshot, store: StoreReader): Set<ServiceIdentity> {
  const set = new Set<ServiceIdentity>(mesh.servicesByIdentity.keys());
  for (const sa of store.list('ServiceAccount')) {
    const ns = sa.metadata.namespace ?? 'default';
    if (mesh.namespaces.has(ns)) set.add(serviceIdentity(ns, sa.metadata.name));
  }
  return set;
}
