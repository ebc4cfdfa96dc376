/**
 * `trellis proxies` and `trellis proxy config UUID|POD`: the connected proxies and their
 * configuration through the controller's operations server (`/debug/proxies`,
 * `/debug/pod-proxy`, `/debug/config_dump`), in either mode, without a kubeconfig.
 */
import { Option, type Command } from 'commander';
import { getFromController } from './controller-http.js';

/** Where a command writes its results (standard output; `kube-commands.ts` has the same shape). */
type CommandOutput = { write(text: string): void };

/** The default `--controller`: the operations server of a local controller. */
export const DEFAULT_CONTROLLER_URL = 'http://127.0.0.1:9091';

/** How long one request to the controller may take, in ms. */
const REQUEST_TIMEOUT_MS = 30_000;

/** The most characters of a NACK's message the table shows. */
const NACK_CHARS = 80;

/** The xDS types in the order the table shows them (the push order). */
const TYPES = ['CDS', 'EDS', 'LDS', 'RDS', 'SDS'] as const;

const UUID_RE = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

/** One type of one stream in `/debug/proxies` (the members read here). */
interface TypeView {
  readonly state?: 'synced' | 'stale' | 'nacked';
  readonly lastNack: { readonly message: string; readonly at: string } | null;
}

/** One proxy in `/debug/proxies` (the members read here). */
export interface ProxyView {
  readonly uuid: string;
  readonly identity: string;
  readonly clientType: string;
  readonly connectedSince: string;
  readonly streams: readonly { readonly streamId: number; readonly mode: string; readonly types: Readonly<Record<string, TypeView>> }[];
}

/**
 * GETs `path` (with its query) from the controller's operations server at `controllerUrl`.
 * @returns the status and body text.
 * @throws Error `cannot reach the controller at URL: …` when it does not answer.
 */
async function get(controllerUrl: string, path: string): Promise<{ status: number; body: string }> {
  const { status, text } = await getFromController(controllerUrl, path, { timeoutMs: REQUEST_TIMEOUT_MS });
  return { status, body: text };
}

/** The `error` member of a JSON error body, else the body itself. */
function errorOf(body: string): string {
  try {
    const parsed = JSON.parse(body) as { error?: unknown };
    if (typeof parsed.error === 'string') return parsed.error;
  } catch {
    // not JSON
  }
  return body.trim();
}

/**
 * The table of `trellis proxies`: per proxy its UUID, identity, client type, when it connected,
 * per xDS type `synced`, `stale` or `NACKed` (`-`: not requested) of its newest stream, and the
 * reason of its latest NACK still in force, cut to {@link NACK_CHARS} characters.
 */
export function formatProxiesTable(proxies: readonly ProxyView[]): string {
  if (proxies.length === 0) return 'no proxies connected\n';
  const rows = proxies.map((p) => {
    const stream = [...p.streams].sort((a, b) => b.streamId - a.streamId)[0];
    const types = stream?.types ?? {};
    const nacks = TYPES.flatMap((t) => {
      const v = types[t];
      return v?.state === 'nacked' && v.lastNack ? [{ type: t, ...v.lastNack }] : [];
    }).sort((a, b) => (a.at < b.at ? 1 : -1));
    const nack = nacks[0] ? `${nacks[0].type}: ${oneLine(nacks[0].message)}` : '';
    return [p.uuid, p.identity, p.clientType, p.connectedSince.replace(/\.\d+Z$/, 'Z'), ...TYPES.map((t) => stateWord(types[t]?.state)), nack];
  });
  const header = ['UUID', 'IDENTITY', 'CLIENT', 'CONNECTED SINCE', ...TYPES, 'LAST NACK'];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells: readonly string[]) => cells.map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]))).join('   ').trimEnd();
  return `${[line(header), ...rows.map(line)].join('\n')}\n`;
}

function stateWord(state: TypeView['state'] | undefined): string {
  return state === undefined ? '-' : state === 'nacked' ? 'NACKed' : state;
}

/** `text` on one line (control characters as spaces), cut to {@link NACK_CHARS} characters. */
function oneLine(text: string): string {
  const flat = text.replace(/[\u0000-\u001f\u007f]+/g, ' ').trim();
  return flat.length > NACK_CHARS ? `${flat.slice(0, NACK_CHARS - 1)}…` : flat;
}

/**
 * `trellis proxies`: the controller's connected proxies (`/debug/proxies`) as a table, or as the
 * controller's JSON with `output` `json`.
 * @throws Error when the controller cannot be reached or answers an error.
 */
export async function listProxies(controllerUrl: string, output: 'text' | 'json', out: CommandOutput): Promise<void> {
  const { status, body } = await get(controllerUrl, '/debug/proxies');
  if (status !== 200) throw new Error(`controller answered ${status}: ${errorOf(body)}`);
  if (output === 'json') out.write(body.endsWith('\n') ? body : `${body}\n`);
  else out.write(formatProxiesTable(JSON.parse(body) as ProxyView[]));
}

/**
 * Prints the config dump of proxy `uuid` (`/debug/config_dump?proxy=<uuid>`) as Envoy's admin
 * `/config_dump` prints its own (proto3 JSON): wrapper fields (`google.protobuf.UInt32Value`, …)
 * as plain values (`"weight": 80`, not `{"value": 80}`) and durations as strings (`"1s"`; the
 * codec's `toProto3Json`).
 * @param what how the proxy is named in errors (e.g. `proxy UUID of pod ns/name`).
 * @throws Error when the controller cannot be reached or does not know the proxy.
 */
export async function printConfigDump(controllerUrl: string, uuid: string, what: string, out: CommandOutput): Promise<void> {
  const { status, body } = await get(controllerUrl, `/debug/config_dump?proxy=${encodeURIComponent(uuid)}`);
  if (status === 404) throw new Error(`${what} is not connected to the controller at ${controllerUrl}`);
  if (status !== 200) throw new Error(`controller answered ${status}: ${errorOf(body)}`);
  // The protos are loaded for this command only (about a second): every other command starts without them.
  const { envoyCodec } = await import('../api/codec.js');
  out.write(`${JSON.stringify(envoyCodec().toProto3Json(JSON.parse(body)), null, 2)}\n`);
}

/**
 * `trellis proxy config UUID|POD -n NS` without Kubernetes: a UUID is asked for directly; a pod is
 * resolved by the controller from its store (`/debug/pod-proxy`: the pod's `osm-proxy-uuid` label,
 * or the one connected proxy of its identity).
 * @throws Error when the pod or proxy is unknown, the pod's proxy is ambiguous, or the controller cannot be reached.
 */
export async function proxyConfigFromController(target: string, namespace: string, controllerUrl: string, out: CommandOutput): Promise<void> {
  if (isProxyUuid(target)) return printConfigDump(controllerUrl, target, `proxy ${target}`, out);
  const { status, body } = await get(controllerUrl, `/debug/pod-proxy?namespace=${encodeURIComponent(namespace)}&pod=${encodeURIComponent(target)}`);
  if (status !== 200) throw new Error(errorOf(body));
  const { uuid } = JSON.parse(body) as { uuid: string };
  return printConfigDump(controllerUrl, uuid, `proxy ${uuid} of pod ${namespace}/${target}`, out);
}

/** True when `target` is a proxy UUID rather than a pod name. */
export function isProxyUuid(target: string): boolean {
  return UUID_RE.test(target);
}

/** Adds `trellis proxies` to `program`. */
export function registerProxiesCommands(program: Command): void {
  const stdout: CommandOutput = { write: (text) => void process.stdout.write(text) };
  program
    .command('proxies')
    .description('list the proxies connected to the controller: UUID, identity, client type, connected since, per xDS type synced / stale / NACKed and the last NACK')
    .option('--controller <url>', 'the controller operations server (e.g. through kubectl port-forward -n osm-system svc/osm-controller 9091)', DEFAULT_CONTROLLER_URL)
    .addOption(new Option('--output <format>', 'text: a table; json: the controller\'s /debug/proxies').choices(['text', 'json']).default('text'))
    .action(async (opts: { controller: string; output: 'text' | 'json' }) => {
      try {
        await listProxies(opts.controller, opts.output, stdout);
      } catch (err) {
        process.stderr.write(`trellis proxies: ${err instanceof Error ? err.message : String(err)}\n`);
        process.exitCode = 1;
      }
    });
}
