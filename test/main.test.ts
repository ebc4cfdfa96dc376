import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import pino from 'pino';
import { isLoopbackHost, runController } from '../src/main.js';

describe('plaintext ADS listener', () => {
  it('knows loopback hosts', () => {
    for (const host of ['localhost', '127.0.0.1', '127.1.2.3', '::1']) assert.equal(isLoopbackHost(host), true, host);
    for (const host of ['0.0.0.0', '10.0.0.1', '::', 'example.com']) assert.equal(isLoopbackHost(host), false, host);
  });

  it('refuses a non-loopback address unless insecureAllowRemote is set', async () => {
    await assert.rejects(
      runController({
        manifests: 'examples/bookstore',
        meshName: 'osm',
        stateDir: '/nonexistent-never-created',
        xdsAddress: '127.0.0.1:0',
        xdsPlaintextAddress: '0.0.0.0:0',
        httpAddress: '127.0.0.1:0',
        resyncIntervalMs: 0,
        logger: pino({ level: 'silent' }),
      }),
      /not a loopback address.*--insecure-allow-remote/,
    );
  });
});
