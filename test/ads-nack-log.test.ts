import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { TypeUrl } from '../src/api/type-urls.js';
import { runController, type RunningController } from '../src/main.js';
import { MAX_NACK_MESSAGE_CHARS } from '../src/xds/server/ads-server.js';
import { AdsTestClient } from './helpers/ads-client.js';
import { eventually } from './helpers/wait.js';

const NODE_ID = '0c9a4f5e-1d2b-4c3d-8e4f-5a6b7c8d9e01.sidecar.bookbuyer.bookbuyer.cluster.local';

describe('the controller and a proxy that NACKs with 1 MB messages', () => {
  const stateDir = mkdtempSync(path.join(tmpdir(), 'trellis-nack-log-'));
  const lines: string[] = [];
  let running: RunningController;
  let client: AdsTestClient;

  before(async () => {
    running = await runController({
      manifests: 'examples/bookstore',
      meshName: 'osm',
      stateDir,
      xdsAddress: '127.0.0.1:0',
      xdsPlaintextAddress: '127.0.0.1:0',
      httpAddress: '127.0.0.1:0',
      resyncIntervalMs: 0,
      warmUpConfigurationBytes: 0,
      logger: pino({ level: 'info' }, { write: (line: string) => lines.push(line) }),
    });
    client = new AdsTestClient(`127.0.0.1:${running.xdsPlaintextPort}`);
  });
  after(async () => {
    client.close();
    await running.stop();
    rmSync(stateDir, { recursive: true, force: true });
  });

  it('logs one cut line for them, and /debug/proxies keeps only the cut message', async () => {
    const s = client.openStream(NODE_ID);
    s.request(TypeUrl.Cluster);
    const cds = await s.waitFor((r) => r.type_url === TypeUrl.Cluster);
    const huge = 'y'.repeat(1024 * 1024);
    const before = lines.length;
    s.nack(cds, huge);
    s.nack(cds, huge); // the same NACK again (a subscription change would repeat it)
    s.nack(cds, huge);
    const proxies = async (): Promise<{ streams: { types: Record<string, { lastNack: { message: string } | null }> }[] }[]> =>
      (await fetch(`http://127.0.0.1:${running.httpPort}/debug/proxies`)).json() as never;
    await eventually(async () => (await proxies())[0]?.streams[0]?.types.CDS?.lastNack !== null, 'the NACK in /debug/proxies');
    const cut = `${'y'.repeat(MAX_NACK_MESSAGE_CHARS)}… [${huge.length - MAX_NACK_MESSAGE_CHARS} more characters cut]`;
    assert.equal((await proxies())[0].streams[0].types.CDS.lastNack?.message, cut);
    const logged = lines.slice(before);
    const nackLines = logged.filter((l) => (JSON.parse(l) as { msg?: string }).msg === 'NACK');
    assert.equal(nackLines.length, 1, 'one line for the three NACKs');
    assert.equal((JSON.parse(nackLines[0]) as { error: string }).error, cut);
    const bytes = logged.reduce((n, l) => n + l.length, 0);
    assert.ok(bytes < 16 * 1024, `log bytes for three 1 MB NACKs: ${bytes}`);
    s.cancel();
  });
});
