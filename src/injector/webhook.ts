/**
 * The sidecar injector's mutating admission webhook (`admission.k8s.io/v1` AdmissionReview over
 * HTTPS, JSON patch), as OSM's `osm-injector` serves it on `/mutate-pod-creation`.
 *
 * {@link admit} answers one AdmissionReview; {@link startWebhookServer} serves it over HTTPS.
 * A pod that is not to be injected is admitted unchanged; a pod that is to be injected but
 * cannot be (an exclusion list or probe that does not parse, a bootstrap Secret the API
 * refuses) is refused with a message naming the field: it must not run without its sidecar.
 * Bootstrap Secrets are made only for a pod's CREATE in a namespace of the mesh, once per proxy
 * UUID (derived from the request's uid, {@link proxyUuidOf}), within the bounds of a
 * {@link SecretCreationGate} (beyond: refused with 429); each is then given its stored Pod as
 * owner, or deleted, by a {@link SecretAdopter}.
 * The server itself answers an HTTP error only to what is not an AdmissionReview (and, with a
 * client CA, 403 to a client without its certificate).
 */
import { createHash } from 'node:crypto';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import type { TLSSocket } from 'node:tls';
import type { V1Pod } from '@kubernetes/client-node';
import { compare } from 'fast-json-patch/commonjs/duplex.js';
import type { Logger } from 'pino';
import { boundedText } from '../util/bounded-text.js';
import type { InjectorCluster } from './cluster.js';
import { BOOTSTRAP_SECRET_PREFIX, bootstrapSecret, injectionDecision, injectPod, type InjectorSettings } from './inject.js';
import type { SecretAdopter } from './adopt.js';
import type { SecretCreationGate } from './secret-gate.js';

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
  /** The proxy UUID of an admission (default {@link proxyUuidOf}: the same for a request delivered again). */
  newUuid?(requestUid: string, namespace: string): string;
  /** Bounds the bootstrap Secret creations (one gate for every admission the server answers). */
  readonly secretGate: SecretCreationGate;
  /** Gives each bootstrap Secret created its Pod as owner, or deletes it when no pod is stored (none: Secrets stay unowned). */
  readonly adopter?: SecretAdopter;
}

/**
 * The proxy UUID of the admission `requestUid` of a pod in `namespace`: a version 8 UUID (RFC
 * 9562 §5.8) of the SHA-256 of both. The API server sends a request delivered again (its retry
 * after a lost answer) with the same uid, so the pod it stores names the Secret already created.
 */
export function proxyUuidOf(requestUid: string, namespace: string): string {
  const b = createHash('sha256').update(`trellis proxy uuid\0${namespace}\0${requestUid}`).digest().subarray(0, 16);
  b[6] = (b[6] & 0x0f) | 0x80;
  b[8] = (b[8] & 0x3f) | 0x80;
  const hex = b.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
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

function refuse(uid: string, message: string, code = 400, reason = 'BadRequest'): AdmissionResponse {
  return { uid, allowed: false, status: { code, reason, message: `trellis injector: ${boundedText(message, MAX_REFUSAL_MESSAGE_CHARS)}` } };
}

/** A pod refused because the bootstrap Secret creations are beyond their bounds (answered 429: the caller retries). */
class TooManySecretCreations extends Error {}

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

/** The pod resource of the core group, the only one admitted with a sidecar. */
const isPodsResource = (r: unknown): boolean => isRecord(r) && (r.group ?? '') === '' && r.version === 'v1' && r.resource === 'pods';

async function respond(request: Record<string, unknown>, uid: string, options: AdmitOptions): Promise<AdmissionResponse> {
  const allowed: AdmissionResponse = { uid, allowed: true };
  const kind = isRecord(request.kind) ? request.kind : {};
  if (kind.kind !== 'Pod' || (kind.group ?? '') !== '' || request.operation !== 'CREATE') return allowed;
  // What the API server sends for a pod's CREATE, and nothing else: the resource `pods` (not a
  // subresource), the request's namespace, the same as the pod's when the pod names one.
  if (!isPodsResource(request.resource) || (request.subResource ?? '') !== '') return refuse(uid, 'request.resource: not the CREATE of a v1 pods resource');
  const object = request.object;
  if (!isRecord(object) || !isRecord(object.metadata ?? {}) || !isRecord(object.spec)) return refuse(uid, 'request.object: not a Pod (no spec)');
  const pod = object as unknown as V1Pod;
  if (typeof request.namespace !== 'string' || request.namespace === '') return refuse(uid, 'request.namespace: missing (the API server names the namespace of a pod it admits)');
  const namespaceName = request.namespace;
  if ((pod.metadata?.namespace ?? namespaceName) !== namespaceName) {
    return refuse(uid, `request.object.metadata.namespace: ${JSON.stringify(pod.metadata?.namespace)} is not the request's namespace ${JSON.stringify(namespaceName)}`);
  }
  const podName = `Pod ${namespaceName}/${pod.metadata?.name ?? pod.metadata?.generateName ?? ''}`;
  const log = options.logger?.child({ namespace: loggedName(namespaceName), pod: loggedName(pod.metadata?.name ?? pod.metadata?.generateName), uid: loggedName(uid) });
  try {
    const namespace = await options.cluster.readNamespace(namespaceName);
    const decision = injectionDecision(pod, namespace, { meshName: options.settings.meshName, injectorNamespace: options.injectorNamespace });
    if (!decision.inject || !namespace) {
      log?.debug({ reason: decision.inject ? 'no namespace' : decision.reason }, 'admitted without a sidecar');
      return allowed;
    }
    const meshConfig = await options.cluster.readMeshConfig();
    const uuid = (options.newUuid ?? proxyUuidOf)(uid, namespaceName);
    const injection = injectPod(pod, namespace, meshConfig, uuid, options.settings);
    if (request.dryRun !== true) {
      const secretName = `${BOOTSTRAP_SECRET_PREFIX}${uuid}`;
      if (options.adopter && !options.adopter.hasRoom()) {
        throw new TooManySecretCreations(`${podName}: bootstrap Secret ${secretName} not created: ${options.adopter.pending} bootstrap Secrets wait for their pods, the most; retry later`);
      }
      const created = options.secretGate.run(uuid, async () => {
        const certificate = await options.issueCertificate(uuid, injection.namespace, injection.serviceAccount);
        return options.cluster.createSecret(bootstrapSecret(injection, options.settings, certificate));
      });
      if ('refused' in created) throw new TooManySecretCreations(`${podName}: bootstrap Secret ${secretName} not created: ${created.refused}; retry later`);
      const outcome = await created;
      if (outcome === 'exists') log?.info({ proxyUuid: uuid }, 'bootstrap Secret exists already: the same admission delivered again');
      options.adopter?.track(injection.namespace, uuid);
    }
    const patch = compare(pod, injection.pod);
    log?.info({ proxyUuid: uuid, reinjected: injection.reinjected, operations: patch.length }, 'sidecar injected');
    return { ...allowed, patchType: 'JSONPatch', patch: Buffer.from(JSON.stringify(patch)).toString('base64') };
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    log?.warn({ err: boundedText(message, MAX_REFUSAL_MESSAGE_CHARS) }, 'pod refused');
    return err instanceof TooManySecretCreations ? refuse(uid, message, 429, 'TooManyRequests') : refuse(uid, message);
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
  /**
   * When given (PEM), a POST of an AdmissionReview must come with a client certificate chaining
   * to it (the API server's webhook client certificate), else it is answered 403; `GET /healthz`
   * needs none (the kubelet's probes present none).
   */
  readonly clientCaPem?: string;
}

/** A running webhook server. */
export interface WebhookServer {
  readonly port: number;
  /** Serves new TLS connections with this certificate and key (PEM); the listener and open connections stay. */
  setCertificate(certPem: string, keyPem: string): void;
  close(): Promise<void>;
}

function send(res: import('node:http').ServerResponse, status: number, body: string, type = 'text/plain; charset=utf-8'): void {
  res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

/**
 * Serves {@link admit} on `POST {@link WEBHOOK_PATH}` over HTTPS (TLS 1.2+), and `GET /healthz`.
 * HTTP errors: 404 another path, 405 another method, 403 no client certificate (with
 * `clientCaPem`), 415 a body that is not
 * `application/json`, 413 one above {@link MAX_REVIEW_BYTES}, 400 one that is not JSON or not
 * an AdmissionReview.
 */
export async function startWebhookServer(options: WebhookServerOptions): Promise<WebhookServer> {
  const tls = (certPem: string, keyPem: string) => ({
    cert: certPem,
    key: keyPem,
    minVersion: 'TLSv1.2' as const,
    ...(options.clientCaPem !== undefined ? { ca: options.clientCaPem, requestCert: true, rejectUnauthorized: false } : {}),
  });
  const server = https.createServer(tls(options.certPem, options.keyPem), (req, res) => {
    const url = new URL(req.url ?? '/', 'https://injector');
    if (url.pathname === '/healthz' && req.method === 'GET') return send(res, 200, 'ok\n');
    if (url.pathname !== WEBHOOK_PATH) return send(res, 404, `not found: ${url.pathname}\n`);
    if (req.method !== 'POST') return send(res, 405, `method ${req.method ?? ''} not allowed: POST an AdmissionReview\n`);
    const socket = req.socket as TLSSocket;
    if (options.clientCaPem !== undefined && !socket.authorized) {
      return send(res, 403, `a client certificate of the API server is required: ${String(socket.authorizationError ?? 'none presented')}\n`);
    }
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
    setCertificate: (certPem, keyPem) => server.setSecureContext(tls(certPem, keyPem)),
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
