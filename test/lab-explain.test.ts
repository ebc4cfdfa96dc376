/**
 * `trellis explain` against real Envoys: the lab on examples/bookstore, and for each request
 * what `trellis explain --from-pod … --controller <the lab's controller>` answers beside what
 * curl in the source pod gets through both sidecars: allowed ↔ 200, a denial the explanation
 * gives as 404 (no route) ↔ 404, one it gives as a closed connection ↔ no HTTP answer. Lab
 * prefix `s9e`, subnet 10.236.20.0/25, ADS port and operations port of test/helpers/lab-ports.ts; run under the lab lock.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Explanation } from '../src/explain/explain.js';
import { startLab, type Lab } from '../src/lab/lab.js';
import { envoyTestSkip } from './helpers/envoy.js';
import { bookstoreLabDir } from './helpers/lab-manifests.js';
import { BOOKBUYER, BOOKTHIEF, TRELLIS, type LabPodRef } from './helpers/lab.js';
import { LAB_SUITE_PORTS } from './helpers/lab-ports.js';

const PREFIX = 's9e';
const SUBNET = '10.236.20.0/25';
const { xds: XDS_PORT, http: HTTP_PORT } = LAB_SUITE_PORTS.labExplain;
const HTTP_ADDRESS = `127.0.0.1:${HTTP_PORT}`;

const { envoyPath, skip } = envoyTestSkip(['ip', 'setpriv', 'iptables-restore', 'curl']);

/** One request of the example's clients. */
interface Case {
  readonly name: string;
  readonly from: LabPodRef;
  readonly method: string;
  readonly path: string;
  readonly headers: Readonly<Record<string, string>>;
}

const BUYER_HEADERS = { 'user-agent': 'bookbuyer-http-client/1.0', 'client-app': 'bookbuyer' };
const CASES: readonly Case[] = [
  { name: 'bookbuyer GET /books-bought with its headers', from: BOOKBUYER, method: 'GET', path: '/books-bought', headers: BUYER_HEADERS },
  { name: 'bookbuyer POST /books-bought (method mismatch)', from: BOOKBUYER, method: 'POST', path: '/books-bought', headers: BUYER_HEADERS },
  { name: 'bookbuyer GET /books-bought as client-app bookthief (header mismatch)', from: BOOKBUYER, method: 'GET', path: '/books-bought', headers: { ...BUYER_HEADERS, 'client-app': 'bookthief' } },
  { name: 'bookbuyer GET /buy-a-book/new (the other match, no headers needed)', from: BOOKBUYER, method: 'GET', path: '/buy-a-book/new', headers: {} },
  { name: 'bookthief GET /books-bought (no TrafficTarget)', from: BOOKTHIEF, method: 'GET', path: '/books-bought', headers: BUYER_HEADERS },
];

function explainCommand(c: Case): Promise<{ code: number; explanation: Explanation; stderr: string }> {
  const args = [
    TRELLIS, 'explain', '--from-pod', `${c.from.namespace}/${c.from.pod}`, '--to', 'bookstore.bookstore:14001', '--path', c.path, '--method', c.method,
    ...Object.entries(c.headers).flatMap(([k, v]) => ['--header', `${k}=${v}`]), '--controller', `http://${HTTP_ADDRESS}`, '--output', 'json',
  ];
  return new Promise((resolve, reject) => {
    execFile(process.execPath, args, { encoding: 'utf8', timeout: 60_000 }, (error, stdout, stderr) => {
      const code = error ? (typeof error.code === 'number' ? error.code : -1) : 0;
      try {
        resolve({ code, explanation: JSON.parse(stdout) as Explanation, stderr });
      } catch {
        reject(new Error(`trellis explain exited ${code}: ${stderr}`));
      }
    });
  });
}

describe('trellis explain agrees with real Envoys (lab on examples/bookstore)', { skip }, () => {
  let dir: string;
  let lab: Lab;

  before(async () => {
    const made = await bookstoreLabDir();
    dir = made.dir;
    lab = await startLab({ manifestsDir: made.manifests, envoyPath, prefix: PREFIX, subnet: SUBNET, httpAddress: HTTP_ADDRESS, xdsPort: XDS_PORT, stateDir: path.join(dir, 'state') });
    await lab.waitForAllAcked(120_000);
  });

  after(async () => {
    await lab?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  for (const c of CASES) {
    it(c.name, async () => {
      const { code, explanation, stderr } = await explainCommand(c);
      const curl = await lab.exec(c.from.pod, c.from.namespace, [
        'curl', '-sS', '-m', '10', '-o', '/dev/null', '-w', '%{http_code}', '-X', c.method,
        ...Object.entries(c.headers).flatMap(([k, v]) => ['-H', `${k}: ${v}`]), `http://bookstore.bookstore:14001${c.path}`,
      ]);
      const status = curl.stdout.trim();
      const reasons = explanation.reasons.join('\n');
      assert.equal(code, explanation.decision === 'allowed' ? 0 : 1, stderr);
      if (explanation.decision === 'allowed') {
        assert.equal(status, '200', `explain says allowed:\n${reasons}\ncurl: ${status} ${curl.stderr}`);
        return;
      }
      assert.equal(explanation.decision, 'denied', reasons);
      const denials = [explanation.outbound?.denied, ...explanation.inbound.filter((i) => i.reached).map((i) => i.denied)].filter((d): d is string => typeof d === 'string');
      if (denials.some((d) => d.includes('(404)'))) assert.equal(status, '404', `explain says 404:\n${reasons}\ncurl: ${status} ${curl.stderr}`);
      else if (denials.some((d) => d.endsWith('(403)'))) assert.equal(status, '403', `explain says 403:\n${reasons}\ncurl: ${status} ${curl.stderr}`);
      else assert.ok(status === '000' || status === '503', `explain says the connection is closed:\n${reasons}\ncurl: ${status} ${curl.stderr}`);
    });
  }
});
