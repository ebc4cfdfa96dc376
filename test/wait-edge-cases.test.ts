/**
 * `trellis wait --for programmed` at its edges, against a controller on a copy of
 * examples/bookstore with no proxy connected: an object no connected proxy is affected by
 * (0 of 0), with and without `--require-proxies`, an object whose latest document did not load, and
 * an object deleted while waiting.
 */
import assert from 'node:assert/strict';
import { readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { printStatus, waitProgrammed, type StatusOutput, type WaitOptions } from '../src/cli/status-command.js';
import type { RunningController } from '../src/main.js';
import { startExampleController, type ExampleController } from './helpers/example-controller.js';

describe('trellis wait: no affected proxy, and a deleted object', () => {
  let controller: ExampleController;
  let manifests: string;
  let running: RunningController;

  before(async () => {
    controller = await startExampleController('trellis-s10s-wait-');
    ({ running, manifests } = controller);
  });

  after(async () => {
    await controller?.stop();
  });

  async function status(): Promise<string> {
    let text = '';
    await printStatus({ controller: `http://127.0.0.1:${running.httpPort}`, output: 'table' }, { out: (t) => void (text += t), err: (t) => void (text += t) });
    return text;
  }

  async function wait(options: Partial<WaitOptions>): Promise<{ code: number; stdout: string; stderr: string }> {
    const io = { stdout: '', stderr: '' };
    const output: StatusOutput = { out: (t) => void (io.stdout += t), err: (t) => void (io.stderr += t) };
    const code = await waitProgrammed({ controller: `http://127.0.0.1:${running.httpPort}`, kind: 'TrafficSplit', namespace: 'bookstore', name: 'bookstore-split', timeoutSeconds: 20, ...options }, output);
    return { code, ...io };
  }

  it('exits 0 for 0 of 0 affected proxies, saying no connected proxy is affected', async () => {
    const result = await wait({});
    assert.equal(result.code, 0, result.stderr);
    assert.equal(
      result.stdout,
      'TrafficSplit bookstore/bookstore-split generation 1 programmed: reached 0 of 0 affected proxies\nno connected proxy is affected by TrafficSplit bookstore/bookstore-split: nothing holds it yet (--require-proxies waits for one)\n',
    );
  });

  it('with requireProxies waits for a proxy and times out saying none is affected', async () => {
    const result = await wait({ requireProxies: true, timeoutSeconds: 0.5 });
    assert.equal(result.code, 1);
    assert.match(result.stderr, /^timed out after 0\.5 s: TrafficSplit bookstore\/bookstore-split generation 1 is not programmed: reached 0 of 0 affected proxies\n {2}no connected proxy is affected by TrafficSplit bookstore\/bookstore-split/);
  });

  it('exits 1 with the manifest error when the latest document did not load, and the status keeps the generation in force', async () => {
    const file = path.join(manifests, 'split.yaml');
    const good = await readFile(file, 'utf8');
    await writeFile(file, good.replace('weight: 50', 'weight: -5'));
    const waiting = wait({ generation: 2, timeoutSeconds: 15, documentErrorGraceMs: 300 }); // generation 2 never comes
    const result = await waiting;
    assert.equal(result.code, 1);
    assert.match(
      result.stderr,
      /^TrafficSplit bookstore\/bookstore-split: its latest document is not loaded \(generation 1 stays in force\):\n {2}\S*split\.yaml:\d+: TrafficSplit bookstore\/bookstore-split: spec\.backends\[0\]\.weight: must be >= 0/,
    );
    const table = await status();
    const row = table.split('\n').find((line) => line.startsWith('TrafficSplit'))!;
    assert.match(row, /bookstore-split +1 +True +0\/0 +0 +the latest document is not loaded, generation 1 stays in force: \S*split\.yaml:\d+: TrafficSplit/);
    await writeFile(file, good);
    const fixed = await wait({});
    assert.equal(fixed.code, 0, fixed.stderr);
  });

  it('exits 1 saying so when the object is deleted while waiting, not at the timeout', async () => {
    const waiting = wait({ generation: 2, timeoutSeconds: 15, deletedGraceMs: 300 }); // waits: the controller has generation 1
    await new Promise((r) => setTimeout(r, 300));
    await rm(path.join(manifests, 'split.yaml'));
    const result = await waiting;
    assert.equal(result.code, 1);
    assert.equal(result.stderr, 'TrafficSplit bookstore/bookstore-split was deleted while waiting (the controller last had generation 1)\n');
  });
});
