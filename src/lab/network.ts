/**
 * The lab's network on one Linux host (see /work/notes/lab-contract.md, "Addressing"): a bridge
 * `P-br` carrying the subnet's first address, and one network namespace per pod joined to it by a
 * veth pair. Pods get their `status.podIP`/32 plus one subnet address on `eth0`, on-link routes for
 * every address the lab assigned, and no default route: nothing the lab creates can reach past the
 * bridge, and the host gets only the subnet's connected route (no forwarding, no NAT, no host-wide sysctl: only the bridge's own ARP settings).
 *
 * Every name created here starts with `P-` (the lab's prefix), so {@link removeLabNetwork} finds
 * all of it again, also after a crash. Needs root and iproute2's `ip`.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readdir, rm, writeFile } from 'node:fs/promises';
import { isIPv4 } from 'node:net';
import { join, resolve } from 'node:path';
import { parseCidr } from '../catalog/cidr.js';
import { processAlive, sleep } from './process.js';

/** The lab's bridge on the host (contract: `P-br` with the subnet's first address). */
export interface LabNetwork {
  /** The lab's prefix: every name the lab creates starts with `${prefix}-`. */
  readonly prefix: string;
  /** The bridge's name, `${prefix}-br`. */
  readonly bridge: string;
  /** The subnet's first address, assigned to the bridge: the controller listens there. */
  readonly bridgeAddress: string;
  /** The lab subnet in CIDR notation (IPv4, `/8`–`/30`), normalized to its network address. */
  readonly subnet: string;
}

/** What one pod's network namespace gets (see {@link createPodNetwork}). */
export interface PodNetworkOptions {
  /** Unique within the lab (e.g. `bookbuyer.bookbuyer-6d9f`); the netns name derives from it. */
  readonly name: string;
  /** The pod's `status.podIP` (IPv4), assigned as a /32 to `eth0`. */
  readonly podIp: string;
  /** An address of the lab subnet (e.g. `10.250.0.2`), assigned with the subnet's length. */
  readonly labAddress: string;
  /** CIDRs reached on the bridge (pod IPs, ClusterIPs, …): routes `dev eth0 src <podIp>`. */
  readonly onLinkRoutes: readonly string[];
  /** Text of `/etc/hosts` for processes run in the netns with `ip netns exec`. */
  readonly hosts?: string;
}

/** A pod's network namespace as created by {@link createPodNetwork}. */
export interface PodNetwork {
  /** The network namespace's name (`${prefix}-…`), as `ip netns` knows it. */
  readonly netns: string;
  readonly podIp: string;
  readonly labAddress: string;
}

/** Bound on what one `ip` command may print (bytes); a lab lists tens of links, not thousands. */
const MAX_COMMAND_OUTPUT = 4 * 1024 * 1024;
/** Where `ip netns exec` finds the files it bind-mounts over `/etc/<file>`. */
const NETNS_ETC = '/etc/netns';
/** Linux's IFNAMSIZ less the terminating NUL. */
const MAX_IFNAME = 15;
/** Longest netns name this module makes (a file name under /run/netns and /etc/netns). */
const MAX_NETNS_NAME = 60;
/** How long {@link deletePodNetwork} waits for SIGTERMed processes before SIGKILL (ms). */
const TERM_GRACE_MS = 2000;

/**
 * Checks a lab prefix: 1–5 lowercase letters or digits, starting with a letter (the contract's
 * limit keeps `P-<hex>` veth names within IFNAMSIZ).
 * @throws Error naming the prefix when it is not such a word.
 */
export function checkLabPrefix(prefix: string): void {
  if (!/^[a-z][a-z0-9]{0,4}$/.test(prefix)) {
    throw new Error(`lab prefix "${prefix}" must be 1-5 lowercase letters or digits, starting with a letter`);
  }
}

function ipv4ToNumber(ip: string): number {
  return ip.split('.').reduce((n, part) => n * 256 + Number(part), 0);
}

function numberToIpv4(n: number): string {
  return [24, 16, 8, 0].map((shift) => Math.floor(n / 2 ** shift) % 256).join('.');
}

interface Ipv4Subnet { readonly network: number; readonly prefixLength: number; readonly size: number }

function parseLabSubnet(subnet: string): Ipv4Subnet {
  const parts = parseCidr(subnet);
  if (!parts || !isIPv4(parts.address) || parts.prefixLength < 8 || parts.prefixLength > 30) {
    throw new Error(`lab subnet "${subnet}" must be an IPv4 CIDR from /8 to /30 (e.g. 10.250.0.0/24)`);
  }
  const size = 2 ** (32 - parts.prefixLength);
  const network = Math.floor(ipv4ToNumber(parts.address) / size) * size;
  return { network, prefixLength: parts.prefixLength, size };
}

/** Orders IPv4 addresses numerically (for `Array.prototype.sort`). */
export function compareIpv4(a: string, b: string): number {
  return ipv4ToNumber(a) - ipv4ToNumber(b);
}

/**
 * The `n`th address of the lab subnet: 1 is the bridge's, pods use 2 upwards.
 * @throws Error when `n` is not a host address of the subnet (0, the broadcast address, beyond).
 */
export function labSubnetAddress(subnet: string, n: number): string {
  const s = parseLabSubnet(subnet);
  const last = s.size - 2;
  if (!Number.isInteger(n) || n < 1 || n > last) {
    throw new Error(`lab subnet ${subnet} has no host address number ${n} (1-${last})`);
  }
  return numberToIpv4(s.network + n);
}

/** The number of the subnet's last host address (`labSubnetAddress(subnet, n)` exists for 1…n). */
export function labSubnetHostCount(subnet: string): number {
  return parseLabSubnet(subnet).size - 2;
}

/** The prefix length of the lab subnet (`24` for `10.250.0.0/24`). */
export function labSubnetPrefixLength(subnet: string): number {
  return parseLabSubnet(subnet).prefixLength;
}

/** Whether `ip` (IPv4) lies in the lab subnet. */
export function inLabSubnet(subnet: string, ip: string): boolean {
  if (!isIPv4(ip)) return false;
  const s = parseLabSubnet(subnet);
  const n = ipv4ToNumber(ip);
  return n >= s.network && n < s.network + s.size;
}

/**
 * Runs a command (no shell) and returns its stdout.
 * @throws Error naming the command, its exit status and its stderr when it fails.
 */
export function runCommand(argv: readonly string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(argv[0], argv.slice(1), { maxBuffer: MAX_COMMAND_OUTPUT, encoding: 'utf8' }, (error, stdout, stderr) => {
      if (error) {
        const detail = (stderr || error.message).trim().slice(0, 2000);
        reject(new Error(`${argv.join(' ')} failed: ${detail}`));
      } else {
        resolve(stdout);
      }
    });
  });
}

function ip(...args: string[]): Promise<string> {
  return runCommand(['ip', ...args]);
}

/** The names of the host's links (without the `@peer` suffix `ip -o link` prints). */
async function hostLinks(): Promise<string[]> {
  const out = await ip('-o', 'link', 'show');
  return out.split('\n').flatMap((line) => {
    const m = /^\d+:\s+([^:@\s]+)/.exec(line);
    return m ? [m[1]] : [];
  });
}

/** The names of the host's network namespaces (`ip netns list` prints `name (id: N)`). */
async function netnsNames(): Promise<string[]> {
  const out = await ip('netns', 'list');
  return out.split('\n').map((line) => line.trim().split(/\s+/)[0]).filter((name) => name !== '');
}

/**
 * Creates the lab's bridge `${prefix}-br` on the host, up, with the subnet's first address.
 * The host gets that address's connected route and nothing else.
 * @throws Error when the prefix or subnet is malformed, when the bridge already exists (a lab with
 *   this prefix is running, or crashed: `removeLabNetwork` cleans up) or when `ip` fails (not root).
 */
export async function createLabNetwork(prefix: string, subnet: string): Promise<LabNetwork> {
  checkLabPrefix(prefix);
  const s = parseLabSubnet(subnet);
  const lab: LabNetwork = {
    prefix,
    bridge: `${prefix}-br`,
    bridgeAddress: numberToIpv4(s.network + 1),
    subnet: `${numberToIpv4(s.network)}/${s.prefixLength}`,
  };
  if ((await hostLinks()).includes(lab.bridge)) {
    throw new Error(`link ${lab.bridge} already exists: a lab with prefix "${prefix}" is running or was not cleaned up (trellis lab down --prefix ${prefix})`);
  }
  await ip('link', 'add', lab.bridge, 'type', 'bridge');
  try {
    // A bridge whose address is not set takes its lowest port's, again each time a port joins:
    // a pod that resolved the bridge address before a veth with a lower address joined sends
    // to the old one, which the bridge drops (otherhost) until the pod's neighbour entry is
    // refreshed, tens of seconds later, then TCP's backoff (a sidecar's ACK stuck for a minute).
    await ip('link', 'set', lab.bridge, 'address', bridgeMac(prefix));
    await ip('addr', 'add', `${lab.bridgeAddress}/${s.prefixLength}`, 'dev', lab.bridge);
    await answerArpForBridgeOnly(lab.bridge);
    await disableIpv6(lab.bridge);
    await ip('link', 'set', lab.bridge, 'up');
  } catch (error) {
    await ip('link', 'del', lab.bridge).catch(() => undefined);
    throw error;
  }
  return lab;
}

/**
 * Sets `arp_ignore=1` and `arp_announce=2` on the lab's own bridge (per-interface settings of a
 * link the lab created, not host-wide sysctls): the host answers ARP on the bridge for the
 * bridge's address only, not for its other addresses (a pod IP or ClusterIP equal to one of the
 * host's addresses is not the host), and speaks on it only with the bridge's address.
 */
async function answerArpForBridgeOnly(bridge: string): Promise<void> {
  const conf = join('/proc/sys/net/ipv4/conf', bridge);
  await writeFile(join(conf, 'arp_ignore'), '1\n');
  await writeFile(join(conf, 'arp_announce'), '2\n');
}

/** Shell text, run in a pod's netns, that turns IPv6 off for every interface of it, present and to come. */
const IPV6_OFF_IN_NETNS = 'for f in /proc/sys/net/ipv6/conf/all/disable_ipv6 /proc/sys/net/ipv6/conf/default/disable_ipv6; do [ ! -e "$f" ] || echo 1 > "$f"; done';

/**
 * Turns IPv6 off on one of the lab's own links (a per-interface setting, not a host-wide one):
 * the lab is IPv4 only, and an IPv6 link-local address on the bridge or a pod would carry
 * traffic that interception (iptables, IPv4) never sees. No-op on a host without IPv6.
 */
async function disableIpv6(link: string): Promise<void> {
  const file = join('/proc/sys/net/ipv6/conf', link, 'disable_ipv6');
  if (existsSync(file)) await writeFile(file, '1\n');
}

/** The lab bridge's own MAC address: locally administered, unicast, from the prefix (so two labs' differ). */
export function bridgeMac(prefix: string): string {
  return `02:${shortHash(`bridge:${prefix}`, 10).match(/../g)!.join(':')}`;
}

function shortHash(text: string, hexChars: number): string {
  return createHash('sha256').update(text).digest('hex').slice(0, hexChars);
}

/**
 * The netns name of a pod: `${prefix}-` and the pod's name verbatim when it is made of
 * `[a-z0-9.-]` only and fits the limit; any other name is cut, its characters outside
 * `[a-z0-9.-]` replaced by `-`, and ends in `_` and a hash of the whole name. A verbatim name
 * never holds `_` and a hashed one always does, so two distinct names never get the same netns
 * (a cut name could equal another pod's verbatim one when the hash followed a `-`).
 */
export function podNetnsName(prefix: string, name: string): string {
  const clean = name.toLowerCase().replace(/[^a-z0-9.-]/g, '-');
  const full = `${prefix}-${clean}`;
  if (full.length <= MAX_NETNS_NAME && clean === name) return full;
  const hash = shortHash(name, 12);
  return `${full.slice(0, MAX_NETNS_NAME - hash.length - 1)}_${hash}`;
}

/** The host end of a pod's veth pair: `${prefix}-<hex>`, within IFNAMSIZ. */
function hostVethName(prefix: string, netns: string): string {
  return `${prefix}-${shortHash(netns, MAX_IFNAME - prefix.length - 1)}`;
}

const BASE_HOSTS = '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n';

/**
 * Writes `/etc/netns/<netns>/{hosts,resolv.conf}` (world-readable: Envoy reads them as uid 1500).
 * resolv.conf names a nameserver on the pod's own loopback, where none listens, so nothing
 * resolves outside the lab.
 */
async function writeNetnsEtc(netns: string, hosts: string | undefined): Promise<void> {
  const dir = join(NETNS_ETC, netns);
  await mkdir(dir, { recursive: true, mode: 0o755 });
  await writeFile(join(dir, 'hosts'), BASE_HOSTS + (hosts ?? ''), { mode: 0o644 });
  await writeFile(join(dir, 'resolv.conf'), 'nameserver 127.0.0.1\noptions timeout:1 attempts:1\n', { mode: 0o644 });
}

/**
 * Replaces the hosts file of a pod's netns (processes see it on their next lookup).
 * @throws Error when `netns` is not the lab's.
 */
export async function writePodHosts(lab: LabNetwork, netns: string, hosts: string): Promise<void> {
  assertOwned(lab.prefix, netns);
  await writeNetnsEtc(netns, hosts);
}

/**
 * Adds (or replaces) on-link routes `<cidr> dev eth0 src <podIp>` in a pod's netns, for
 * addresses assigned after the pod started (a pod added later, a new ClusterIP).
 * @throws Error when `netns` is not the lab's or `ip` refuses a route.
 */
export async function addOnLinkRoutes(lab: LabNetwork, pod: PodNetwork, cidrs: readonly string[]): Promise<void> {
  assertOwned(lab.prefix, pod.netns);
  for (const cidr of new Set(cidrs)) {
    if (!parseCidr(cidr) && !isIPv4(cidr)) throw new Error(`on-link route "${cidr}" for ${pod.netns} is not an IPv4 CIDR`);
    await ip('-n', pod.netns, 'route', 'replace', cidr, 'dev', 'eth0', 'src', pod.podIp);
  }
}

/**
 * Removes on-link routes from a pod's netns (addresses the lab no longer assigns). A route that is
 * already gone is not an error.
 */
export async function removeOnLinkRoutes(lab: LabNetwork, pod: PodNetwork, cidrs: readonly string[]): Promise<void> {
  assertOwned(lab.prefix, pod.netns);
  for (const cidr of new Set(cidrs)) {
    await ip('-n', pod.netns, 'route', 'del', cidr, 'dev', 'eth0').catch(() => undefined);
  }
}

function assertOwned(prefix: string, name: string): void {
  checkLabPrefix(prefix);
  if (!name.startsWith(`${prefix}-`) || name.includes('/')) {
    throw new Error(`"${name}" is not named with the lab's prefix "${prefix}-": the lab touches only what it created`);
  }
}

/**
 * Creates a pod's network namespace joined to the lab's bridge: `lo` up, `eth0` with the pod IP
 * (/32) and its lab address (subnet length), on-link routes for `onLinkRoutes`, no default route,
 * and the hosts/resolv.conf files `ip netns exec` mounts over /etc.
 * On failure it removes what it had created.
 * @throws Error when an address is not IPv4, the lab address is outside the subnet, the netns
 *   exists already, or `ip` fails.
 */
export async function createPodNetwork(lab: LabNetwork, options: PodNetworkOptions): Promise<PodNetwork> {
  if (!isIPv4(options.podIp)) throw new Error(`pod ${options.name}: podIP "${options.podIp}" is not an IPv4 address`);
  if (!inLabSubnet(lab.subnet, options.labAddress) || options.labAddress === lab.bridgeAddress) {
    throw new Error(`pod ${options.name}: lab address "${options.labAddress}" is not a pod address of the lab subnet ${lab.subnet}`);
  }
  const netns = podNetnsName(lab.prefix, options.name);
  if ((await netnsNames()).includes(netns)) throw new Error(`network namespace ${netns} already exists (pod ${options.name})`);
  const veth = hostVethName(lab.prefix, netns);
  const pod: PodNetwork = { netns, podIp: options.podIp, labAddress: options.labAddress };
  await ip('netns', 'add', netns);
  try {
    await writeNetnsEtc(netns, options.hosts);
    // Before eth0 exists, so it never gets an IPv6 link-local address.
    await runCommand(['ip', 'netns', 'exec', netns, 'sh', '-c', IPV6_OFF_IN_NETNS]);
    await ip('link', 'add', veth, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', netns);
    await disableIpv6(veth);
    await ip('link', 'set', veth, 'master', lab.bridge);
    await ip('link', 'set', veth, 'up');
    await ip('-n', netns, 'link', 'set', 'lo', 'up');
    await ip('-n', netns, 'addr', 'add', `${options.podIp}/32`, 'dev', 'eth0');
    await ip('-n', netns, 'addr', 'add', `${options.labAddress}/${labSubnetPrefixLength(lab.subnet)}`, 'dev', 'eth0');
    await ip('-n', netns, 'link', 'set', 'eth0', 'up');
    await addOnLinkRoutes(lab, pod, options.onLinkRoutes.filter((cidr) => cidr !== `${options.podIp}/32` && cidr !== options.podIp));
  } catch (error) {
    await deletePodNetwork(lab, netns).catch(() => undefined);
    throw error;
  }
  return pod;
}

/** The PIDs of processes running in a netns (`ip netns pids`); none when it is gone. */
export async function netnsPids(netns: string): Promise<number[]> {
  const out = await ip('netns', 'pids', netns).catch(() => '');
  return out.split(/\s+/).filter((p) => /^\d+$/.test(p)).map(Number).filter((pid) => pid !== process.pid);
}

/** SIGTERM to every process in the netns, SIGKILL to those still alive after a grace period. */
async function killNetnsProcesses(netns: string): Promise<void> {
  const pids = await netnsPids(netns);
  for (const pid of pids) {
    try { process.kill(pid, 'SIGTERM'); } catch { /* gone already */ }
  }
  const deadline = Date.now() + TERM_GRACE_MS;
  while (pids.some(processAlive) && Date.now() < deadline) await sleep(50);
  for (const pid of await netnsPids(netns)) {
    try { process.kill(pid, 'SIGKILL'); } catch { /* gone already */ }
  }
}

/**
 * Removes a pod's network namespace: stops what runs in it (SIGTERM, then SIGKILL), deletes the
 * netns (its veth pair goes with it), the host veth end if left over, and `/etc/netns/<netns>`.
 * What is already gone is not an error.
 * @throws Error when `netns` is not named with the lab's prefix (nothing is touched then).
 */
export async function deletePodNetwork(lab: LabNetwork, netns: string): Promise<void> {
  assertOwned(lab.prefix, netns);
  await removeNetns(lab.prefix, netns);
}

/**
 * Deletes a host link; one that vanished meanwhile (a veth end goes with its netns, which the
 * kernel removes asynchronously) is not an error.
 * @returns whether this call deleted it.
 */
async function deleteLink(link: string): Promise<boolean> {
  try {
    await ip('link', 'del', link);
    return true;
  } catch (err) {
    // A veth end whose netns was just deleted goes away late (the kernel's netns clean-up runs
    // asynchronously): it may still be listed while `ip link del` finds no such device.
    if (/Cannot find device/.test(err instanceof Error ? err.message : String(err))) return false;
    if ((await hostLinks()).includes(link)) throw err;
    return false;
  }
}

async function removeNetns(prefix: string, netns: string): Promise<void> {
  await killNetnsProcesses(netns);
  // The /etc/netns dir first: once the netns is gone, nothing of it is left.
  await rm(join(NETNS_ETC, netns), { recursive: true, force: true });
  if ((await netnsNames()).includes(netns)) await ip('netns', 'del', netns);
  const veth = hostVethName(prefix, netns);
  if ((await hostLinks()).includes(veth)) await deleteLink(veth);
}

/**
 * Removes everything of the network named `${prefix}-…`: network namespaces (and what runs in
 * them), host links (veth ends, the bridge) and `/etc/netns/${prefix}-…` dirs. Works after a crash:
 * it finds what exists, not what a running lab remembers.
 * @returns what it removed, as `netns NAME`, `link NAME`, `dir PATH`.
 * @throws Error when the prefix is malformed or `ip` fails.
 */
export async function removeLabNetwork(prefix: string): Promise<string[]> {
  checkLabPrefix(prefix);
  const mine = (name: string): boolean => name.startsWith(`${prefix}-`);
  const removed: string[] = [];
  const namespaces = (await netnsNames()).filter(mine);
  await Promise.all(namespaces.map((netns) => removeNetns(prefix, netns)));
  removed.push(...namespaces.map((netns) => `netns ${netns}`));
  const links = (await hostLinks()).filter(mine);
  // Veth ends first, the bridge last (deleting a veth end removes its peer, which may be listed:
  // deleteLink finds it gone and it is not counted).
  links.sort((a, b) => Number(a === `${prefix}-br`) - Number(b === `${prefix}-br`));
  for (const link of links) {
    if (await deleteLink(link)) removed.push(`link ${link}`);
  }
  const dirs = await readdir(NETNS_ETC).catch(() => [] as string[]);
  for (const dir of dirs.filter(mine)) {
    await rm(join(NETNS_ETC, dir), { recursive: true, force: true });
    removed.push(`dir ${join(NETNS_ETC, dir)}`);
  }
  return removed;
}

/**
 * Paths a pod never sees: `/run` (the lab's claims and default state dirs under
 * `/run/trellis-lab`, every netns file under `/run/netns`, and the host daemons' Unix sockets,
 * which trust uid 0) and the lab's state dir (the controller's CA key, every sidecar's xDS key
 * and admin socket, the logs).
 */
export function podHiddenPaths(stateDir: string): string[] {
  const paths = [...new Set(['/run', resolve(stateDir)])];
  return paths.filter((p) => !paths.some((q) => p.startsWith(`${q}/`)));
}

/**
 * The group id a pod's processes run with: one per netns name (from its hash), so a pod cannot
 * ptrace, or open `/proc/<pid>/{root,fd,environ}` of, another pod's processes (the kernel
 * requires the same uid and gid, and uid 0 is everyone's).
 */
export function podGid(netns: string): number {
  return POD_GID_BASE + Number.parseInt(shortHash(netns, 6), 16);
}

/** Lowest group id of {@link podGid} (a range no distribution allots: 2e9 + 24 bits). */
const POD_GID_BASE = 2_000_000_000;

/**
 * Run by `sh` in the new mount namespace `ip netns exec` gives (private: a slave of the host's):
 * `$1` paths follow, each hidden under an empty read-only tmpfs; then every mount is made
 * read-only (a mount under a hidden path is unreachable and skipped); then back to the caller's
 * directory unless it is hidden (a cwd under the state dir would reach it with `..`), else `/`;
 * then the rest of the argv is exec'd (setpriv, which drops the capabilities). Any failure
 * exits 126 before the command runs.
 */
const POD_MOUNT_SCRIPT = [
  'cwd=$(pwd -P) || cwd=/',
  'n=$1; shift',
  'while [ "$n" -gt 0 ]; do',
  '  mount -t tmpfs -o ro,nosuid,nodev,noexec,size=4k,mode=0555 trellis-lab-hidden "$1" || exit 126',
  '  shift; n=$((n - 1))',
  'done',
  'findmnt -n -l -o TARGET | while IFS= read -r m; do',
  '  [ -e "$m" ] || continue',
  '  mount -o remount,bind,ro "$m" || exit 126',
  'done || exit 126',
  'cd -- "$cwd" 2>/dev/null || cd /',
  'exec "$@"',
].join('\n');

/**
 * The argv that runs a pod's process (its app, its `lab.trellis.dev/command`, `lab exec`) in its
 * netns, confined: uid 0 (so it reads the repository and node wherever they are) with the pod's
 * {@link podGid}, no supplementary groups, no capability but CAP_NET_BIND_SERVICE (bounding,
 * inheritable and ambient sets: ports below 1024 bind; no setns, ptrace of the supervisor,
 * iptables or mount) and no_new_privs, in a private mount namespace where every mount is
 * read-only and {@link podHiddenPaths} are empty. The process is `argv`'s (each step execs the next).
 */
export function inPod(netns: string, argv: readonly string[], stateDir: string): string[] {
  const hidden = podHiddenPaths(stateDir);
  const caps = '-all,+net_bind_service';
  return inNetns(netns, [
    'sh', '-c', POD_MOUNT_SCRIPT, 'trellis-lab-pod', String(hidden.length), ...hidden,
    'setpriv', `--bounding-set=${caps}`, `--inh-caps=${caps}`, `--ambient-caps=${caps}`, '--no-new-privs',
    `--regid=${podGid(netns)}`, '--clear-groups', '--', ...argv,
  ]);
}

/**
 * The argv that runs `argv` inside a netns with `ip netns exec` (which also mounts
 * `/etc/netns/<netns>/*` over `/etc`), optionally as another user through `setpriv` (no
 * supplementary groups).
 */
export function inNetns(netns: string, argv: readonly string[], user?: { uid: number; gid: number }): string[] {
  const asUser = user ? ['setpriv', `--reuid=${user.uid}`, `--regid=${user.gid}`, '--clear-groups'] : [];
  return ['ip', 'netns', 'exec', netns, ...asUser, ...argv];
}
