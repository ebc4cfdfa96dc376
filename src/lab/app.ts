/**
 * `trellis lab app`: the workload a lab pod runs when it names no command of its own. It says
 * who answered, so traffic tests can count which pod a request reached:
 * - HTTP: every request is answered with JSON `{pod, namespace, serviceAccount, method, path,
 *   headers, port}` (status 200, or `--status`; the first `--fail-first` requests get 503);
 * - TCP: a line `pod=<pod> namespace=<ns>` on connect, then everything received is echoed;
 * - gRPC: the unary method `/trellis.lab.Echo/Echo` (see {@link ECHO_PROTO}) echoes `message`
 *   and names the pod.
 * Every listener is bounded: request bodies, header sizes, connections and idle time.
 */
import { once } from 'node:events';
import http from 'node:http';
import net from 'node:net';
import * as grpc from '@grpc/grpc-js';
import protobuf from 'protobufjs';

/** One listener of the app: protocol and port (0: any free port). */
export interface AppListener {
  readonly protocol: 'http' | 'tcp' | 'grpc';
  readonly port: number;
}

/** What `trellis lab app` runs. */
export interface AppOptions {
  readonly pod: string;
  readonly namespace: string;
  readonly serviceAccount: string;
  readonly listeners: readonly AppListener[];
  /** Address every listener binds (default `0.0.0.0`). */
  readonly address?: string;
  /** The first N HTTP requests (all HTTP listeners together) are answered 503. */
  readonly failFirst?: number;
  /** The status of every other HTTP answer (default 200). */
  readonly status?: number;
}

/** The HTTP answer's JSON. */
export interface EchoAnswer {
  pod: string;
  namespace: string;
  serviceAccount: string;
  method: string;
  path: string;
  headers: Record<string, string | string[] | undefined>;
  /** The port the request came in on. */
  port: number;
}

/** Bounds of the app's listeners. */
export const APP_LIMITS = {
  /** The largest HTTP request body read; a larger one is answered 413. */
  maxBodyBytes: 64 * 1024,
  /** Node's `maxHeaderSize` (bytes of request line and headers); past it, 431. */
  maxHeaderBytes: 16 * 1024,
  /** Open connections per listener (HTTP, TCP); more are refused. */
  maxConnections: 1024,
  /** A TCP or HTTP connection idle this long is closed (ms). */
  idleTimeoutMs: 60_000,
  /** The largest gRPC message received. */
  maxGrpcMessageBytes: 64 * 1024,
  /** Concurrent gRPC streams per connection. */
  maxGrpcStreams: 100,
} as const;

/**
 * The gRPC echo service, as a proto:
 * ```proto
 * package trellis.lab;
 * service Echo { rpc Echo(EchoRequest) returns (EchoResponse); }
 * message EchoRequest { string message = 1; }
 * message EchoResponse { string message = 1; string pod = 2; string namespace = 3; string service_account = 4; }
 * ```
 */
export const ECHO_PROTO = protobuf.Root.fromJSON({
  nested: {
    trellis: {
      nested: {
        lab: {
          nested: {
            EchoRequest: { fields: { message: { type: 'string', id: 1 } } },
            EchoResponse: {
              fields: {
                message: { type: 'string', id: 1 },
                pod: { type: 'string', id: 2 },
                namespace: { type: 'string', id: 3 },
                serviceAccount: { type: 'string', id: 4 },
              },
            },
          },
        },
      },
    },
  },
});

const EchoRequest = ECHO_PROTO.lookupType('trellis.lab.EchoRequest');
const EchoResponse = ECHO_PROTO.lookupType('trellis.lab.EchoResponse');

/** A gRPC echo message (request: `message`; response: all four). */
export interface EchoMessage {
  message?: string;
  pod?: string;
  namespace?: string;
  serviceAccount?: string;
}

/** The grpc-js definition of `trellis.lab.Echo` (protobuf on the wire), for servers and clients. */
export const ECHO_SERVICE: grpc.ServiceDefinition = {
  Echo: {
    path: '/trellis.lab.Echo/Echo',
    requestStream: false,
    responseStream: false,
    requestSerialize: (m: EchoMessage) => Buffer.from(EchoRequest.encode(EchoRequest.fromObject(m)).finish()),
    requestDeserialize: (b: Buffer) => EchoRequest.toObject(EchoRequest.decode(b), { defaults: true }) as EchoMessage,
    responseSerialize: (m: EchoMessage) => Buffer.from(EchoResponse.encode(EchoResponse.fromObject(m)).finish()),
    responseDeserialize: (b: Buffer) => EchoResponse.toObject(EchoResponse.decode(b), { defaults: true }) as EchoMessage,
  },
};

/** A running app: where each listener is bound, and how to stop it. */
export interface RunningApp {
  /** `protocol address:port` of every listener, in the order given. */
  readonly bound: readonly { protocol: AppListener['protocol']; address: string; port: number }[];
  /** Closes every listener and its connections. */
  stop(): Promise<void>;
}

function httpListener(options: AppOptions, counter: { answered: number }): http.Server {
  const server = http.createServer({ maxHeaderSize: APP_LIMITS.maxHeaderBytes, requestTimeout: APP_LIMITS.idleTimeoutMs }, (req, res) => {
    let size = Number(req.headers['content-length'] ?? 0);
    let tooLarge = false;
    const refuseIfTooLarge = () => {
      if (size <= APP_LIMITS.maxBodyBytes || tooLarge) return;
      tooLarge = true;
      res.on('finish', () => req.socket.destroy());
      res.writeHead(413, { 'content-type': 'text/plain', connection: 'close' }).end(`request body over ${APP_LIMITS.maxBodyBytes} bytes\n`);
    };
    refuseIfTooLarge();
    if (!tooLarge) size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      refuseIfTooLarge();
    });
    req.on('end', () => {
      if (tooLarge) return;
      const n = counter.answered++;
      const status = n < (options.failFirst ?? 0) ? 503 : (options.status ?? 200);
      const answer: EchoAnswer = {
        pod: options.pod,
        namespace: options.namespace,
        serviceAccount: options.serviceAccount,
        method: req.method ?? '',
        path: req.url ?? '',
        headers: req.headers,
        port: (server.address() as net.AddressInfo).port,
      };
      const body = `${JSON.stringify(answer)}\n`;
      res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
    });
    req.on('error', () => undefined);
  });
  server.maxConnections = APP_LIMITS.maxConnections;
  server.keepAliveTimeout = APP_LIMITS.idleTimeoutMs;
  server.headersTimeout = Math.min(APP_LIMITS.idleTimeoutMs, 20_000);
  return server;
}

function tcpListener(options: AppOptions): net.Server {
  const server = net.createServer((socket) => {
    socket.setTimeout(APP_LIMITS.idleTimeoutMs, () => socket.destroy());
    socket.on('error', () => undefined);
    socket.write(`pod=${options.pod} namespace=${options.namespace}\n`);
    socket.pipe(socket);
  });
  server.maxConnections = APP_LIMITS.maxConnections;
  return server;
}

async function listenNet(server: net.Server | http.Server, address: string, port: number): Promise<number> {
  server.listen(port, address);
  await Promise.race([once(server, 'listening'), once(server, 'error').then(([err]) => Promise.reject(err))]);
  return (server.address() as net.AddressInfo).port;
}

function closeNet(server: net.Server | http.Server): Promise<void> {
  if ('closeAllConnections' in server) server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}

async function grpcListener(options: AppOptions, address: string, port: number): Promise<{ server: grpc.Server; port: number }> {
  const server = new grpc.Server({
    'grpc.max_receive_message_length': APP_LIMITS.maxGrpcMessageBytes,
    'grpc.max_concurrent_streams': APP_LIMITS.maxGrpcStreams,
    'grpc.max_connection_idle_ms': APP_LIMITS.idleTimeoutMs,
  });
  server.addService(ECHO_SERVICE, {
    Echo: (call: grpc.ServerUnaryCall<EchoMessage, EchoMessage>, callback: grpc.sendUnaryData<EchoMessage>) =>
      callback(null, { message: call.request.message ?? '', pod: options.pod, namespace: options.namespace, serviceAccount: options.serviceAccount }),
  });
  const host = net.isIPv6(address) ? `[${address}]` : address;
  const bound = await new Promise<number>((resolve, reject) =>
    server.bindAsync(`${host}:${port}`, grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  return { server, port: bound };
}

/**
 * Starts every listener of `options`.
 * @throws Error when a listener cannot bind (the ones already bound are closed).
 */
export async function startApp(options: AppOptions): Promise<RunningApp> {
  const address = options.address ?? '0.0.0.0';
  const counter = { answered: 0 };
  const stops: (() => Promise<void>)[] = [];
  const bound: { protocol: AppListener['protocol']; address: string; port: number }[] = [];
  const stop = async () => {
    await Promise.all(stops.map((s) => s()));
  };
  try {
    for (const listener of options.listeners) {
      if (listener.protocol === 'grpc') {
        const g = await grpcListener(options, address, listener.port);
        stops.push(() => new Promise<void>((resolve) => g.server.tryShutdown(() => resolve())).then(() => g.server.forceShutdown()));
        bound.push({ protocol: 'grpc', address, port: g.port });
      } else {
        const server = listener.protocol === 'http' ? httpListener(options, counter) : tcpListener(options);
        const port = await listenNet(server, address, listener.port);
        stops.push(() => closeNet(server));
        bound.push({ protocol: listener.protocol, address, port });
      }
    }
  } catch (err) {
    await stop();
    throw err;
  }
  return { bound, stop };
}

/**
 * Parses a `--listen` value: `http:14001`, `tcp:3306`, `grpc:9000` (port 0: any free port).
 * @throws Error naming the value when it is not `<http|tcp|grpc>:<0-65535>`.
 */
export function parseAppListener(value: string): AppListener {
  const m = /^(http|tcp|grpc):(\d{1,5})$/.exec(value);
  const port = m ? Number(m[2]) : NaN;
  if (!m || port > 65535) throw new Error(`"${value}" is not a listener such as http:14001, tcp:3306 or grpc:9000`);
  return { protocol: m[1] as AppListener['protocol'], port };
}
