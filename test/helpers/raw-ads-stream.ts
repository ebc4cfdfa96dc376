import http2 from 'node:http2';
import { decodeMessage, encodeMessage } from '../../src/api/codec.js';
import { Waiters } from './wait.js';

const ADS_PATH = '/envoy.service.discovery.v3.AggregatedDiscoveryService';

/** Which ADS method a {@link RawAdsStream} calls. */
export type RawAdsMethod = 'StreamAggregatedResources' | 'DeltaAggregatedResources';

/** A gRPC message frame: the 5-byte prefix (uncompressed, length) and `body`. */
export function grpcFrame(body: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt32BE(body.length, 1);
  return Buffer.concat([head, body]);
}

/**
 * An ADS stream over a raw HTTP/2 client, for tests that need what a gRPC client hides: a
 * client that stops reading ({@link pause}: the server's writes stop once the stream's
 * window is used up; with `initialWindowSize: 0` in `settings`, at the first response), and
 * the stream's reset code. Requests are encoded from plain objects (snake_case); responses are
 * decoded as they are read (`decodeMessage`: every resource an object with `@type`).
 */
export class RawAdsStream {
  /** Every response read, decoded, in order. */
  readonly responses: Record<string, unknown>[] = [];
  /** The `RST_STREAM` code once the stream closed (0: closed normally). */
  rstCode?: number;
  /** The `grpc-status` the server ended the stream with, once it did. */
  grpcStatus?: number;
  readonly session: http2.ClientHttp2Session;
  private readonly stream: http2.ClientHttp2Stream;
  private readonly requestType: string;
  private readonly responseType: string;
  private pending = Buffer.alloc(0);
  private readonly waiters = new Waiters();

  /**
   * Connects to `authority` (e.g. `http://127.0.0.1:PORT`) and opens `method`.
   * @param settings HTTP/2 settings of the client (e.g. `{ initialWindowSize: 0 }`).
   */
  constructor(authority: string, method: RawAdsMethod, settings: http2.Settings = {}) {
    const delta = method === 'DeltaAggregatedResources';
    this.requestType = `envoy.service.discovery.v3.${delta ? 'Delta' : ''}DiscoveryRequest`;
    this.responseType = `envoy.service.discovery.v3.${delta ? 'Delta' : ''}DiscoveryResponse`;
    this.session = http2.connect(authority, { settings });
    this.session.on('error', () => undefined);
    this.stream = this.session.request({ ':method': 'POST', ':path': `${ADS_PATH}/${method}`, 'content-type': 'application/grpc', te: 'trailers' });
    this.stream.on('error', () => undefined);
    this.stream.on('data', (chunk: Buffer) => this.read(chunk));
    const status = (headers: http2.IncomingHttpHeaders): void => {
      if (headers['grpc-status'] === undefined) return;
      this.grpcStatus = Number(headers['grpc-status']);
      this.waiters.wake();
    };
    this.stream.on('response', status);
    this.stream.on('trailers', status);
    this.stream.on('close', () => {
      this.rstCode = this.stream.rstCode;
      this.waiters.wake();
    });
  }

  /** Writes bytes as they are (e.g. a message prefix and part of its body). */
  sendRaw(bytes: Buffer): void {
    this.stream.write(bytes);
  }

  /** Writes one request (a `DiscoveryRequest` or `DeltaDiscoveryRequest` object). */
  send(request: object): void {
    this.stream.write(grpcFrame(encodeMessage(this.requestType, request)));
  }

  /** Stops reading: no more flow-control window is given back to the server. */
  pause(): void {
    this.stream.pause();
  }

  /** Reads again (and, with `window`, sets every stream's initial window to that many bytes). */
  resume(window?: number): void {
    if (window !== undefined) this.session.settings({ initialWindowSize: window });
    this.stream.resume();
  }

  /**
   * Resolves once `cond` holds (checked after every response and at the close of the stream).
   * @throws Error after `timeoutMs`, naming `what`.
   */
  until(cond: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
    return this.waiters.until(cond, timeoutMs, what);
  }

  /** Closes the stream and the connection. */
  destroy(): void {
    this.session.destroy();
  }

  private read(chunk: Buffer): void {
    this.pending = Buffer.concat([this.pending, chunk]);
    while (this.pending.length >= 5) {
      const length = this.pending.readUInt32BE(1);
      if (this.pending.length < 5 + length) break;
      this.responses.push(decodeMessage(this.responseType, this.pending.subarray(5, 5 + length)));
      this.pending = this.pending.subarray(5 + length);
    }
    this.waiters.wake();
  }
}
