/**
 * Bootstrap Secrets get their Pod as owner, so that Kubernetes' garbage collector deletes a
 * Secret with its pod. At a pod's CREATE admission the pod has neither a UID nor (with a
 * `generateName`) a name: the API server gives both only when it stores the pod, after every
 * admission webhook. So the injector creates the Secret at admission (a pod must never start
 * without it) and {@link SecretAdopter} then looks for the stored pod by its
 * `osm-proxy-uuid` label and writes the Secret's `ownerReferences`. A Secret whose pod is not
 * stored within `adoptTimeoutMs` (a later admission refused it, it was deleted at once, or the
 * AdmissionReview was not the API server's) is deleted: nothing else would ever delete it.
 */
import type { Logger } from 'pino';
import { boundedText } from '../util/bounded-text.js';
import { MAX_UUIDS_PER_LIST, type InjectorCluster } from './cluster.js';
import { BOOTSTRAP_SECRET_PREFIX } from './inject.js';

/** Options of {@link SecretAdopter}. */
export interface SecretAdopterOptions {
  readonly cluster: InjectorCluster;
  readonly logger?: Logger;
  /** How long a Secret waits for its pod before it is deleted, in ms (default {@link DEFAULT_ADOPT_TIMEOUT_MS}). */
  readonly adoptTimeoutMs?: number;
  /** Time between two looks for the pods, in ms (default {@link DEFAULT_ADOPT_POLL_MS}). */
  readonly pollMs?: number;
  /** Secrets waiting at most (default {@link DEFAULT_MAX_PENDING_ADOPTIONS}); past it {@link SecretAdopter.hasRoom} is false. */
  readonly maxPending?: number;
  /** The clock, in ms (default `Date.now`). */
  readonly now?: () => number;
}

/** 2 minutes: the API server's own webhook timeouts (at most 30 s each) and a slow etcd write fit many times. */
export const DEFAULT_ADOPT_TIMEOUT_MS = 120_000;
/** 1 s. */
export const DEFAULT_ADOPT_POLL_MS = 1000;
/** 4096: at the default 20 creations a second for 2 minutes, 2400 wait. */
export const DEFAULT_MAX_PENDING_ADOPTIONS = 4096;

/** See the module comment. Start it with {@link start}; {@link stop} ends its timer (what waits stays unowned). */
export class SecretAdopter {
  /** namespace → uuid → when the Secret was created (ms). */
  readonly #pending = new Map<string, Map<string, number>>();
  #size = 0;
  #timer: NodeJS.Timeout | undefined;
  #pass: Promise<void> | undefined;
  readonly #timeoutMs: number;
  readonly #pollMs: number;
  readonly #maxPending: number;
  readonly #now: () => number;

  constructor(private readonly options: SecretAdopterOptions) {
    this.#timeoutMs = options.adoptTimeoutMs ?? DEFAULT_ADOPT_TIMEOUT_MS;
    this.#pollMs = options.pollMs ?? DEFAULT_ADOPT_POLL_MS;
    this.#maxPending = options.maxPending ?? DEFAULT_MAX_PENDING_ADOPTIONS;
    this.#now = options.now ?? Date.now;
  }

  /** Secrets waiting for their pod. */
  get pending(): number {
    return this.#size;
  }

  /** Whether another Secret can wait (the injector refuses a pod when not: its Secret would never be owned nor deleted). */
  hasRoom(): boolean {
    return this.#size < this.#maxPending;
  }

  /** Lets the bootstrap Secret of `uuid` in `namespace` wait for its pod (a second call of the same is a no-op). */
  track(namespace: string, uuid: string): void {
    let uuids = this.#pending.get(namespace);
    if (!uuids) this.#pending.set(namespace, (uuids = new Map()));
    if (uuids.has(uuid)) return;
    uuids.set(uuid, this.#now());
    this.#size++;
  }

  /** Starts looking every `pollMs`. */
  start(): this {
    const tick = () => {
      this.#pass = this.adoptOnce().finally(() => {
        this.#pass = undefined;
        if (this.#timer) this.#timer = setTimeout(tick, this.#pollMs).unref();
      });
    };
    this.#timer = setTimeout(tick, this.#pollMs).unref();
    return this;
  }

  /** Stops looking, after the look in progress. */
  async stop(): Promise<void> {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#pass;
  }

  #forget(namespace: string, uuid: string): void {
    const uuids = this.#pending.get(namespace);
    if (uuids?.delete(uuid)) this.#size--;
    if (uuids?.size === 0) this.#pending.delete(namespace);
  }

  /**
   * One look: for each namespace, its waiting UUIDs' pods (a list request per
   * {@link MAX_UUIDS_PER_LIST}); a found pod becomes its Secret's owner, a Secret waiting past
   * the timeout is deleted. An API error is logged and tried again at the next look.
   */
  async adoptOnce(): Promise<void> {
    const log = this.options.logger;
    const { cluster } = this.options;
    for (const [namespace, uuids] of [...this.#pending]) {
      const waiting = [...uuids.keys()];
      for (let i = 0; i < waiting.length; i += MAX_UUIDS_PER_LIST) {
        const batch = waiting.slice(i, i + MAX_UUIDS_PER_LIST);
        try {
          const pods = new Map((await cluster.listInjectedPods(namespace, batch)).map((p) => [p.uuid, p]));
          for (const uuid of batch) {
            const secret = `${BOOTSTRAP_SECRET_PREFIX}${uuid}`;
            const pod = pods.get(uuid);
            if (pod) {
              const found = await cluster.setSecretOwner(namespace, secret, uuid, pod);
              log?.debug({ namespace, secret, pod: pod.name, found }, 'bootstrap Secret owned by its pod');
              this.#forget(namespace, uuid);
            } else if (this.#now() - (uuids.get(uuid) ?? 0) >= this.#timeoutMs) {
              await cluster.deleteSecret(namespace, secret);
              log?.info({ namespace, secret, timeoutMs: this.#timeoutMs }, 'bootstrap Secret deleted: no pod of its proxy UUID was stored');
              this.#forget(namespace, uuid);
            }
          }
        } catch (err) {
          log?.warn({ namespace, err: boundedText(err instanceof Error ? err.message : String(err), 1024) }, 'bootstrap Secrets not owned yet');
        }
      }
    }
  }
}
