/**
 * The mesh page of the operations server (`/`, `/debug/mesh`, `/debug/events`), in a real
 * browser: Debian's chromium driven by playwright-core, against `trellis controller` (the built
 * bin/trellis.js) on a copy of examples/bookstore. It checks the graph's edges, a split's
 * weights, that edits to the manifests appear without a reload (server-sent events), a connected
 * proxy's sync state, permissive mode, and that a name with markup in it is shown as text. A
 * screenshot is kept in test-artifacts/mesh-page.png (git-ignored).
 *
 * Without /usr/bin/chromium the browser tests are skipped (install it with
 * `apt-get install -y chromium`); under CI=true (.ci/run installs it) that is a failure.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { cp, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import pino from 'pino';
import { Registry } from 'prom-client';
import { parse } from 'yaml';
import { TypeUrl } from '../src/api/type-urls.js';
import type { MeshView } from '../src/debug/mesh-view.js';
import { OpsServer } from '../src/debug/ops-server.js';
import { AdsTestClient } from './helpers/ads-client.js';
import { watchController } from './helpers/controller-process.js';
import { eventually } from './helpers/wait.js';

const REPO = path.resolve(import.meta.dirname, '..');
const CHROMIUM = '/usr/bin/chromium';
const ARTIFACTS = path.join(REPO, 'test-artifacts');
const chromiumMissing = !existsSync(CHROMIUM);
if (chromiumMissing && process.env.CI === 'true') throw new Error(`CI=true and ${CHROMIUM} is missing: install it with \`apt-get install -y chromium\` (.ci/run does)`);
const skipBrowser = chromiumMissing ? `${CHROMIUM} is missing: install it with \`apt-get install -y chromium\`` : false;

/** A match name full of markup: the page must show it as text. */
const HOSTILE = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>';

/** An HTTPRouteGroup match whose name is {@link HOSTILE}, allowed to bookbuyer by a TrafficTarget of its own. */
const HOSTILE_MANIFEST = `apiVersion: specs.smi-spec.io/v1alpha4
kind: HTTPRouteGroup
metadata:
  name: hostile
  namespace: bookstore
spec:
  matches:
    - name: ${JSON.stringify(HOSTILE)}
      pathRegex: /hostile
---
apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata:
  name: hostile
  namespace: bookstore
spec:
  destination: { kind: ServiceAccount, name: bookstore, namespace: bookstore }
  sources:
    - { kind: ServiceAccount, name: bookbuyer, namespace: bookbuyer }
  rules:
    - kind: HTTPRouteGroup
      name: hostile
      matches: [${JSON.stringify(HOSTILE)}]
`;

/** The backends of the example's TrafficSplit, as its file says. */
async function splitBackends(file: string): Promise<{ service: string; weight: number }[]> {
  return (parse(await readFile(file, 'utf8')) as { spec: { backends: { service: string; weight: number }[] } }).spec.backends;
}

/** A spawned controller on a copy of the example, with its ports. */
interface Controller {
  readonly child: ChildProcess;
  readonly dir: string;
  readonly manifests: string;
  readonly base: string;
  readonly xdsPlaintextPort: number;
  readonly exited: Promise<number | null>;
  output(): string;
}

async function startController(): Promise<Controller> {
  const dir = await mkdtemp(path.join(tmpdir(), 'trellis-s9p-page-'));
  const manifests = path.join(dir, 'bookstore');
  await cp(path.join(REPO, 'examples/bookstore'), manifests, { recursive: true });
  await writeFile(path.join(manifests, 'hostile.yaml'), HOSTILE_MANIFEST);
  const child = spawn(process.execPath, [
    path.join(REPO, 'bin/trellis.js'), 'controller', '--manifests', manifests, '--state-dir', path.join(dir, 'state'),
    '--xds-address', '127.0.0.1:0', '--xds-plaintext-address', '127.0.0.1:0', '--http-address', '127.0.0.1:0',
    '--warm-up-config', '0', '--resync-interval', '0',
  ], { stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const watched = watchController(child);
  const httpPort = await watched.httpPort;
  const xdsPlaintextPort = Number(/"xdsPlaintextPort":(\d+)/.exec(watched.output())?.[1]);
  assert.ok(xdsPlaintextPort > 0, watched.output());
  return { child, dir, manifests, base: `http://127.0.0.1:${httpPort}`, xdsPlaintextPort, exited, output: watched.output };
}

/** An open `/debug/events` stream: its events' data, in order, as they arrive. */
async function openEvents(url: string): Promise<{ status: number; body: string; events: unknown[]; ended: Promise<void>; close(): void }> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, (res) => {
      const events: unknown[] = [];
      let body = '';
      let buffer = '';
      const ended = new Promise<void>((done) => res.once('close', () => done()));
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        body += chunk.slice(0, 4096);
        buffer += chunk;
        let end;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const data = block.split('\n').find((l) => l.startsWith('data: '));
          if (block.split('\n').includes('event: mesh') && data) events.push(JSON.parse(data.slice(6)));
        }
      });
      const wait = res.statusCode === 200 ? Promise.resolve() : new Promise<void>((r) => res.once('end', () => r()));
      void wait.then(() => resolve({ status: res.statusCode ?? 0, get body() { return body; }, events, ended, close: () => req.destroy() }));
    });
    req.once('error', reject);
  });
}

describe('/debug/events (server-sent events of the operations server)', () => {
  it('sends a mesh event on connect and after a change, beats, refuses clients past its bound with 503, and ends every stream on stop', async () => {
    let generation = 1;
    const ops = new OpsServer(
      { ready: () => true, metrics: new Registry(), proxies: () => [], configDump: () => undefined, policies: () => ({}), explain: () => ({ status: 404, body: {} }), podProxy: () => ({ status: 404, error: 'no pod' }), policyStatus: () => undefined, mesh: () => ({ generation }), meshVersion: () => String(generation) },
      pino({ level: 'silent' }),
      { maxClients: 2, heartbeatMs: 50, watchMs: 20, quietMs: 10 },
    );
    const port = await ops.start('127.0.0.1:0');
    const url = `http://127.0.0.1:${port}/debug/events`;
    try {
      const first = await openEvents(url);
      const second = await openEvents(url);
      assert.equal(first.status, 200);
      await eventually(() => first.events.length === 1 && second.events.length === 1, 'an event on connect');
      const third = await openEvents(url);
      assert.equal(third.status, 503);
      assert.match(third.body, /too many event clients \(at most 2\): poll \/debug\/mesh instead/);
      generation = 2; // a new push generation: the version watch sees it
      await eventually(() => first.events.length === 2, 'an event after the generation changed', 5000);
      assert.deepEqual((first.events[1] as { version: string }).version, '2');
      ops.events.changed(); // a proxy changed (the ADS hooks' call)
      ops.events.changed();
      await eventually(() => first.events.length === 3, 'one event for changes close together', 5000);
      await eventually(() => first.body.includes(': heartbeat'), 'a heartbeat');
      await new Promise((r) => setTimeout(r, 100));
      assert.equal(first.events.length, 3, 'two changes within the quiet period made one event');
      first.close();
      await eventually(() => ops.events.clientCount === 1, 'a client that left is forgotten');
      const again = await openEvents(url);
      assert.equal(again.status, 200, 'the place of a client that left is free');
      await ops.stop();
      await Promise.all([second.ended, again.ended]);
    } finally {
      await ops.stop();
    }
  });
});

describe('the mesh page in chromium', { skip: skipBrowser }, () => {
  let controller: Controller;
  // playwright-core's types are imported on demand: the suite is skipped without a browser.
  let browser: import('playwright-core').Browser;
  let page: import('playwright-core').Page;
  let navigations = 0;
  const pageErrors: string[] = [];

  before(async () => {
    controller = await startController();
    const { chromium } = await import('playwright-core');
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
    page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    page.on('pageerror', (err) => pageErrors.push(err.message));
    page.on('console', (message) => {
      if (message.type() === 'error' && !/Failed to load resource/.test(message.text())) pageErrors.push(message.text());
    });
    page.on('framenavigated', (frame) => {
      if (frame === page.mainFrame()) navigations++;
    });
    await page.goto(`${controller.base}/`);
    await page.waitForSelector('#graph g.node');
  });

  after(async () => {
    await browser?.close();
    if (controller) {
      controller.child.kill('SIGTERM');
      await controller.exited;
      await rm(controller.dir, { recursive: true, force: true });
    }
  });

  it('is served with a strict Content-Security-Policy', async () => {
    const res = await fetch(`${controller.base}/`);
    assert.equal(res.status, 200);
    const csp = res.headers.get('content-security-policy') ?? '';
    assert.match(csp, /default-src 'none'/);
    assert.match(csp, /script-src 'self'(;|$)/);
    assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);
  });

  it('draws the SMI graph: bookbuyer → bookstore allowed, no edge from bookthief', async () => {
    assert.equal(await page.getAttribute('#graph', 'data-mode'), 'smi');
    const edges = await page.$$eval('#graph path.edge', (paths) => paths.map((p) => `${p.getAttribute('data-source')} -> ${p.getAttribute('data-destination')}`));
    assert.ok(edges.includes('bookbuyer/bookbuyer -> bookstore/bookstore'), edges.join('\n'));
    assert.ok(edges.includes('bookbuyer/bookbuyer -> bookstore/bookstore-v2'), edges.join('\n'));
    assert.ok(edges.includes('bookwarehouse/bookwarehouse -> bookwarehouse/mysql'), edges.join('\n'));
    assert.deepEqual(edges.filter((e) => e.startsWith('bookthief/')), []);
    assert.equal(await page.locator('#graph g.node[data-identity="bookthief/bookthief"]').count(), 1, 'bookthief is drawn, without an edge');
    const modeText = await page.textContent('#mode');
    assert.match(modeText ?? '', /SMI mode/);
    await page.click('#graph g.node[data-identity="bookbuyer/bookbuyer"]');
    const selected = await page.$$eval('#graph path.edge.selected', (paths) => paths.map((p) => p.getAttribute('data-destination')).sort());
    assert.deepEqual(selected, ['bookstore/bookstore', 'bookstore/bookstore-v2'], 'a click on a node highlights its edges');
    await page.click('#graph g.node[data-identity="bookbuyer/bookbuyer"]');
    assert.equal(await page.locator('#graph path.edge.selected').count(), 0);
  });

  it('shows the split\'s weights as the file has them', async () => {
    const expected = await splitBackends(path.join(controller.manifests, 'split.yaml'));
    assert.deepEqual(await shownBackends(page), expected);
  });

  it('draws the mesh from the data embedded in the page, before and without any /debug fetch', async () => {
    const html = await (await fetch(`${controller.base}/`)).text();
    const block = /<script type="application\/json" id="mesh-data">([^<]*)<\/script>/.exec(html);
    assert.ok(block, 'a JSON data block in the page');
    const embedded = JSON.parse(block[1]!) as { meshName: string; edges: unknown[] };
    assert.equal(embedded.meshName, 'osm');
    assert.ok(block[1]!.includes('\\u003cscript\\u003e'), 'the hostile name is escaped in the block');
    const offline = await browser.newPage();
    try {
      await offline.route('**/debug/**', (route) => route.abort());
      await offline.goto(`${controller.base}/`);
      await offline.waitForSelector('#graph g.node[data-identity="bookbuyer/bookbuyer"]', { timeout: 10_000 });
      assert.equal(await offline.evaluate(() => (window as unknown as { pwned?: number }).pwned), undefined);
    } finally {
      await offline.close();
    }
  });

  it('shows a name with markup as text: no element, no script run', async () => {
    await page.click('#access-details summary');
    const cell = page.locator('#access tbody tr td.mono', { hasText: 'hostile' });
    assert.ok((await cell.textContent())?.includes(HOSTILE), 'the match name is shown as it is');
    assert.equal(await page.locator('#access img, #graph img, body script:not([src])').count(), 0);
    assert.equal(await page.evaluate(() => (window as unknown as { pwned?: number }).pwned), undefined);
  });

  it('shows an edit of the split file without a reload', async () => {
    const file = path.join(controller.manifests, 'split.yaml');
    const navigationsBefore = navigations;
    const text = await readFile(file, 'utf8');
    await writeFile(file, text.replace(/weight: 50\n(\s+- service: bookstore-v2\n\s+weight:) 50/, 'weight: 80\n$1 20'));
    const expected = await splitBackends(file);
    assert.deepEqual(expected.map((b) => b.weight), [80, 20], 'the file was edited');
    await page.waitForFunction(
      (want) => [...document.querySelectorAll('#splits [data-backend]')].map((b) => b.getAttribute('data-weight')).join(',') === want,
      expected.map((b) => b.weight).join(','),
      { timeout: 20_000 },
    );
    assert.deepEqual(await shownBackends(page), expected);
    assert.equal(navigations, navigationsBefore, 'no reload');
    assert.equal(await page.getAttribute('#live', 'data-live'), 'events');
  });

  it('lists a connected proxy with its per-type sync state and last NACK', async () => {
    const uuid = '9b2f7f1e-0c5d-4a57-9d7e-000000000516';
    const client = new AdsTestClient(`127.0.0.1:${controller.xdsPlaintextPort}`);
    try {
      const stream = client.openStream(`${uuid}.sidecar.bookbuyer.bookbuyer.cluster.local`);
      stream.request(TypeUrl.Cluster);
      stream.ack(await stream.waitFor((r) => r.type_url === TypeUrl.Cluster, 20_000));
      stream.request(TypeUrl.Listener);
      stream.nack(await stream.waitFor((r) => r.type_url === TypeUrl.Listener, 20_000), `listener refused ${HOSTILE}`);
      const row = page.locator(`#proxies tr[data-proxy="${uuid}"]`);
      await row.locator('[data-type="CDS"][data-state="synced"]').waitFor({ timeout: 20_000 });
      await row.locator('[data-type="LDS"][data-state="nacked"]').waitFor({ timeout: 20_000 });
      assert.equal(await row.getAttribute('data-identity'), 'bookbuyer/bookbuyer');
      await eventually(async () => ((await row.locator('td').last().textContent()) ?? '').includes(`LDS at`), 'the last NACK shown', 20_000);
      assert.ok(((await row.locator('td').last().textContent()) ?? '').endsWith(`: listener refused ${HOSTILE}`), 'the NACK message is shown as text');
      assert.equal(await page.locator('#proxies img, #proxies script').count(), 0);
      await mkdir(ARTIFACTS, { recursive: true });
      const screenshot = path.join(ARTIFACTS, 'mesh-page.png');
      await page.screenshot({ path: screenshot, fullPage: true });
      console.log(`mesh page screenshot: ${screenshot}`);
      stream.end();
    } finally {
      client.close();
    }
    await page.locator(`#proxies tr[data-proxy="${uuid}"]`).waitFor({ state: 'detached', timeout: 20_000 });
  });

  it('draws permissive mode as such (one hub, one line per identity) after a MeshConfig edit', async () => {
    const file = path.join(controller.manifests, 'meshconfig.yaml');
    await writeFile(file, (await readFile(file, 'utf8')).replace('enablePermissiveTrafficPolicyMode: false', 'enablePermissiveTrafficPolicyMode: true'));
    await page.waitForSelector('#graph[data-mode="permissive"]', { timeout: 20_000 });
    assert.equal(await page.locator('#graph g.hub[data-permissive="true"]').count(), 1);
    const identities = await page.locator('#graph g.node').count();
    assert.equal(await page.locator('#graph path.edge.permissive').count(), identities);
    assert.equal(await page.locator('#graph path.edge:not(.permissive)').count(), 0);
    assert.match((await page.textContent('#mode')) ?? '', /every identity may talk to every service/);
    await page.screenshot({ path: path.join(ARTIFACTS, 'mesh-page-permissive.png'), fullPage: true });
    assert.deepEqual(pageErrors, []);
  });

  it('shows the policy status /debug/policies reports (accepted and programmed counts, the first NACK) when there is one', async () => {
    const view: MeshView = {
      meshName: 'osm', generation: 7, permissive: false, services: [], identities: [], edges: [], trafficSplits: [], proxies: [],
      policyStatus: [
        { kind: 'TrafficTarget', namespace: 'bookstore', name: 'bookstore', generation: 3, accepted: true, problems: [], affected: 2, programmed: 2, nacked: 0, firstNack: null },
        { kind: 'TrafficSplit', namespace: 'bookstore', name: 'bookstore-split', generation: 4, accepted: true, problems: [], affected: 2, programmed: 1, nacked: 1, firstNack: { proxy: 'uuid-1', identity: 'bookbuyer/bookbuyer', type: 'RDS', message: `rejected ${HOSTILE}` } },
        { kind: 'HTTPRouteGroup', namespace: 'bookstore', name: 'broken', generation: 1, accepted: false, problems: ['match name missing'], affected: 0, programmed: 0, nacked: 0, firstNack: null },
      ],
      problems: { manifestErrors: 0, manifestWarnings: 0, policyProblems: 1, validationFailures: 0, texts: ['HTTPRouteGroup bookstore/broken: match name missing'] },
    };
    const ops = new OpsServer(
      { ready: () => true, metrics: new Registry(), proxies: () => [], configDump: () => undefined, policies: () => ({}), explain: () => ({ status: 404, body: {} }), podProxy: () => ({ status: 404, error: 'no pod' }), policyStatus: () => undefined, mesh: () => view, meshVersion: () => '7' },
      pino({ level: 'silent' }),
    );
    const port = await ops.start('127.0.0.1:0');
    const other = await browser.newPage();
    try {
      await other.goto(`http://127.0.0.1:${port}/`);
      await other.waitForSelector('#policy-status tr[data-kind="TrafficSplit"]');
      assert.equal(await other.textContent('#policy-summary'), '2 of 3 accepted, 1 of 3 programmed on every affected proxy.');
      const split = other.locator('#policy-status tr[data-kind="TrafficSplit"] td');
      assert.deepEqual(await split.allTextContents(), ['TrafficSplit', 'bookstore/bookstore-split', '4', 'yes', '1 of 2', '1', `bookbuyer/bookbuyer (uuid-1) RDS: rejected ${HOSTILE}`]);
      assert.match((await other.textContent('#policy-status tr[data-kind="HTTPRouteGroup"]')) ?? '', /no: match name missing/);
      assert.equal(await other.locator('#policy-status img, #policy-status script').count(), 0);
    } finally {
      await other.close();
      await ops.stop();
    }
  });

  it('ends its event streams when the controller stops: SIGTERM exits 0 with a page connected', async () => {
    const events = await openEvents(`${controller.base}/debug/events`);
    assert.equal(events.status, 200);
    controller.child.kill('SIGTERM');
    assert.equal(await controller.exited, 0, controller.output());
    await events.ended;
  });
});

/** The split's backends as the page shows them. */
async function shownBackends(page: import('playwright-core').Page): Promise<{ service: string; weight: number }[]> {
  return page.$$eval('#splits tr[data-split="bookstore/bookstore-split"] [data-backend]', (spans) =>
    spans.map((s) => ({ service: s.querySelector('.name')?.textContent ?? '', weight: Number(s.querySelector('.weight')?.textContent) })),
  );
}
