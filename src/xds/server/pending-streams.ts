/**
 * The ADS streams accepted and not admitted yet, bounded: until its first request is complete a
 * stream may hold a partly received message of up to the receive limit (16 MiB) in gRPC's
 * decoder, and nothing else ends it. So a stream must deliver a whole first request within
 * `firstRequestTimeoutMs`, and one client certificate may hold at most
 * `maxPerCertificate` streams not admitted yet (a proxy reconnecting has one or two).
 */
/** What {@link PendingStreams} needs of a stream. */
export interface PendingStream {
  /** A complete request arrived on it. */
  readonly requestReceived: boolean;
}

/** Longest a stream may take to deliver its first complete request, in ms (Envoy sends it at once). */
export const FIRST_REQUEST_TIMEOUT_MS = 20_000;

/** Streams one client certificate may hold before their admission. */
export const MAX_PENDING_STREAMS_PER_CERTIFICATE = 4;

/** Why {@link PendingStreams.add} refused a stream, or a timer ended one. */
export type PendingRefusal = 'too_many_pending_streams' | 'first_request_timeout';

/** See the module comment. Streams are held in arrival order. */
export class PendingStreams<S extends PendingStream> {
  private readonly streams = new Map<S, { readonly certificate: string | undefined; readonly timer: NodeJS.Timeout }>();
  private readonly byCertificate = new Map<string, number>();

  /**
   * @param expired called for a stream that had no complete request `firstRequestTimeoutMs`
   *   after it was added (it is taken off first); the caller ends it.
   */
  constructor(
    private readonly expired: (stream: S) => void,
    private readonly limits: { readonly firstRequestTimeoutMs: number; readonly maxPerCertificate: number } = {
      firstRequestTimeoutMs: FIRST_REQUEST_TIMEOUT_MS,
      maxPerCertificate: MAX_PENDING_STREAMS_PER_CERTIFICATE,
    },
  ) {}

  /**
   * Holds `stream`, of the client certificate `certificate` (a key of it, such as its SHA-256
   * fingerprint; undefined on a plaintext listener).
   * @returns `too_many_pending_streams` when the certificate holds its most already (the stream
   *   is not held: the caller refuses it), else undefined.
   */
  add(stream: S, certificate: string | undefined): PendingRefusal | undefined {
    if (certificate !== undefined) {
      const count = this.byCertificate.get(certificate) ?? 0;
      if (count >= this.limits.maxPerCertificate) return 'too_many_pending_streams';
      this.byCertificate.set(certificate, count + 1);
    }
    const timer = setTimeout(() => {
      if (stream.requestReceived || !this.delete(stream)) return;
      this.expired(stream);
    }, this.limits.firstRequestTimeoutMs);
    timer.unref();
    this.streams.set(stream, { certificate, timer });
    return undefined;
  }

  /** Lets `stream` go (admitted, or ended). @returns whether it was held. */
  delete(stream: S): boolean {
    const held = this.streams.get(stream);
    if (!held) return false;
    this.streams.delete(stream);
    clearTimeout(held.timer);
    if (held.certificate !== undefined) {
      const count = (this.byCertificate.get(held.certificate) ?? 1) - 1;
      if (count > 0) this.byCertificate.set(held.certificate, count);
      else this.byCertificate.delete(held.certificate);
    }
    return true;
  }

  /** The streams held. */
  values(): IterableIterator<S> {
    return this.streams.keys();
  }

  /** How many streams are held. */
  get size(): number {
    return this.streams.size;
  }
}
