import { hostname } from 'node:os';
import { CoordinationV1Api, V1MicroTime, type KubeConfig, type V1Lease } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { REAL_TIMERS, type Timers } from '../messaging/debouncer.js';
import { apiClientConfig, apiErrorMessage, apiStatusCode } from '../util/kube-api.js';

/** Default name of the controller's Lease, in its namespace. */
export const DEFAULT_LEASE_NAME = 'trellis-controller-leader';
/** How long a Lease stays valid after its last renewal, in seconds. */
export const DEFAULT_LEASE_DURATION_SECONDS = 15;
/** How often the leader renews, and a candidate retries, in ms. */
export const DEFAULT_RENEW_INTERVAL_MS = 5_000;

/** The narrow part of `coordination.k8s.io/v1` the elector needs (client-node's `CoordinationV1Api` has it). */
export interface LeaseApi {
  /** GET; rejects with status 404 when absent. */
  readNamespacedLease(param: { name: string; namespace: string }): Promise<V1Lease>;
  /** POST; rejects with status 409 when it exists. */
  createNamespacedLease(param: { namespace: string; body: V1Lease }): Promise<V1Lease>;
  /** PUT with `metadata.resourceVersion`; rejects with status 409 when that is not the current one. */
  replaceNamespacedLease(param: { name: string; namespace: string; body: V1Lease }): Promise<V1Lease>;
}

/** The Lease API of a kubeconfig. */
export function leaseApiFor(kubeConfig: KubeConfig): LeaseApi {
  return apiClientConfig(kubeConfig).makeApiClient(CoordinationV1Api);
}

/** The identity a replica holds the Lease under: `$POD_NAME` in a pod, else `<hostname>_<pid>`. */
export function defaultHolderIdentity(env: NodeJS.ProcessEnv = process.env): string {
  return env.POD_NAME || `${hostname()}_${process.pid}`;
}

/**
 * A Lease time as the client returns it: typed `Date`, but a string (RFC 3339 with microseconds)
 * when read back, since client-node 1.x does not deserialise `MicroTime`. Undefined when absent
 * or unparseable.
 */
export function leaseTime(value: Date | string | undefined | null): number | undefined {
  if (value === undefined || value === null) return undefined;
  const ms = value instanceof Date ? value.getTime() : Date.parse(value);
  return Number.isFinite(ms) ? ms : undefined;
}

/** Options of {@link LeaderElector}. */
export interface LeaderElectorOptions {
  readonly api: LeaseApi;
  readonly namespace: string;
  /** Lease name (default {@link DEFAULT_LEASE_NAME}). */
  readonly name?: string;
  /** This replica's identity (default {@link defaultHolderIdentity}). */
  readonly identity?: string;
  readonly leaseDurationSeconds?: number;
  readonly renewIntervalMs?: number;
  readonly timers?: Timers;
  readonly logger?: Logger;
  /** Called when this replica becomes the leader. */
  readonly onStartedLeading?: () => void;
  /** Called when it stops being the leader (lost the Lease, could not renew in time, or stopped). */
  readonly onStoppedLeading?: () => void;
}

/**
 * Leader election on a `coordination.k8s.io/v1` Lease, in the manner of client-go's
 * `leaderelection` package:
 *
 * - every replica tries every `renewIntervalMs`; the Lease is created when absent (POST: one
 *   creator wins, the others get 409), taken over when its holder has not renewed it for
 *   `leaseDurationSeconds`, or when it was released (no `holderIdentity`);
 * - expiry is judged on this replica's own clock, from when it last saw the Lease record change
 *   (not from the holder's `renewTime`), so clock skew between nodes does not matter;
 * - every write is a PUT carrying the `resourceVersion` that was read: of two replicas racing for
 *   an expired Lease one gets 409 and stays a follower, so there is one holder at a time;
 * - a leader that cannot renew for two thirds of the lease duration steps down before anyone else
 *   may take over; {@link stop} releases the Lease so that another replica takes over at once.
 */
export class LeaderElector {
  readonly identity: string;
  readonly #api: LeaseApi;
  readonly #namespace: string;
  readonly #name: string;
  readonly #durationMs: number;
  readonly #intervalMs: number;
  readonly #timers: Timers;
  readonly #logger: Logger | undefined;
  #leading = false;
  #stopped = true;
  #timer: unknown = undefined;
  #running: Promise<void> | undefined;
  /** The record last seen (holder, renewTime, resourceVersion) and when it was first seen, by our clock. */
  #observed: { key: string; at: number } | undefined;
  #lastRenewal = 0;

  constructor(private readonly options: LeaderElectorOptions) {
    this.identity = options.identity ?? defaultHolderIdentity();
    this.#api = options.api;
    this.#namespace = options.namespace;
    this.#name = options.name ?? DEFAULT_LEASE_NAME;
    this.#durationMs = (options.leaseDurationSeconds ?? DEFAULT_LEASE_DURATION_SECONDS) * 1000;
    this.#intervalMs = options.renewIntervalMs ?? DEFAULT_RENEW_INTERVAL_MS;
    this.#timers = options.timers ?? REAL_TIMERS;
    this.#logger = options.logger;
  }

  /** True while this replica holds the Lease. */
  get isLeader(): boolean {
    return this.#leading;
  }

  /** Starts trying to acquire (then renewing) the Lease; the first attempt runs now. */
  start(): void {
    if (!this.#stopped) return;
    this.#stopped = false;
    this.#tick();
  }

  /**
   * One attempt to acquire or renew, without the timer (used by {@link start}'s loop; exposed for
   * tests that drive time themselves).
   * @returns whether this replica holds the Lease afterwards.
   */
  async tryAcquireOrRenew(): Promise<boolean> {
    const now = this.#timers.now();
    let lease: V1Lease | undefined;
    try {
      lease = await this.#api.readNamespacedLease({ name: this.#name, namespace: this.#namespace });
    } catch (err) {
      if (apiStatusCode(err) !== 404) return this.#failed(err, now);
    }
    if (!lease) {
      try {
        await this.#api.createNamespacedLease({ namespace: this.#namespace, body: this.#record(undefined, now) });
        return this.#won(now);
      } catch (err) {
        return apiStatusCode(err) === 409 ? this.#lost(undefined) : this.#failed(err, now);
      }
    }

    const spec = lease.spec ?? {};
    const holder = spec.holderIdentity ?? '';
    const key = JSON.stringify([holder, String(spec.renewTime ?? ''), lease.metadata?.resourceVersion ?? '']);
    if (this.#observed?.key !== key) this.#observed = { key, at: now };
    const durationMs = (spec.leaseDurationSeconds ?? this.#durationMs / 1000) * 1000;
    const expired = this.#observed.at + durationMs <= now;
    if (holder !== '' && holder !== this.identity && !expired) return this.#lost(holder);

    try {
      await this.#api.replaceNamespacedLease({ name: this.#name, namespace: this.#namespace, body: this.#record(lease, now) });
      return this.#won(now);
    } catch (err) {
      return apiStatusCode(err) === 409 ? this.#lost(holder || undefined) : this.#failed(err, now);
    }
  }

  /**
   * Stops trying; when leading, releases the Lease (clears `holderIdentity`, so another replica
   * takes over at its next attempt instead of waiting for expiry) and calls `onStoppedLeading`.
   */
  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    if (this.#timer !== undefined) this.#timers.clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#running;
    if (!this.#leading) return;
    this.#setLeading(false);
    try {
      const lease = await this.#api.readNamespacedLease({ name: this.#name, namespace: this.#namespace });
      if (lease.spec?.holderIdentity !== this.identity) return;
      const now = this.#timers.now();
      const body: V1Lease = {
        ...lease,
        spec: { ...lease.spec, holderIdentity: undefined, leaseDurationSeconds: 1, renewTime: new V1MicroTime(now), acquireTime: undefined },
      };
      await this.#api.replaceNamespacedLease({ name: this.#name, namespace: this.#namespace, body });
      this.#logger?.info({ lease: `${this.#namespace}/${this.#name}`, identity: this.identity }, 'leader lease released');
    } catch (err) {
      this.#logger?.warn({ err: apiErrorMessage(err) }, 'could not release the leader lease; it expires on its own');
    }
  }

  #tick(): void {
    if (this.#stopped) return;
    this.#running = this.tryAcquireOrRenew().then(
      () => undefined,
      (err: unknown) => {
        this.#logger?.error({ err }, 'leader election attempt failed');
      },
    );
    void this.#running.then(() => {
      if (this.#stopped) return;
      this.#timer = this.#timers.setTimeout(() => this.#tick(), this.#intervalMs);
      (this.#timer as { unref?: () => void } | undefined)?.unref?.();
    });
  }

  /** The Lease record this replica writes when it acquires or renews `current` (undefined: create). */
  #record(current: V1Lease | undefined, now: number): V1Lease {
    const spec = current?.spec ?? {};
    const renewing = spec.holderIdentity === this.identity;
    return {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: current?.metadata
        ? { ...current.metadata }
        : { name: this.#name, namespace: this.#namespace, labels: { 'app.kubernetes.io/name': 'trellis' } },
      spec: {
        holderIdentity: this.identity,
        leaseDurationSeconds: this.#durationMs / 1000,
        // MicroTime: client-node writes it with microseconds, as the API server requires.
        acquireTime: renewing && spec.acquireTime ? new V1MicroTime(leaseTime(spec.acquireTime) ?? now) : new V1MicroTime(now),
        renewTime: new V1MicroTime(now),
        leaseTransitions: renewing ? (spec.leaseTransitions ?? 0) : current ? (spec.leaseTransitions ?? 0) + 1 : 0,
      },
    };
  }

  #won(now: number): boolean {
    this.#lastRenewal = now;
    this.#observed = undefined;
    if (!this.#leading) {
      this.#logger?.info({ lease: `${this.#namespace}/${this.#name}`, identity: this.identity }, 'became the leader');
      this.#setLeading(true);
    }
    return true;
  }

  #lost(holder: string | undefined): boolean {
    if (this.#leading) {
      this.#logger?.warn({ lease: `${this.#namespace}/${this.#name}`, holder }, 'leadership lost to another replica');
      this.#setLeading(false);
    }
    return false;
  }

  #failed(err: unknown, now: number): boolean {
    this.#logger?.warn({ lease: `${this.#namespace}/${this.#name}`, err: apiErrorMessage(err) }, 'leader lease not acquired or renewed');
    // Step down before the Lease can expire for the others (client-go's renew deadline).
    if (this.#leading && now - this.#lastRenewal >= (this.#durationMs * 2) / 3) {
      this.#logger?.warn({ lease: `${this.#namespace}/${this.#name}` }, 'leader lease not renewed in time; stepping down');
      this.#setLeading(false);
    }
    return this.#leading;
  }

  #setLeading(leading: boolean): void {
    if (this.#leading === leading) return;
    this.#leading = leading;
    try {
      if (leading) this.options.onStartedLeading?.();
      else this.options.onStoppedLeading?.();
    } catch (err) {
      this.#logger?.error({ err }, 'leader election callback threw');
    }
  }
}
