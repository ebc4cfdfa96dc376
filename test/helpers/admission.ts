/**
 * An API server's side of a mutating admission webhook, for tests: POST an AdmissionReview
 * over HTTPS (the server's certificate verified against a CA bundle, SNI the webhook's Service
 * name) and apply the JSON patch it answers to the pod (fast-json-patch).
 */
import assert from 'node:assert/strict';
import https from 'node:https';
import type { V1Pod } from '@kubernetes/client-node';
import { applyPatch, type Operation } from 'fast-json-patch/commonjs/core.js';

/** The injector's Service name as the API server dials it (the serving certificate's name). */
export const INJECTOR_SERVICE_NAME = 'osm-injector.osm-system.svc';

/** Where the webhook is and whom to trust. */
export interface WebhookTarget {
  readonly port: number;
  /** The CA bundle (PEM) the client trusts: the MutatingWebhookConfiguration's. */
  readonly caBundle: string;
}

/** An HTTP answer; `json` when it was `application/json`. */
export interface WebhookAnswer {
  status: number;
  body: string;
  json?: { response: { uid: string; allowed: boolean; patchType?: string; patch?: string; status?: { message: string } } };
}

/** POSTs `body` (a string as is, else JSON) to the webhook on 127.0.0.1. */
export function postToWebhook(target: WebhookTarget, body: unknown, options: { path?: string; method?: string; contentType?: string } = {}): Promise<WebhookAnswer> {
  const data = typeof body === 'string' ? body : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = https.request(
      {
        host: '127.0.0.1',
        port: target.port,
        servername: INJECTOR_SERVICE_NAME,
        ca: target.caBundle,
        method: options.method ?? 'POST',
        path: options.path ?? '/mutate-pod-creation',
        headers: { 'content-type': options.contentType ?? 'application/json', 'content-length': Buffer.byteLength(data) },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          const json = res.headers['content-type'] === 'application/json' ? (JSON.parse(text) as WebhookAnswer['json']) : undefined;
          resolve({ status: res.statusCode ?? 0, body: text, json });
        });
      },
    );
    req.on('error', reject);
    req.end(options.method === 'GET' ? undefined : data);
  });
}

let requestCounter = 0;

/** An `admission.k8s.io/v1` AdmissionReview of `pod`'s CREATE in its namespace; `extra` overrides request fields. */
export function podReview(pod: V1Pod, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: {
      uid: `req-${++requestCounter}`,
      kind: { group: '', version: 'v1', kind: 'Pod' },
      resource: { group: '', version: 'v1', resource: 'pods' },
      namespace: pod.metadata?.namespace,
      operation: 'CREATE',
      object: pod,
      ...extra,
    },
  };
}

/** Admits `pod`: the answer (its uid checked), the JSON patch and the pod with it applied. */
export async function admitPod(
  target: WebhookTarget,
  pod: V1Pod,
  extra: Record<string, unknown> = {},
): Promise<{ answer: NonNullable<WebhookAnswer['json']>['response']; patched: V1Pod; patch: Operation[] }> {
  const review = podReview(pod, extra);
  const answer = await postToWebhook(target, review);
  assert.equal(answer.status, 200, answer.body);
  const response = answer.json!.response;
  assert.equal(response.uid, (review.request as { uid: string }).uid);
  const patch = response.patch ? (JSON.parse(Buffer.from(response.patch, 'base64').toString('utf8')) as Operation[]) : [];
  if (response.patch) assert.equal(response.patchType, 'JSONPatch');
  const patched = applyPatch(structuredClone(pod), patch, true, false).newDocument;
  return { answer: response, patched, patch };
}
