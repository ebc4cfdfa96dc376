import { it } from 'node:test';
import { mkdtemp, cp, writeFile, chmod, rm, readFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { createLabNetwork, removeLabNetwork } from '../src/lab/network.js';
import { runController } from '../src/main.js';
import { envoyTestSkip, startLabSidecar, waitForSidecarInSync } from './helpers/envoy.js';

const req = envoyTestSkip();
const variants: Record<string, string> = JSON.parse(process.env.TLE_VARIANTS ?? '{}');
for (const [name, sidecarYaml] of Object.entries(variants)) {
  it(name, async () => {
    await removeLabNetwork('tle9');
    const lab = await createLabNetwork('tle9', '10.252.0.192/26');
    const work = await mkdtemp(path.join(os.tmpdir(), 'tle9-'));
    await chmod(work, 0o755);
    await cp('examples/bookstore', path.join(work, 'm'), { recursive: true });
    const mc = path.join(work, 'm/meshconfig.yaml');
    await writeFile(mc, (await readFile(mc, 'utf8')) + sidecarYaml);
    const running = await runController({ manifests: path.join(work, 'm'), meshName: 'osm', stateDir: path.join(work, 's'), xdsAddress: `${lab.bridgeAddress}:15128`, httpAddress: '127.0.0.1:19219', resyncIntervalMs: 600000, logger: pino({ level: 'warn' }) });
    try {
      const s = await startLabSidecar({ lab, envoyPath: req.envoyPath!, stateDir: path.join(work, 's'), xdsAddress: `${lab.bridgeAddress}:15128`, namespace: 'bookstore', serviceAccount: 'bookstore', delta: false, name: 'x', podIp: '10.244.1.1', labAddress: '10.252.0.194', workDir: work });
      try { await waitForSidecarInSync(s, 'http://127.0.0.1:19219', 8000); } finally { await s.stop(); }
    } finally { await running.stop(); await removeLabNetwork('tle9'); await rm(work, { recursive: true, force: true }); }
  });
}
