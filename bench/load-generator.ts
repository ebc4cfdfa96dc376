/**
 * The load generator: a separate process (forked by `bench/run.ts`, commands over the IPC
 * channel) that runs N {@link LeanSidecar}s (state-of-the-world ADS) or N
 * {@link LeanDeltaSidecar}s (delta ADS), each on its own gRPC channel to the ADS server,
 * and reports per-proxy times. Every wait is bounded; on `stop` or when the parent goes away
 * it closes every stream and exits.
 *
 * Commands (`{cmd, …}`) and replies (`{reply: cmd, …}`):
 * - `prepare {proxies, transport, stateDir}`: builds channel credentials (mTLS: issues each
 *   proxy's client certificate from the CA in `stateDir`, which the controller created).
 * - `connect {address, maxReceiveBytes, verify, delta}`: opens every stream at once (delta ADS
 *   when `delta`); replies with the start time.
 * - `waitSynced {timeoutMs}`: waits until every proxy ACKed its first full configuration
 *   (or failed, or the timeout); replies with each proxy's sync time.
 * - `mark`: starts a measurement window. `status`: activity since the mark.
 * - `report`: per-proxy results since the mark. `disconnect`: closes every stream.
 * - `stop`: exits.
 */
import 'reflect-metadata';
import { existsSync } from 'node:fs';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { CA_CERT_FILE, CertificateAuthority } from '../src/certificate/authority.js';
import { CertificateManager } from '../src/certificate/manager.js';
import { proxyCommonName } from '../src/proxy/types.js';
import { LeanDeltaSidecar, ReferenceCache } from './lean-delta-sidecar.js';
import { LeanSidecar, nowMs, warmUpCodecs, type Sidecar, type SidecarObserver } from './lean-sidecar.js';
import type { BenchProxy } from './mesh-generator.js';

/** Transport of the ADS streams. */
export type Transport = 'mtls' | 'plaintext';

/** A command from the runner. */
export type GeneratorCommand =
  | { cmd: 'prepare'; proxies: BenchProxy[]; transport: Transport; stateDir: string }
  | { cmd: 'connect'; address: string; maxReceiveBytes: number; verify: boolean; delta?: boolean }
  | { cmd: 'waitSynced'; timeoutMs: number }
  | { cmd: 'mark' }
  | { cmd: 'status' }
  | { cmd: 'report' }
  | { cmd: 'disconnect' }
  | { cmd: 'stop' };

/** Activity since the last mark (for the runner's settle loop). */
export interface GeneratorStatus {
  reply: 'status';
  /** Proxies that received at least one response since the mark. */
  updated: number;
  responses: number;
  /** Monotonic ms of the last response received (any proxy), 0 if none since the mark. */
  lastResponseAt: number;
  ended: number;
}

/** Per-proxy results since the mark. */
export interface GeneratorReport {
  reply: 'report';
  /** Per proxy (in `prepare` order): monotonic ms of its last ACK since the mark, or 0 when it received nothing. */
  lastAck: number[];
  /** Per proxy: responses since the mark. */
  responses: number[];
  /** Sum of the sizes of the DiscoveryResponse messages received since the mark. */
  bytes: number;
  /** Responses since the mark, by type URL. */
  byType: Record<string, number>;
  /** The generator's own CPU seconds since the mark. */
  generatorCpuS: number;
}

/** Reply of `waitSynced`. */
export interface GeneratorSynced {
  reply: 'waitSynced';
  /** Per proxy: monotonic ms when its first full configuration was ACKed, or null. */
  syncedAt: (number | null)[];
  ended: number;
  /** Connections retried after failing before any response (all proxies; see `CONNECT_RETRY`). */
  reconnects: number;
  /** Proxies that needed at least one such retry. */
  reconnectedProxies: number;
  /** Up to 5 distinct statuses of the failed connections retried. */
  reconnectErrors: string[];
  /** Up to 5 distinct stream end statuses. */
  errors: string[];
  verifyMismatches: string[];
  bytes: number;
  generatorCpuS: number;
}

const MAX_ERRORS = 5;

class Generator implements SidecarObserver {
  private sidecars: Sidecar[] = [];
  private credentials: grpc.ChannelCredentials[] = [];
  private nodeIds: string[] = [];
  private syncedCount = 0;
  private endedCount = 0;
  private readonly errors = new Set<string>();
  private readonly reconnectErrors = new Set<string>();
  private readonly mismatches: string[] = [];
  private syncWaiter: (() => void) | undefined;
  private markUpdated = 0;
  private markResponsesTotal = 0;
  private markBytes = 0;
  private markLastResponse = 0;
  private markByType: Record<string, number> = {};
  private markCpu = process.cpuUsage();
  private totalBytes = 0;

  async prepare(proxies: readonly BenchProxy[], transport: Transport, stateDir: string): Promise<{ ms: number }> {
    const start = nowMs();
    warmUpCodecs();
    this.nodeIds = proxies.map((p) => proxyCommonName(p.uuid, 'sidecar', p.namespace, p.serviceAccount));
    if (transport === 'plaintext') {
      this.credentials = proxies.map(() => grpc.credentials.createInsecure());
      return { ms: nowMs() - start };
    }
    if (!existsSync(path.join(stateDir, CA_CERT_FILE))) throw new Error(`no CA in ${stateDir}: start the controller first`);
    const ca = await CertificateAuthority.loadOrCreate(stateDir);
    const manager = new CertificateManager({ ca });
    const caPem = Buffer.from(manager.caPem);
    this.credentials = new Array(proxies.length);
    const BATCH = 32;
    for (let i = 0; i < proxies.length; i += BATCH) {
      await Promise.all(
        proxies.slice(i, i + BATCH).map(async (p, k) => {
          const cert = await manager.issueProxyCertificate(p.uuid, p.namespace, p.serviceAccount, 24 * 3600);
          this.credentials[i + k] = grpc.credentials.createSsl(caPem, Buffer.from(cert.keyPem), Buffer.from(cert.certPem));
        }),
      );
    }
    manager.stop();
    return { ms: nowMs() - start };
  }

  connect(address: string, maxReceiveBytes: number, verify: boolean, delta: boolean): { startedAt: number; openedAt: number } {
    this.disconnect();
    this.syncedCount = 0;
    this.endedCount = 0;
    this.errors.clear();
    this.reconnectErrors.clear();
    this.mismatches.length = 0;
    this.totalBytes = 0;
    this.mark();
    const startedAt = nowMs();
    // The delta sidecar has no cross-check of its own: the SotW one's covers the shared extraction.
    // Delta sidecars share what each Cluster/Listener version refers to (decoded once, held once).
    const references = new ReferenceCache();
    this.sidecars = this.nodeIds.map((id, i) => (delta ? new LeanDeltaSidecar(id, this, references) : new LeanSidecar(id, this, verify && i === 0)));
    this.sidecars.forEach((s, i) => s.connect(address, this.credentials[i], maxReceiveBytes));
    return { startedAt, openedAt: nowMs() };
  }

  async waitSynced(timeoutMs: number): Promise<GeneratorSynced> {
    const cpu = process.cpuUsage();
    const done = (): boolean => this.sidecars.every((s) => s.syncedAt !== undefined || s.ended !== undefined);
    if (!done()) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, timeoutMs);
        this.syncWaiter = () => {
          if (!done()) return;
          clearTimeout(timer);
          resolve();
        };
      });
      this.syncWaiter = undefined;
    }
    const used = process.cpuUsage(cpu);
    return {
      reply: 'waitSynced',
      syncedAt: this.sidecars.map((s) => s.syncedAt ?? null),
      ended: this.endedCount,
      reconnects: this.sidecars.reduce((n, s) => n + s.reconnects, 0),
      reconnectedProxies: this.sidecars.filter((s) => s.reconnects > 0).length,
      reconnectErrors: [...this.reconnectErrors],
      errors: [...this.errors],
      verifyMismatches: [...this.mismatches],
      bytes: this.totalBytes,
      generatorCpuS: (used.user + used.system) / 1e6,
    };
  }

  mark(): { markedAt: number } {
    for (const s of this.sidecars) s.mark();
    this.markUpdated = 0;
    this.markResponsesTotal = 0;
    this.markBytes = 0;
    this.markLastResponse = 0;
    this.markByType = {};
    this.markCpu = process.cpuUsage();
    return { markedAt: nowMs() };
  }

  status(): GeneratorStatus {
    return { reply: 'status', updated: this.markUpdated, responses: this.markResponsesTotal, lastResponseAt: this.markLastResponse, ended: this.endedCount };
  }

  report(): GeneratorReport {
    const used = process.cpuUsage(this.markCpu);
    return {
      reply: 'report',
      lastAck: this.sidecars.map((s) => s.markLastAck),
      responses: this.sidecars.map((s) => s.markResponses),
      bytes: this.markBytes,
      byType: { ...this.markByType },
      generatorCpuS: (used.user + used.system) / 1e6,
    };
  }

  disconnect(): void {
    for (const s of this.sidecars) s.close();
    this.sidecars = [];
  }

  onResponse(sidecar: Sidecar, type: string, bytes: number, ackAt: number): void {
    if (sidecar.markResponses === 1) this.markUpdated++;
    this.markResponsesTotal++;
    this.markBytes += bytes;
    this.totalBytes += bytes;
    this.markLastResponse = ackAt;
    const short = type.slice(type.lastIndexOf('.') + 1);
    this.markByType[short] = (this.markByType[short] ?? 0) + 1;
  }

  onSynced(): void {
    this.syncedCount++;
    this.syncWaiter?.();
  }

  onEnded(_sidecar: Sidecar, status: { code: number; details: string }): void {
    this.endedCount++;
    if (this.errors.size < MAX_ERRORS) this.errors.add(`${grpc.status[status.code] ?? status.code}: ${status.details}`);
    this.syncWaiter?.();
  }

  onReconnect(_sidecar: Sidecar, status: { code: number; details: string }): void {
    if (this.reconnectErrors.size < MAX_ERRORS) this.reconnectErrors.add(`${grpc.status[status.code] ?? status.code}: ${status.details}`);
  }

  onVerifyMismatch(_sidecar: Sidecar, message: string): void {
    if (this.mismatches.length < MAX_ERRORS) this.mismatches.push(message);
  }
}

function reply(message: object): void {
  process.send?.(message);
}

/** Runs the command loop on the IPC channel. */
function main(): void {
  if (!process.send) {
    process.stderr.write('load-generator: run me through bench/run.ts (needs an IPC channel)\n');
    process.exit(2);
  }
  const generator = new Generator();
  // One command at a time, in order.
  let chain: Promise<void> = Promise.resolve();
  process.on('message', (msg: GeneratorCommand) => {
    chain = chain.then(async () => {
      try {
        switch (msg.cmd) {
          case 'prepare':
            reply({ reply: 'prepare', ...(await generator.prepare(msg.proxies, msg.transport, msg.stateDir)) });
            break;
          case 'connect':
            reply({ reply: 'connect', ...generator.connect(msg.address, msg.maxReceiveBytes, msg.verify, msg.delta ?? false) });
            break;
          case 'waitSynced':
            reply(await generator.waitSynced(msg.timeoutMs));
            break;
          case 'mark':
            reply({ reply: 'mark', ...generator.mark() });
            break;
          case 'status':
            reply(generator.status());
            break;
          case 'report':
            reply(generator.report());
            break;
          case 'disconnect':
            generator.disconnect();
            reply({ reply: 'disconnect' });
            break;
          case 'stop':
            generator.disconnect();
            reply({ reply: 'stop' });
            setTimeout(() => process.exit(0), 50).unref();
            break;
        }
      } catch (err) {
        reply({ reply: msg.cmd, error: err instanceof Error ? err.stack ?? err.message : String(err) });
      }
    });
  });
  // The runner went away (crash, Ctrl-C): close everything and exit.
  process.on('disconnect', () => {
    generator.disconnect();
    process.exit(0);
  });
}

main();
