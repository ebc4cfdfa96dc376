/**
 * Child processes of the benchmark: forked helpers spoken to over IPC (load generator, floor
 * server), the controller as `node bin/trellis.js controller …`, and sampling of a process's
 * CPU time and memory from `/proc`. Every child is registered so the runner can kill them all
 * (by PID) on exit, whatever happened.
 */
import { fork, spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, readFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';

const children = new Set<ChildProcess>();

/** Kills every child still running (SIGKILL, by PID). Safe to call more than once. */
export function killAllChildren(): void {
  for (const c of children) {
    if (c.exitCode === null && c.signalCode === null && c.pid !== undefined) {
      try {
        process.kill(c.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  }
  children.clear();
}

function track(child: ChildProcess): ChildProcess {
  children.add(child);
  child.once('exit', () => children.delete(child));
  return child;
}

/** A forked TypeScript helper (run with tsx) answering one command at a time over IPC. */
export class IpcChild {
  private readonly child: ChildProcess;
  private exited: string | undefined;
  private pending: { cmd: string; resolve: (v: unknown) => void; reject: (e: Error) => void } | undefined;

  /** @param script path of the helper, e.g. `bench/load-generator.ts`. */
  constructor(script: string, logFile: string) {
    this.child = track(
      fork(script, [], { execArgv: ['--import', 'tsx', '--max-old-space-size=4096'], stdio: ['ignore', 'pipe', 'pipe', 'ipc'] }),
    );
    const log = createWriteStream(logFile, { flags: 'a' });
    this.child.stdout?.pipe(log);
    this.child.stderr?.pipe(log);
    this.child.on('message', (msg: { reply?: string; error?: string }) => {
      const p = this.pending;
      if (!p || msg.reply !== p.cmd) return;
      this.pending = undefined;
      if (msg.error) p.reject(new Error(`${path.basename(script)} ${p.cmd}: ${msg.error}`));
      else p.resolve(msg);
    });
    this.child.on('exit', (code, signal) => {
      this.exited = `exited (${code ?? signal})`;
      this.pending?.reject(new Error(`${path.basename(script)} ${this.exited} during ${this.pending.cmd}`));
      this.pending = undefined;
    });
  }

  /** The child's PID. */
  get pid(): number {
    return this.child.pid ?? -1;
  }

  /**
   * Sends a command and waits for its reply.
   * @throws Error when the child exits, answers with an error, or does not answer within `timeoutMs`.
   */
  request<T>(message: { cmd: string } & Record<string, unknown>, timeoutMs: number): Promise<T> {
    if (this.exited) return Promise.reject(new Error(`child ${this.exited}`));
    if (this.pending) return Promise.reject(new Error(`request ${message.cmd} while ${this.pending.cmd} is pending`));
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending = undefined;
        reject(new Error(`no reply to ${message.cmd} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending = {
        cmd: message.cmd,
        resolve: (v) => {
          clearTimeout(timer);
          resolve(v as T);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      };
      this.child.send(message);
    });
  }

  /** Asks the child to stop, then kills it after `graceMs`. */
  async stop(graceMs = 3000): Promise<void> {
    if (this.exited) return;
    const exited = new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
    try {
      await this.request({ cmd: 'stop' }, graceMs);
    } catch {
      // killed below
    }
    const timer = setTimeout(() => this.child.pid !== undefined && process.kill(this.child.pid, 'SIGKILL'), graceMs);
    await exited;
    clearTimeout(timer);
  }
}

/** A free TCP port on 127.0.0.1 (bound and released: a small race, fine on a quiet machine). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** CPU seconds (user + system) and memory of a process, from `/proc`. */
export interface ProcSample {
  cpuS: number;
  rssMb: number;
  hwmMb: number;
}

const CLOCK_TICKS = 100; // USER_HZ on Linux

/**
 * Reads `/proc/<pid>/stat` (utime + stime) and `/proc/<pid>/status` (VmRSS, VmHWM).
 * @throws Error when the process is gone.
 */
export function sampleProcess(pid: number): ProcSample {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Fields after the command name (which may hold spaces) start after the last ')'.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const utime = Number(fields[11]);
  const stime = Number(fields[12]);
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (key: string): number => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? 0);
  return { cpuS: (utime + stime) / CLOCK_TICKS, rssMb: kb('VmRSS') / 1024, hwmMb: kb('VmHWM') / 1024 };
}

/** Options of {@link ControllerProcess.start}. */
export interface ControllerStartOptions {
  readonly repoDir: string;
  readonly manifests: string;
  readonly stateDir: string;
  readonly logFile: string;
  /** Directory for `--cpu-prof` output, or undefined for no profile. */
  readonly cpuProfDir?: string;
  /** The controller's `--log-level` (default `warn`); `info` logs each push with its stage timings. */
  readonly logLevel?: string;
  /** Options for the controller's `node` (e.g. `--max-semi-space-size=64`), before the script. */
  readonly nodeOptions?: readonly string[];
  /** The controller's `--warm-up-config` in MiB (default: the controller's own, 64). */
  readonly warmUpConfigMb?: number;
  /**
   * Address of the mTLS ADS listener (default 127.0.0.1); e.g. a lab bridge's address, which
   * real Envoys in lab pods reach and the host's own clients too. The others stay on 127.0.0.1.
   */
  readonly xdsHost?: string;
  /** Ports of the mTLS, plaintext and HTTP listeners (default: free ones). */
  readonly ports?: readonly [xds: number, plaintext: number, http: number];
  /** More `trellis controller` flags, after the others (e.g. `--xds-unread-timeout=10s`). */
  readonly extraArgs?: readonly string[];
  readonly readyTimeoutMs: number;
}

/** The controller as a separate process (`node bin/trellis.js controller`). */
export class ControllerProcess {
  private constructor(
    private readonly child: ChildProcess,
    readonly xdsPort: number,
    readonly plaintextPort: number,
    readonly httpPort: number,
  ) {}

  /**
   * Starts the controller on free loopback ports (resync off, log level warn) and waits for
   * `/readyz`.
   * @throws Error when it exits or is not ready within `readyTimeoutMs`.
   */
  static async start(options: ControllerStartOptions): Promise<ControllerProcess> {
    const [xdsPort, plaintextPort, httpPort] = options.ports ?? [await freePort(), await freePort(), await freePort()];
    const args = [
      ...(options.nodeOptions ?? []),
      ...(options.cpuProfDir ? ['--cpu-prof', `--cpu-prof-dir=${options.cpuProfDir}`] : []),
      path.join(options.repoDir, 'bin/trellis.js'),
      'controller',
      '--manifests', options.manifests,
      '--state-dir', options.stateDir,
      '--xds-address', `${options.xdsHost ?? '127.0.0.1'}:${xdsPort}`,
      '--xds-plaintext-address', `127.0.0.1:${plaintextPort}`,
      '--http-address', `127.0.0.1:${httpPort}`,
      '--resync-interval', '0',
      '--log-level', options.logLevel ?? 'warn',
      ...(options.warmUpConfigMb !== undefined ? ['--warm-up-config', String(options.warmUpConfigMb)] : []),
      ...(options.extraArgs ?? []),
    ];
    const child = track(spawn(process.execPath, args, { cwd: options.repoDir, stdio: ['ignore', 'pipe', 'pipe'] }));
    const log = createWriteStream(options.logFile, { flags: 'a' });
    child.stdout?.pipe(log);
    child.stderr?.pipe(log);
    const controller = new ControllerProcess(child, xdsPort, plaintextPort, httpPort);
    const deadline = Date.now() + options.readyTimeoutMs;
    while (Date.now() < deadline) {
      if (child.exitCode !== null || child.signalCode !== null) throw new Error(`controller exited (${child.exitCode ?? child.signalCode}); see ${options.logFile}`);
      try {
        const res = await fetch(`http://127.0.0.1:${httpPort}/readyz`, { signal: AbortSignal.timeout(1000) });
        if (res.status === 200) return controller;
      } catch {
        // not listening yet
      }
      await new Promise((r) => setTimeout(r, 200));
    }
    await controller.stop();
    throw new Error(`controller not ready within ${options.readyTimeoutMs} ms; see ${options.logFile}`);
  }

  /** The controller's PID. */
  get pid(): number {
    return this.child.pid ?? -1;
  }

  /** Whether the process is still running. */
  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** CPU and memory now. */
  sample(): ProcSample {
    return sampleProcess(this.pid);
  }

  /**
   * Sum of every sample of a Prometheus counter family (e.g. `trellis_xds_response_bytes_total`)
   * from `/metrics`, or NaN when it cannot be read within 10 s.
   */
  async metric(name: string): Promise<number> {
    try {
      const res = await fetch(`http://127.0.0.1:${this.httpPort}/metrics`, { signal: AbortSignal.timeout(10_000) });
      const text = await res.text();
      let sum = 0;
      for (const line of text.split('\n')) {
        if (line.startsWith(`${name}{`) || line.startsWith(`${name} `)) sum += Number(line.slice(line.lastIndexOf(' ') + 1));
      }
      return sum;
    } catch {
      return Number.NaN;
    }
  }

  /** SIGTERM (so `--cpu-prof` writes its profile), SIGKILL after `graceMs`. */
  async stop(graceMs = 15_000): Promise<void> {
    if (!this.running) return;
    const exited = new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.pid !== undefined && this.running && process.kill(this.child.pid, 'SIGKILL'), graceMs);
    await exited;
    clearTimeout(timer);
  }
}
