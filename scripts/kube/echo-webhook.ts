/**
 * A minimal mutating admission webhook for scripts/kube/smoke.sh: proves that the real
 * kube-apiserver started by scripts/kube/start.sh calls a MutatingWebhookConfiguration (the
 * sidecar injector's path) on loopback.
 *
 * Usage: `node --import tsx scripts/kube/echo-webhook.ts --port PORT --cert FILE --key FILE`
 * Serves HTTPS on 127.0.0.1:PORT. `POST /mutate` answers an `admission.k8s.io/v1`
 * AdmissionReview by allowing the object with a JSONPatch that adds the annotation
 * `trellis.test/mutated-by: echo-webhook`; it prints one line per review (`review UID KIND
 * NAMESPACE/NAME`) to stdout. Request bodies over 1 MiB are refused (413). Stops on SIGTERM.
 */
import { readFileSync } from 'node:fs';
import https from 'node:https';
import { parseArgs } from 'node:util';

/** The largest AdmissionReview body read, in bytes. */
const MAX_BODY_BYTES = 1 << 20;

/** The parts of an `admission.k8s.io/v1` AdmissionReview request this webhook reads. */
interface AdmissionReviewRequest {
  apiVersion?: string;
  request?: {
    uid?: string;
    kind?: { kind?: string };
    namespace?: string;
    name?: string;
    object?: { metadata?: { name?: string; generateName?: string; annotations?: Record<string, string> } };
  };
}

/**
 * The AdmissionReview response for `review`: allowed, with a JSONPatch (RFC 6902) adding the
 * annotation (creating `metadata.annotations` when the object has none).
 * @throws Error when the review has no `request.uid`.
 */
export function admissionResponse(review: AdmissionReviewRequest): object {
  const uid = review.request?.uid;
  if (!uid) throw new Error('AdmissionReview without request.uid');
  const annotations = review.request?.object?.metadata?.annotations;
  const patch = annotations
    ? [{ op: 'add', path: '/metadata/annotations/trellis.test~1mutated-by', value: 'echo-webhook' }]
    : [{ op: 'add', path: '/metadata/annotations', value: { 'trellis.test/mutated-by': 'echo-webhook' } }];
  return {
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    response: { uid, allowed: true, patchType: 'JSONPatch', patch: Buffer.from(JSON.stringify(patch)).toString('base64') },
  };
}

function main(): void {
  const { values } = parseArgs({
    options: { port: { type: 'string' }, cert: { type: 'string' }, key: { type: 'string' } },
  });
  if (!values.port || !values.cert || !values.key) {
    console.error('usage: echo-webhook.ts --port PORT --cert FILE --key FILE');
    process.exit(2);
  }
  const server = https.createServer({ cert: readFileSync(values.cert), key: readFileSync(values.key) }, (req, res) => {
    if (req.method !== 'POST' || !req.url?.startsWith('/mutate')) {
      res.writeHead(404).end();
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) {
        res.writeHead(413).end();
        req.destroy();
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => {
      if (size > MAX_BODY_BYTES) return;
      try {
        const review = JSON.parse(Buffer.concat(chunks).toString('utf8')) as AdmissionReviewRequest;
        const body = JSON.stringify(admissionResponse(review));
        const r = review.request;
        const name = r?.name ?? r?.object?.metadata?.name ?? `${r?.object?.metadata?.generateName ?? ''}*`;
        console.log(`review ${r?.uid} ${r?.kind?.kind} ${r?.namespace ?? ''}/${name}`);
        res.writeHead(200, { 'content-type': 'application/json' }).end(body);
      } catch (err) {
        console.error(`bad AdmissionReview: ${(err as Error).message}`);
        res.writeHead(400).end();
      }
    });
  });
  server.listen(Number(values.port), '127.0.0.1', () => console.log(`listening on https://127.0.0.1:${values.port}`));
  process.on('SIGTERM', () => server.close(() => process.exit(0)));
}

main();
