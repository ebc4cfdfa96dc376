/**
 * The sidecar injector's mutating admission webhook (`admission.k8s.io/v1` AdmissionReview over
 * HTTPS, JSON patch), as OSM's `osm-injector` serves it on `/mutate-pod-creation`.
 *
 * {@link admit} answers one AdmissionReview; {@link startWebhookServer} serves it over HTTPS.
 * A pod that is not to be injected is admitted unchanged; a pod that is to be injected but
 * cannot be (an exclusion list or probe that does not parse, a bootstrap Secret the API
 * refuses) is refused with a message naming the field: it must not run without its sidecar.
 * The server itself answers an HTTP error only to what is not an AdmissionReview.
 */
import { randomUUID } from 'node:crypto';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import type { V1Pod } from '@kubernetes/client-node';
import { compare } from 'fast-json-patch/commonjs/duplex.js';
import type { Logger } from 'pino';
import { boundedText } from '../util/bounded-text.js';
import type { InjectorCluster } from './cluster.js';
import { bootstrapSecret, injectionDecision, injectPod, type InjectorSettings } from './inject.js';

/** The webhook's path (OSM's). */
export const WEBHOOK_PATH = '/mutate-pod-creation';
/** The webhook's port (OSM's `InjectorWebhookPort`). */
export const DEFAULT_WEBHOOK_PORT = 9090;
/** The largest AdmissionReview body read; the API server's own request limit is 3 MiB. */
export const MAX_REVIEW_BYTES = 4 * 1024 * 1024;

/** What {@link admit} needs. */
export interface AdmitOptions {
  readonly cluster: InjectorCluster;
  /** Issues the xDS client certificate of a proxy (CN `<uuid>.sidecar.<sa>.<ns>.cluster.local`). */
  issueCertificate(uuid: string, namespace: string, serviceAccount: string): Promise<{ certPem: string; keyPem: string; caPem: string }>;
  readonly settings: InjectorSettings;
  /** The injector's namespace (never injected). */
  readonly injectorNamespace: string;
  readonly logger?: Logger;
  /** A new proxy UUID (default `crypto.randomUUID`). */
  newUuid?(): string;
}

/** An AdmissionReview `response`. */
export interface AdmissionResponse {
  uid: string;
  allowed: boolean;
  patchType?: 'JSONPatch';
  /** base64 of the JSON patch (RFC 6902). */
  patch?: string;
  status?: { code: number; reason?: string; message: string };
}

/** An AdmissionReview answered by {@link admit}. */
export interface AdmissionReviewResponse {
  apiVersion: 'admission.k8s.io/v1';
  kind: 'AdmissionReview';
  response: AdmissionResponse;
}

/** A body that is not an `admission.k8s.io/v1` AdmissionReview request (answered HTTP 400). */
export class BadAdmissionReview extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'BadAdmissionReview';
  }
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * A refusal's message and a logged error are cut to this many characters: they quote the pod's
 * values (an annotation may hold 256 KiB, a body 4 MiB).
 */
export const MAX_REFUSAL_MESSAGE_CHARS = 1024;
/** A logged name (pod, namespace, request uid) is cut to this many characters (a Kubernetes name has at most 253). */
const MAX_LOGGED_NAME_CHARS = 253;

function refuse(uid: string, message: string): AdmissionResponse {
  return { uid, allowed: false, status: { code: 400, reason: 'BadRequest', message: `trellis injector: ${boundedText(message, MAX_REFUSAL_MESSAGE_CHARS)}` } };
}

/** `value` as a bounded, log-safe name. */
const loggedName = (value: unknown): string => boundedText(typeof value === 'string' ? value : String(JSON.stringify(value)), MAX_LOGGED_NAME_CHARS);

/**
 * Answers an AdmissionReview of a pod's CREATE: admitted unchanged when {@link injectionDecision}
 * says no (or for any other object or operation), else with the JSON patch from the pod to
 * {@link injectPod}'s, after creating its bootstrap Secret (not on a dry run: the webhook's
 * side effects are `NoneOnDryRun`).
 * @throws BadAdmissionReview when `review` is not an `admission.k8s.io/v1` AdmissionReview with a
 *   `request.uid` (there is no uid to answer to).
 */
export async function admit(review: unknown, options: AdmitOptions): Promise<AdmissionReviewResponse> {
  if (!isRecord(review) || review.kind !== 'AdmissionReview' || review.apiVersion !== 'admission.k8s.io/v1') {
    throw new BadAdmissionReview('the body is not an admission.k8s.io/v1 AdmissionReview');
  }
  const request = review.request;
  if (!isRecord(request) || typeof request.uid !== 'string' || request.uid === '') throw new BadAdmissionReview('the AdmissionReview has no request.uid');
  return { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response: await respond(request, request.uid, options) };
}

async function respond(request: Record<string, unknown>, uid: string, options: AdmitOptions): Promise<AdmissionResponse> {
  const allowed: AdmissionResponse = { uid, allowed: true };
  const kind = isRecord(request.kind) ? request.kind : {};
  if (kind.kind !== 'Pod' || (kind.group ?? '') !== '' || request.operation !== 'CREATE') return allowed;
  const object = request.object;
  if (!isRecord(object) || !isRecord(object.metadata ?? {}) || !isRecord(object.spec)) return refuse(uid, 'request.object: not a Pod (no spec)');
  const pod = object as unknown as V1Pod;
  const namespaceName = typeof request.namespace === 'string' && request.namespace !== '' ? request.namespace : (pod.metadata?.namespace ?? 'default');
  const log = options.logger?.child({ namespace: loggedName(namespaceName), pod: loggedName(pod.metadata?.name ?? pod.metadata?.generateName), uid: loggedName(uid) });
  try {
    const namespace = await options.cluster.readNamespace(namespaceName);
    const decision = injectionDecision(pod, namespace, { meshName: options.settings.meshName, injectorNamespace: options.injectorNamespace });
    if (!decision.inject || !namespace) {
      log?.debug({ reason: decision.inject ? 'no namespace' : decision.reason }, 'admitted without a sidecar');
      return allowed;
    }
    const meshConfig = await options.cluster.readMeshConfig();
    const uuid = (options.newUuid ?? randomUUID)();
    const injection = injectPod(pod, namespace, meshConfig, uuid, options.settings);
    if (request.dryRun !== true) {
      const certificate = await options.issueCertificate(uuid, injection.namespace, injection.serviceAccount);
      await options.cluster.createSecret(bootstrapSecret(injection, options.settings, certificate));
    }
    const patch = compare(pod, injection.pod);
    log?.info({ proxyUuid: uuid, reinjected: injection.reinjected, operations: patch.length }, 'sidecar injected');
    return { ...allowed, patchType: 'JSONPatch', patch: Buffer.from(JSON.stringify(patch)).toString('base64') };
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    log?.warn({ err: boundedText(message, MAX_REFUSAL_MESSAGE_CHARS) }, 'pod refused');
    return refuse(uid, message);
  }
}

/** Options of {@link startWebhookServer}. */
export interface WebhookServerOptions extends AdmitOptions {
  /** Address to listen on (default `0.0.0.0`). */
  readonly host?: string;
  /** Port (default {@link DEFAULT_WEBHOOK_PORT}; 0: any free port). */
  readonly port?: number;
  /** The serving certificate (PEM, chain) and key, issued by the mesh CA. */
  readonly certPem: string;
  readonly keyPem: string;
}

/** A running webhook server. */
export interface WebhookServer {
  readonly port: number;
  close(): Promise<void>;
}

function send(res: import('node:http').ServerResponse, status: number, body: string, type = 'text/plain; charset=utf-8'): void {
  res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

/**
 * Serves {@link admit} on `POST {@link WEBHOOK_PATH}` over HTTPS (TLS 1.2+), and `GET /healthz`.
 * HTTP errors: 404 another path, 405 another method, 415 a body that is not
 * `application/json`, 413 one above {@link MAX_REVIEW_BYTES}, 400 one that is not JSON or not
 * an AdmissionReview.
 */
export async function startWebhookServer(options: WebhookServerOptions): Promise<WebhookServer> {
  const server = https.createServer({ cert: options.certPem, key: options.keyPem, minVersion: 'TLSv1.2' }, (req, res) => {
    const url = new URL(req.url ?? '/', 'https://injector');
    if (url.pathname === '/healthz' && req.method === 'GET') return send(res, 200, 'ok\n');
    if (url.pathname !== WEBHOOK_PATH) return send(res, 404, `not found: ${url.pathname}\n`);
    if (req.method !== 'POST') return send(res, 405, `method ${req.method ?? ''} not allowed: POST an AdmissionReview\n`);
    const type = (req.headers['content-type'] ?? '').split(';')[0].trim().toLowerCase();
    if (type !== 'application/json') return send(res, 415, `content type ${JSON.stringify(type)}: expected application/json\n`);
    const chunks: Buffer[] = [];
    let size = 0;
    let tooLarge = false;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_REVIEW_BYTES) {
        // Answered at once; the rest of the body is read and dropped (held: nothing past the
        // limit), so the client reads the answer instead of a reset.
        if (!tooLarge) {
          res.setHeader('connection', 'close');
          send(res, 413, `the AdmissionReview is larger than ${MAX_REVIEW_BYTES} bytes\n`);
          chunks.length = 0;
        }
        tooLarge = true;
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => {
      if (tooLarge) return;
      let review: unknown;
      try {
        review = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch (err) {
        return send(res, 400, `the body is not JSON: ${err instanceof Error ? err.message : String(err)}\n`);
      }
      admit(review, options).then(
        (answer) => send(res, 200, JSON.stringify(answer), 'application/json'),
        (err: unknown) => send(res, err instanceof BadAdmissionReview ? 400 : 500, `${err instanceof Error ? err.message : String(err)}\n`),
      );
    });
  });
  server.requestTimeout = 30_000;
  server.headersTimeout = 10_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? DEFAULT_WEBHOOK_PORT, options.host ?? '0.0.0.0', () => {
      server.off('error', reject);
      resolve();
    });
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
