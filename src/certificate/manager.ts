import type { Logger } from 'pino';
import { proxyCommonName, XDS_SERVER_SPIFFE_ID, type ProxyKind, type ServiceIdentity } from '../proxy/types.js';
import { systemClock, type CertificateAuthority, type Clock, type IssuedCertificate } from './authority.js';
import { serviceCertificateCommonName, spiffeId } from './identity.js';

/** Default lifetime of service certificates, in seconds (24 h, OSM's default `serviceCertValidityDuration`). */
export const DEFAULT_SERVICE_CERT_VALIDITY_SECONDS = 24 * 60 * 60;
/** Default lifetime of the controller's own xDS server certificate, in seconds (365 days). */
export const DEFAULT_SERVER_CERT_VALIDITY_SECONDS = 365 * 24 * 60 * 60;
/** CommonName of the controller's xDS server certificate. */
export const SERVER_COMMON_NAME = 'trellis-controller';
/** DNS names always put in the controller's xDS server certificate (beside those asked for). */
export const DEFAULT_SERVER_DNS_NAMES: readonly string[] = [
  'localhost',
  'osm-controller.osm-system.svc',
  'osm-controller.osm-system.svc.cluster.local',
];
/** IP addresses always put in the controller's xDS server certificate (beside those asked for). */
export const DEFAULT_SERVER_IP_ADDRESSES: readonly string[] = ['127.0.0.1', '::1'];
/**
 * Longest time between two rotation checks, in ms (5 min). The timer normally fires at the
 * earliest renewal time; the cap bounds the damage of a wall-clock jump or a suspended host,
 * and keeps delays below `setTimeout`'s 2^31−1 ms limit.
 */
export const MAX_CHECK_INTERVAL_MS = 5 * 60_000;
/** Delay before retrying a rotation that failed, in ms. */
export const ROTATION_RETRY_MS = 30_000;

/** Clock and one-shot timers, injectable so that tests drive rotation without waiting. */
export interface Timers extends Clock {
  /** Calls `fn` once after `ms` milliseconds; returns a handle for {@link Timers.clearTimer}. */
  setTimer(fn: () => void, ms: number): unknown;
  /** Cancels a timer set by {@link Timers.setTimer}; a no-op for a fired or cleared one. */
  clearTimer(handle: unknown): void;
}

/** {@link Timers} on the system clock and Node's `setTimeout` (unref'd: they never hold the process open). */
export const systemTimers: Timers = {
  now: systemClock.now,
  setTimer: (fn, ms) => setTimeout(fn, ms).unref(),
  clearTimer: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

/** Options of {@link CertificateManager}. */
export interface CertificateManagerOptions {
  /** The CA that signs every certificate. */
  ca: CertificateAuthority;
  /** Lifetime of service certificates, in seconds; defaults to {@link DEFAULT_SERVICE_CERT_VALIDITY_SECONDS}. */
  validitySeconds?: number;
  /** Clock and timers; default {@link systemTimers}. Must be the clock the CA was loaded with. */
  timers?: Timers;
  /** Where rotations and failures are logged; nothing is logged without one. */
  logger?: Logger;
  /**
   * Issue service certificates deterministically (see {@link deterministicWindowStart} and
   * `CertificateAuthority.issueDeterministic`): replicas sharing the CA serve identical SDS
   * resources. Default false (random keys and serials).
   */
  deterministic?: boolean;
}

/**
 * Start of the issuance window containing `now`, in ms since the epoch, for deterministic service
 * certificates of `validitySeconds`: windows are `V − ⌊V/3⌋` long (V in ms) and aligned on the
 * epoch, so a certificate issued for a window (valid from its start for V) is due for renewal
 * ({@link renewalTime}: a third of its lifetime left) exactly when the next window starts, and every
 * replica, whenever it asks within a window, issues the same certificate.
 */
export function deterministicWindowStart(now: number, validitySeconds: number): number {
  const lifetime = validitySeconds * 1000;
  const window = lifetime - Math.floor(lifetime / 3);
  return Math.floor(now / window) * window;
}

/** Listener of {@link CertificateManager.onRotated}: the identity whose service certificate changed. */
export type RotationListener = (identity: ServiceIdentity) => void;

interface CacheEntry {
  readonly cert: IssuedCertificate;
  /** When to rotate, ms since the epoch (see {@link renewalTime}). */
  readonly renewAt: number;
  /** After a failed rotation, no new attempt before this time (ms since the epoch). */
  retryAt?: number;
}

/**
 * When a certificate should be rotated, in ms since the epoch: once less than a third of its
 * lifetime remains (the lifetime counted from issuance, `issuedAt`, to notAfter). A 24 h
 * certificate is thus rotated after 16 h, leaving 8 h for every proxy to receive the new
 * one over SDS. This is OSM's rule (`ShouldRotate`: renew when less than validity/3 remains).
 */
export function renewalTime(issuedAt: number, notAfter: Date): number {
  const end = notAfter.getTime();
  return end - Math.floor((end - issuedAt) / 3);
}

/**
 * Issues and rotates the mesh's certificates.
 *
 * - Service certificates (one per {@link ServiceIdentity}; served over SDS as
 *   `service-cert`, per proxy): CN `<sa>.<ns>.cluster.local`, URI SAN
 *   `spiffe://cluster.local/ns/<ns>/sa/<sa>`, DNS SAN the CN, usage both (client and server).
 *   They are cached; concurrent requests for one identity share a single issuance; they are
 *   rotated once less than a third of their lifetime remains (see {@link renewalTime}), by a
 *   timer and also on demand when one is asked for past its renewal time. Every rotation is
 *   announced to {@link CertificateManager.onRotated} listeners with the identity only, so the
 *   controller pushes SDS to that identity's proxies and no others.
 * - xDS client certificates for proxies ({@link CertificateManager.issueProxyCertificate}) and the
 *   controller's xDS server certificate ({@link CertificateManager.issueServerCertificate}):
 *   issued on request, neither cached nor rotated here.
 */
export class CertificateManager {
  readonly #ca: CertificateAuthority;
  readonly #timers: Timers;
  readonly #logger: Logger | undefined;
  readonly #deterministic: boolean;
  #validitySeconds: number;
  readonly #cache = new Map<ServiceIdentity, CacheEntry>();
  readonly #inflight = new Map<ServiceIdentity, Promise<IssuedCertificate>>();
  readonly #listeners = new Set<RotationListener>();
  /** Which identities' certificates are kept (see {@link retain}); all until it is called. */
  #keep: (identity: ServiceIdentity) => boolean = () => true;
  #timer: unknown = undefined;
  #timerDueAt = Infinity;
  #stopped = false;

  /** @throws Error when `validitySeconds` is not a positive integer. */
  constructor(options: CertificateManagerOptions) {
    this.#ca = options.ca;
    this.#timers = options.timers ?? systemTimers;
    this.#logger = options.logger;
    this.#deterministic = options.deterministic ?? false;
    this.#validitySeconds = checkValidity(options.validitySeconds ?? DEFAULT_SERVICE_CERT_VALIDITY_SECONDS);
  }

  /** The root certificate, PEM (the trust anchor for `root-cert-for-mtls-*` secrets). */
  get caPem(): string {
    return this.#ca.caPem;
  }

  /** Lifetime of service certificates issued from now on, in seconds. */
  get validitySeconds(): number {
    return this.#validitySeconds;
  }

  /**
   * Changes the lifetime of service certificates issued from now on (MeshConfig
   * `certificate.serviceCertValidityDuration`), in seconds. Certificates already issued keep
   * their lifetime and are rotated on their own schedule; their successors get the new one.
   * @throws Error when `seconds` is not a positive integer.
   */
  setValidity(seconds: number): void {
    this.#validitySeconds = checkValidity(seconds);
  }

  /**
   * The current service certificate of `identity`, issued on first use and cached.
   * Concurrent calls for the same identity share one issuance. A cached certificate past its
   * renewal time is rotated before it is returned (and listeners are told); if that rotation
   * fails, the current certificate is returned while it is still valid.
   * @throws Error when issuance fails and there is no valid certificate (the next call tries
   *   again), or after {@link stop}.
   */
  async getServiceCertificate(identity: ServiceIdentity): Promise<IssuedCertificate> {
    if (this.#stopped) throw new Error('CertificateManager is stopped');
    const entry = this.#cache.get(identity);
    const now = this.#timers.now();
    if (entry && now < entry.renewAt) return entry.cert;
    if (entry && now < entry.cert.notAfter.getTime()) {
      // Due for rotation but still valid: a failed rotation falls back to the current
      // certificate, and after a failure no new attempt is made before its retry time.
      if (entry.retryAt !== undefined && now < entry.retryAt) return entry.cert;
      return this.#rotate(identity).catch((err: unknown) => {
        this.#logger?.error({ err, identity }, 'service certificate rotation failed; the current certificate stays in use');
        return entry.cert;
      });
    }
    return this.#rotate(identity);
  }

  /** The cached service certificate of `identity`, without issuing one; `undefined` when none. */
  peekServiceCertificate(identity: ServiceIdentity): IssuedCertificate | undefined {
    return this.#cache.get(identity)?.cert;
  }

  /** Drops the cached certificate of an identity that no proxy uses any more (no rotation, no event). */
  forget(identity: ServiceIdentity): void {
    this.#cache.delete(identity);
  }

  /** How many service certificates are cached. */
  get size(): number {
    return this.#cache.size;
  }

  /**
   * Sets which identities' service certificates are kept, and applies it at once: every cached
   * certificate whose identity `keep` rejects is forgotten ({@link forget}). From then on, a
   * certificate issued for a rejected identity is returned but not cached, and the rotation
   * timer forgets a rejected identity's certificate instead of rotating it. The owner calls it
   * again when what `keep` answers may have changed (the mesh changed, a proxy left).
   * @returns the identities forgotten now.
   */
  retain(keep: (identity: ServiceIdentity) => boolean): ServiceIdentity[] {
    this.#keep = keep;
    const forgotten: ServiceIdentity[] = [];
    for (const identity of [...this.#cache.keys()]) {
      if (keep(identity)) continue;
      this.#cache.delete(identity);
      forgotten.push(identity);
    }
    if (forgotten.length > 0) {
      this.#logger?.debug({ identities: forgotten.length }, 'service certificates of identities no longer in the mesh forgotten');
      this.#schedule();
    }
    return forgotten;
  }

  /**
   * Registers `listener`, called with the identity each time that identity's service
   * certificate is replaced by a new one (not on its first issuance). A listener that throws is
   * logged and does not stop the others.
   * @returns a function that unregisters the listener.
   */
  onRotated(listener: RotationListener): () => void {
    this.#listeners.add(listener);
    return () => {
      this.#listeners.delete(listener);
    };
  }

  /**
   * Issues an xDS client certificate for one proxy: CN
   * `<uuid>.<kind>.<serviceaccount>.<namespace>.cluster.local` (see `proxyCommonName`), usage
   * client, lifetime `validitySeconds` seconds. Not cached, not rotated.
   * @throws Error when `validitySeconds` is not a positive integer.
   */
  async issueProxyCertificate(
    uuid: string,
    namespace: string,
    serviceAccount: string,
    validitySeconds: number,
    kind: ProxyKind = 'sidecar',
  ): Promise<IssuedCertificate> {
    return this.#ca.issue({
      commonName: proxyCommonName(uuid, kind, namespace, serviceAccount),
      validitySeconds,
      usage: 'client',
    });
  }

  /**
   * Issues the controller's own xDS (gRPC) server certificate: CN {@link SERVER_COMMON_NAME},
   * usage server, URI SAN {@link XDS_SERVER_SPIFFE_ID} (the identity proxy bootstraps require of
   * the ADS server, which no service certificate carries), DNS SANs {@link DEFAULT_SERVER_DNS_NAMES} plus `dnsNames`, IP SANs
   * {@link DEFAULT_SERVER_IP_ADDRESSES} plus `ipAddresses` (duplicates removed), lifetime
   * `validitySeconds` (default {@link DEFAULT_SERVER_CERT_VALIDITY_SECONDS}). Not rotated here:
   * the caller re-issues it before `notAfter`.
   * @throws Error when `validitySeconds` is not a positive integer.
   */
  async issueServerCertificate(
    options: { dnsNames?: readonly string[]; ipAddresses?: readonly string[]; validitySeconds?: number } = {},
  ): Promise<IssuedCertificate> {
    return this.#ca.issue({
      commonName: SERVER_COMMON_NAME,
      dnsNames: [...new Set([...DEFAULT_SERVER_DNS_NAMES, ...(options.dnsNames ?? [])])],
      ipAddresses: [...new Set([...DEFAULT_SERVER_IP_ADDRESSES, ...(options.ipAddresses ?? [])])],
      uris: [XDS_SERVER_SPIFFE_ID],
      validitySeconds: options.validitySeconds ?? DEFAULT_SERVER_CERT_VALIDITY_SECONDS,
      usage: 'server',
    });
  }

  /**
   * Resolves once no issuance is in flight (those started meanwhile included), whatever their
   * outcome. For orderly shutdown and for tests that drive rotation with fake {@link Timers}.
   */
  async settled(): Promise<void> {
    while (this.#inflight.size > 0) await Promise.allSettled([...this.#inflight.values()]);
  }

  /** Clears the rotation timer; later calls to {@link getServiceCertificate} throw. Idempotent. */
  stop(): void {
    this.#stopped = true;
    this.#clearTimer();
  }

  /** Issues a new certificate for `identity` (sharing an issuance already in flight), caches it, tells listeners when it replaced one. */
  #rotate(identity: ServiceIdentity): Promise<IssuedCertificate> {
    const pending = this.#inflight.get(identity);
    if (pending) return pending;
    const request = {
      commonName: serviceCertificateCommonName(identity),
      dnsNames: [serviceCertificateCommonName(identity)],
      uris: [spiffeId(identity)],
      validitySeconds: this.#validitySeconds,
      usage: 'both' as const,
    };
    const issuedAt = this.#deterministic ? deterministicWindowStart(this.#timers.now(), this.#validitySeconds) : this.#timers.now();
    const promise = (this.#deterministic ? this.#ca.issueDeterministic(request, issuedAt) : this.#ca.issue(request))
      .then(
        (cert) => {
          this.#inflight.delete(identity);
          const replaced = this.#cache.has(identity);
          if (this.#stopped) return cert;
          if (!this.#keep(identity)) {
            // No longer wanted (it left the mesh while this was issued): not cached, never rotated.
            this.#cache.delete(identity);
            return cert;
          }
          this.#cache.set(identity, { cert, renewAt: renewalTime(issuedAt, cert.notAfter) });
          if (replaced) {
            this.#logger?.info({ identity, serialNumber: cert.serialNumber, notAfter: cert.notAfter }, 'service certificate rotated');
            this.#emit(identity);
          } else {
            this.#logger?.debug({ identity, serialNumber: cert.serialNumber, notAfter: cert.notAfter }, 'service certificate issued');
          }
          this.#schedule();
          return cert;
        },
        (err: unknown) => {
          this.#inflight.delete(identity);
          const current = this.#cache.get(identity);
          if (current) current.retryAt = this.#timers.now() + ROTATION_RETRY_MS;
          throw err;
        },
      );
    this.#inflight.set(identity, promise);
    return promise;
  }

  #emit(identity: ServiceIdentity): void {
    for (const listener of [...this.#listeners]) {
      try {
        listener(identity);
      } catch (err) {
        this.#logger?.error({ err, identity }, 'certificate rotation listener threw');
      }
    }
  }

  /** Rotates every certificate due now, then sets the timer for the next one. */
  #check(): void {
    this.#timer = undefined;
    this.#timerDueAt = Infinity;
    if (this.#stopped) return;
    const now = this.#timers.now();
    for (const [identity, entry] of [...this.#cache]) {
      if (now < entry.renewAt || (entry.retryAt !== undefined && now < entry.retryAt)) continue;
      if (this.#inflight.has(identity)) continue;
      if (!this.#keep(identity)) {
        this.#cache.delete(identity);
        continue;
      }
      this.#rotate(identity).catch((err: unknown) => {
        this.#logger?.error({ err, identity }, 'service certificate rotation failed; the current certificate stays in use');
        this.#schedule();
      });
    }
    this.#schedule();
  }

  /** Sets the timer for the earliest renewal (or retry), no later than {@link MAX_CHECK_INTERVAL_MS} from now. */
  #schedule(): void {
    if (this.#stopped) return;
    let next = Infinity;
    for (const [identity, entry] of this.#cache) {
      if (this.#inflight.has(identity)) continue;
      next = Math.min(next, Math.max(entry.renewAt, entry.retryAt ?? 0));
    }
    if (next === Infinity) {
      this.#clearTimer();
      return;
    }
    const now = this.#timers.now();
    const dueAt = Math.min(next, now + MAX_CHECK_INTERVAL_MS);
    if (this.#timer !== undefined && this.#timerDueAt <= dueAt) return;
    this.#clearTimer();
    this.#timerDueAt = dueAt;
    this.#timer = this.#timers.setTimer(() => this.#check(), Math.max(0, dueAt - now));
  }

  #clearTimer(): void {
    if (this.#timer !== undefined) this.#timers.clearTimer(this.#timer);
    this.#timer = undefined;
    this.#timerDueAt = Infinity;
  }
}

function checkValidity(seconds: number): number {
  if (!Number.isInteger(seconds) || seconds <= 0) {
    throw new Error(`certificate validity must be a positive integer number of seconds, got ${seconds}`);
  }
  return seconds;
}
