/**
 * Kubernetes mode's replica coordination (shared CA Secret, leader Lease). Imported on demand by
 * the composition root (`src/main.ts`), in Kubernetes mode only: it loads `@kubernetes/client-node`.
 */
import type { KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { CertificateAuthority } from '../certificate/authority.js';
import { DEFAULT_CA_SECRET_NAME, loadOrCreateCaSecret, secretApiFor } from '../certificate/secret-store.js';
import { DEFAULT_LEASE_NAME, LeaderElector, leaseApiFor } from './leader-election.js';

/** Options of {@link startReplicaCoordination}. */
export interface ReplicaCoordinationOptions {
  readonly kubeConfig: KubeConfig;
  /** Namespace of the CA Secret and the Lease. */
  readonly namespace: string;
  readonly caSecretName?: string;
  readonly leaseName?: string;
  /** Lease holder identity (default: `$POD_NAME`, else hostname and pid). */
  readonly identity?: string;
  readonly logger: Logger;
  /** Retry delays while the CA Secret cannot be read or created, in ms (default 1 s doubling to 10 s). */
  readonly retry?: { readonly initialMs: number; readonly maxMs: number };
  /** Ends the wait for the CA Secret (the controller is stopping): the start then rejects. */
  readonly signal?: AbortSignal;
}

/** Resolves after `ms`, or at once when `signal` aborts (then or before). */
function abortableDelay(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}

/** What {@link startReplicaCoordination} gives the composition root. */
export interface ReplicaCoordination {
  /** The mesh CA shared by every replica (from the Secret). */
  readonly ca: CertificateAuthority;
  /** The running leader election. */
  readonly elector: LeaderElector;
  /** Stops the election and releases the Lease when held. */
  stop(): Promise<void>;
}

/**
 * Kubernetes mode's replica coordination: loads (or creates, once across replicas) the CA root
 * from its Secret, retrying with backoff while the API server is unreachable, then starts leader
 * election on the Lease. The leader is the one replica that does once-only work. Root rotation is
 * that work; it is not automated yet (the root is valid 10 years): the leader logs that it holds the
 * Lease, and rotating means replacing the Secret (see deploy/README.md) and restarting the replicas.
 */
export async function startReplicaCoordination(options: ReplicaCoordinationOptions): Promise<ReplicaCoordination> {
  const secretName = options.caSecretName ?? DEFAULT_CA_SECRET_NAME;
  const logger = options.logger;
  const retry = options.retry ?? { initialMs: 1000, maxMs: 10_000 };
  let delay = retry.initialMs;
  let ca: CertificateAuthority | undefined;
  for (;;) {
    if (options.signal?.aborted) throw new Error('stopped while waiting for the mesh CA Secret');
    try {
      ca = (await loadOrCreateCaSecret({ api: secretApiFor(options.kubeConfig), namespace: options.namespace, name: secretName, logger })).ca;
      break;
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      // A Secret that exists but is not a CA is never overwritten: that needs an operator.
      if (/ has no data\.| is not a valid | does not match | expired at | is not a CA certificate/.test(message)) throw err;
      logger.warn({ err: message, retryInMs: delay }, 'mesh CA Secret not available yet; retrying');
      await abortableDelay(delay, options.signal);
      delay = Math.min(delay * 2, retry.maxMs);
    }
  }
  const elector = new LeaderElector({
    api: leaseApiFor(options.kubeConfig),
    namespace: options.namespace,
    name: options.leaseName ?? DEFAULT_LEASE_NAME,
    identity: options.identity,
    logger: logger.child({ component: 'leader-election' }),
    onStartedLeading: () => logger.info({ lease: options.leaseName ?? DEFAULT_LEASE_NAME }, 'this replica is the leader (once-only work: CA root rotation)'),
    onStoppedLeading: () => logger.info('this replica is no longer the leader'),
  });
  elector.start();
  return { ca, elector, stop: () => elector.stop() };
}
