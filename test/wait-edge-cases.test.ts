/**
 * `trellis wait --for programmed` at its edges, against a controller on a copy of
 * examples/bookstore with no proxy connected: an object no connected proxy is affected by
 * (0 of 0), with and without `--require-proxies`, and an object deleted while waiting.
 */
import assert from 'node:assert/strict';
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { waitProgrammed, type StatusOutput, type WaitOptions } from '../src/cli/status-command.js';
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

  it('exits 1 saying so when the object is deleted while waiting, not at the timeout', async () => {
    const waiting = wait({ generation: 2, timeoutSeconds: 15, deletedGraceMs: 300 }); // waits: the controller has generation 1
    await new Promise((r) => setTimeout(r, 300));
    await rm(path.join(manifests, 'split.yaml'));
    const result = await waiting;
    assert.equal(result.code, 1);
    assert.equal(result.stderr, 'TrafficSplit bookstore/bookstore-split was deleted while waiting (the controller last had generation 1)\n');
  });
});
