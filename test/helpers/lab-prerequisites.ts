import { existsSync, readdirSync } from 'node:fs';
import { runCommand } from '../../src/lab/network.js';
import { describeMissing, missingLabPrerequisites } from '../../src/lab/prerequisites.js';

/**
 * The `skip` option of a lab test: false when the host has root and `commands`, else the reason.
 * Under CI=true a missing prerequisite is a failure, not a skip (CI must run the lab tests).
 * @throws Error naming what is missing when CI=true.
 */
export function labTestSkip(commands: readonly string[], extra: readonly { what: string; howToGet: string }[] = []): false | string {
  const missing = [...missingLabPrerequisites(commands), ...extra];
  if (missing.length === 0) return false;
  const reason = describeMissing(missing);
  if (process.env.CI === 'true') throw new Error(`CI=true and the lab test cannot run: ${reason}`);
  return reason;
}

/** Everything on the host named `<prefix>-…`: netns, links and /etc/netns dirs (empty once a lab is gone). */
export async function labLeftovers(prefix: string): Promise<string[]> {
  const mine = (name: string) => name.startsWith(`${prefix}-`);
  const netns = (await runCommand(['ip', 'netns', 'list'])).split('\n').map((l) => l.split(' ')[0]).filter(mine);
  const links = (await runCommand(['ip', '-o', 'link', 'show'])).split('\n').map((l) => /^\d+:\s+([^:@\s]+)/.exec(l)?.[1] ?? '').filter(mine);
  const dirs = existsSync('/etc/netns') ? readdirSync('/etc/netns').filter(mine) : [];
  return [...netns.map((n) => `netns ${n}`), ...links.map((l) => `link ${l}`), ...dirs.map((d) => `/etc/netns/${d}`)];
}
