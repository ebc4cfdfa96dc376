import type * as grpc from '@grpc/grpc-js';
import type { DeltaDiscoveryRequest, DiscoveryRequest } from '../../src/xds/server/discovery-types.js';
import { Waiters } from './wait.js';

/**
 * The client side of one ADS stream, for tests, SotW or delta alike: adds `node.id` to the first
 * request, records every response in order and the final status, and waits for them.
 */
export abstract class RecordedStream<Req extends DiscoveryRequest | DeltaDiscoveryRequest, Res> {
  /** Every response received, in order. */
  readonly responses: Res[] = [];
  /** The stream's final status, once it ended (from the `status` event, or the error). */
  status?: grpc.StatusObject;
  /** Index in {@link responses} of the next response {@link next} returns. */
  private cursor = 0;
  private firstSent = false;
  private readonly waiters = new Waiters();

  constructor(
    readonly call: grpc.ClientDuplexStream<Req, Res>,
    private readonly nodeId: string,
  ) {
    call.on('data', (r: Res) => {
      this.responses.push(r);
      this.waiters.wake();
    });
    call.on('status', (s: grpc.StatusObject) => {
      this.status = s;
      this.waiters.wake();
    });
    call.on('error', (e: grpc.ServiceError) => {
      this.status ??= { code: e.code, details: e.details, metadata: e.metadata };
      this.waiters.wake();
    });
  }

  /** Notes what a request about to be written changes in the client's own view. */
  protected abstract sending(req: Req): void;

  /** Sends a raw request; the first one on the stream gets `node.id` added. */
  send(request: Req): void {
    const req: Req = { ...request };
    if (!this.firstSent) {
      req.node ??= { id: this.nodeId };
      this.firstSent = true;
    }
    this.sending(req);
    this.call.write(req);
  }

  /**
   * Resolves with the next response not yet returned by `next` (responses in order).
   * @throws Error after `timeoutMs` milliseconds, or when the stream ended first.
   */
  async next(timeoutMs = 5000): Promise<Res> {
    await this.until(() => this.responses.length > this.cursor, timeoutMs, 'the next response');
    return this.responses[this.cursor++];
  }

  /** Responses received and not yet returned by {@link next}. */
  unread(): Res[] {
    return this.responses.slice(this.cursor);
  }

  /** Resolves with the final status of the stream. @throws Error after `timeoutMs`. */
  async ended(timeoutMs = 5000): Promise<grpc.StatusObject> {
    await this.until(() => this.status !== undefined, timeoutMs, 'the end of the stream', false);
    return this.status!;
  }

  /** Cancels the stream from the client side. */
  cancel(): void {
    this.call.cancel();
  }

  /** Waits until `cond` holds; unless `failOnEnd` is false, fails as soon as the stream ended. */
  protected until(cond: () => boolean, timeoutMs: number, what: string, failOnEnd = true): Promise<void> {
    const ended = () => (failOnEnd && this.status ? `stream ended (${this.status.code} ${this.status.details})` : undefined);
    return this.waiters.until(cond, timeoutMs, what, ended);
  }
}
