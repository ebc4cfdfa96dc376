/**
 * Runs Debian's `kubectl` (package `kubernetes-client`, unpacked by `.ci/run` into
 * `.cache/kubernetes-client/`, because another kubectl owns /usr/bin/kubectl on these machines)
 * against a {@link FakeKubeApiServer}.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { FakeKubeApiServer } from './fake-kube-apiserver.js';

/** Where `.ci/run` unpacks the kubectl binary. */
export const KUBECTL_PATH = path.resolve(import.meta.dirname, '../../.cache/kubernetes-client/usr/bin/kubectl');

/**
 * The kubectl binary, or a reason to skip the test when it is missing. Under `CI` a missing
 * binary throws instead (tests must not silently skip there).
 */
export function findKubectl(): { path: string; skip?: undefined } | { path?: undefined; skip: string } {
  if (existsSync(KUBECTL_PATH)) return { path: KUBECTL_PATH };
  const message = `kubectl not found at ${KUBECTL_PATH}: run .ci/run, or: mkdir -p .cache/kubernetes-client && (cd /tmp && apt-get download kubernetes-client) && dpkg -x /tmp/kubernetes-client_*.deb .cache/kubernetes-client`;
  if (process.env.CI) throw new Error(message);
  return { skip: message };
}

/** The result of one kubectl run. */
export interface KubectlResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** A kubectl bound to one fake server: its own kubeconfig and a fresh cache directory. */
export class Kubectl {
  private constructor(
    readonly binary: string,
    readonly kubeconfig: string,
    readonly cacheDir: string,
  ) {}

  /** Writes a kubeconfig for `server` (a fake, or a real one of kube-real-apiserver.ts) into a new temporary directory (or `dir`). */
  static async for(server: Pick<FakeKubeApiServer, 'writeKubeconfig'>, binary: string, dir?: string): Promise<Kubectl> {
    const base = dir ?? (await mkdtemp(path.join(os.tmpdir(), 'trellis-kubectl-')));
    const kubeconfig = await server.writeKubeconfig(base);
    return new Kubectl(binary, kubeconfig, path.join(base, 'cache'));
  }

  /** Runs kubectl with `args` (plus `--kubeconfig` and `--cache-dir`); never rejects. */
  run(args: readonly string[], input?: string): Promise<KubectlResult> {
    return new Promise((resolve) => {
      const child = execFile(
        this.binary,
        ['--kubeconfig', this.kubeconfig, '--cache-dir', this.cacheDir, ...args],
        { timeout: 60_000, env: { ...process.env, KUBECONFIG: this.kubeconfig, HOME: path.dirname(this.kubeconfig) } },
        (error, stdout, stderr) => {
          const code = error ? (typeof error.code === 'number' ? error.code : 1) : 0;
          resolve({ code, stdout, stderr });
        },
      );
      if (input !== undefined) child.stdin?.end(input);
    });
  }

  /** Runs kubectl and throws (with its stderr) unless it exits 0; returns stdout. */
  async ok(args: readonly string[], input?: string): Promise<string> {
    const result = await this.run(args, input);
    if (result.code !== 0) throw new Error(`kubectl ${args.join(' ')} exited ${result.code}: ${result.stderr}`);
    return result.stdout;
  }

  /** `kubectl apply --validate=false -f <file or dir or ->`. */
  apply(file: string, input?: string): Promise<string> {
    return this.ok(['apply', '--validate=false', '-f', file], input);
  }
}
