/**
 * Kubernetes mode: writes the policy status (`src/status/kubernetes-status.ts`) to the `status`
 * subresource of the policy objects whose CRD has one (IngressBackend, UpstreamTrafficSetting).
 * Only the leader writes; at most one evaluation per interval, and only when something that can
 * change a status happened (a proxy ACKed or NACKed, the store changed, a push completed); at
 * most `maxWritesPerInterval` PATCHes per interval, one at a time, never on the push path.
 * Imported on demand (it loads `@kubernetes/client-node`).
 */
import { CustomObjectsApi, Observable, PatchStrategy, setHeaderOptions, type KubeConfig, type ObservableMiddleware } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { kubernetesStatus, sameStatus, STATUS_SUBRESOURCE_KINDS, type KubernetesPolicyStatus } from '../status/kubernetes-status.js';
import type { PolicyKind } from '../status/object-versions.js';
import type { PolicyStatus } from '../status/policy-status.js';
import { apiClientConfig, apiErrorMessage, apiStatusCode } from '../util/kube-api.js';

/** Which object's status to write. */
export interface StatusTarget {
  readonly group: string;
  readonly version: string;
  readonly plural: string;
  readonly namespace: string;
  readonly name: string;
}

/** Writes one object's `status` (a JSON merge patch of the status subresource). @throws the API client's error (see `apiStatusCode`). */
export type StatusPatcher = (target: StatusTarget, status: KubernetesPolicyStatus) => Promise<void>;

/** How long one status PATCH may wait for the API server's answer, in ms, by default. */
export const PATCH_TIMEOUT_MS = 10_000;

/** Options of {@link statusPatcherFor}. */
export interface StatusPatcherOptions {
  /** How long one PATCH may take, answer included, in ms (default {@link PATCH_TIMEOUT_MS}); then it fails. */
  readonly timeoutMs?: number;
}

/**
 * A {@link StatusPatcher} over `kubeConfig` (client-node's `CustomObjectsApi`). Each PATCH is
 * bounded by `timeoutMs` (an `AbortSignal` set on the request by a client-node middleware): one
 * the API server accepts and never answers fails with "no answer in N ms" (no HTTP status, as an
 * unreachable server), and the writer tries again at its next evaluation.
 */
export function statusPatcherFor(kubeConfig: KubeConfig, options: StatusPatcherOptions = {}): StatusPatcher {
  const api = apiClientConfig(kubeConfig).makeApiClient(CustomObjectsApi);
  const timeoutMs = options.timeoutMs ?? PATCH_TIMEOUT_MS;
  const bounded: ObservableMiddleware = {
    pre: (request) => {
      request.setSignal(AbortSignal.timeout(timeoutMs));
      return new Observable(Promise.resolve(request));
    },
    post: (response) => new Observable(Promise.resolve(response)),
  };
  const requestOptions = setHeaderOptions('Content-Type', PatchStrategy.MergePatch, { middleware: [bounded], middlewareMergeStrategy: 'append' });
  return async (t, status) => {
    try {
      await api.patchNamespacedCustomObjectStatus(
        { group: t.group, version: t.version, namespace: t.namespace, plural: t.plural, name: t.name, body: { status } },
        requestOptions,
      );
    } catch (err) {
      if ((err as { name?: unknown } | null)?.name === 'AbortError') throw new Error(`no answer from the API server in ${timeoutMs} ms`, { cause: err });
      throw err;
    }
  };
}

/** Options of {@link PolicyStatusWriter}. */
export interface PolicyStatusWriterOptions {
  readonly patch: StatusPatcher;
  /** The current statuses of the objects of `kinds` (the controller's, computed on call). */
  readonly statuses: (kinds: ReadonlySet<PolicyKind>) => readonly PolicyStatus[];
  /** The object's `status` as the store has it (the last one the API server told the watch). */
  readonly storedStatus: (kind: PolicyKind, namespace: string, name: string) => unknown;
  /** Whether this replica is the leader (only the leader writes). */
  readonly isLeader: () => boolean;
  /** A number that changes when a push completes (the controller's settled generation). */
  readonly generation: () => number;
  readonly logger: Logger;
  /** How often it may evaluate, in ms (default 1000). */
  readonly intervalMs?: number;
  /** Most PATCHes per interval (default 10); the rest wait for the next. */
  readonly maxWritesPerInterval?: number;
}

/** How long {@link PolicyStatusWriter.stop} waits for a write in progress, in ms (an API server that never answers must not hold the controller's shutdown). */
export const STOP_WAIT_MS = 5000;

/** How many objects' last write errors are remembered (to log each distinct one once). */
const MAX_REMEMBERED_ERRORS = 1000;

/** What a status says, its transition times aside. */
function fingerprint(status: KubernetesPolicyStatus): string {
  return JSON.stringify({ ...status, conditions: status.conditions.map((c) => ({ ...c, lastTransitionTime: '' })) });
}

/** See the module comment. */
export class PolicyStatusWriter {
  private timer: NodeJS.Timeout | undefined;
  private dirty = true;
  private running: Promise<void> | undefined;
  private seenGeneration = -1;
  /** What was last written per object (until the watch brings it back into the store). */
  private readonly written = new Map<string, string>();
  /** The last error logged per object (each distinct one once). */
  private readonly errors = new Map<string, string>();
  private readonly kinds = new Set(STATUS_SUBRESOURCE_KINDS.keys());

  constructor(private readonly options: PolicyStatusWriterOptions) {}

  /** Starts evaluating every interval. */
  start(): void {
    this.timer = setInterval(() => {
      if (!this.running) this.running = this.tick().finally(() => (this.running = undefined));
    }, this.options.intervalMs ?? 1000);
    this.timer.unref();
  }

  /** Something that can change a status happened. */
  poke(): void {
    this.dirty = true;
  }

  /** Stops; waits for a write in progress, at most {@link STOP_WAIT_MS} (then leaves it: the process is ending). */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    const running = this.running;
    if (!running) return;
    let timer: NodeJS.Timeout | undefined;
    const gaveUp = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), STOP_WAIT_MS)));
    const left = await Promise.race([running.then(() => false), gaveUp]);
    clearTimeout(timer);
    if (left) this.options.logger.warn({ waitedMs: STOP_WAIT_MS }, 'policy status write still in progress at stop: left (the API server does not answer)');
  }

  /** One evaluation: the statuses that differ from what the objects have are written, up to the per-interval limit. Never rejects. */
  async tick(): Promise<void> {
    if (!this.options.isLeader()) {
      this.written.clear();
      this.dirty = true; // a new leader evaluates everything
      return;
    }
    const generation = this.options.generation();
    if (!this.dirty && generation === this.seenGeneration) return;
    this.dirty = false;
    this.seenGeneration = generation;
    const now = new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
    const due: { key: string; target: StatusTarget; status: KubernetesPolicyStatus }[] = [];
    for (const s of this.options.statuses(this.kinds)) {
      const resource = STATUS_SUBRESOURCE_KINDS.get(s.kind);
      if (!resource || s.generation === 0) continue;
      const key = `${s.kind}/${s.namespace}/${s.name}`;
      const stored = this.options.storedStatus(s.kind, s.namespace, s.name);
      const status = kubernetesStatus(s, stored, now);
      if (sameStatus(status, stored)) {
        this.written.delete(key);
        continue;
      }
      // Written already, not back from the watch yet: the same again would only churn.
      if (this.written.get(key) === fingerprint(status)) continue;
      due.push({ key, target: { ...resource, namespace: s.namespace, name: s.name }, status });
    }
    const max = this.options.maxWritesPerInterval ?? 10;
    if (due.length > max) this.dirty = true; // the rest at the next interval
    for (const { key, target, status } of due.slice(0, max)) {
      try {
        await this.options.patch(target, status);
        this.written.set(key, fingerprint(status));
        this.errors.delete(key);
      } catch (err) {
        if (apiStatusCode(err) === 404) continue; // deleted meanwhile
        this.dirty = true;
        const message = apiErrorMessage(err);
        if (this.errors.get(key) !== message) {
          if (this.errors.size >= MAX_REMEMBERED_ERRORS) this.errors.clear();
          this.errors.set(key, message);
          this.options.logger.warn({ object: key, err: message }, 'policy status not written; retrying');
        }
        if (apiStatusCode(err) === undefined) return; // the API server is unreachable: the next interval
      }
    }
  }
}
