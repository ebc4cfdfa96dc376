/**
 * `trellis status` and `trellis wait --for programmed`: the policy status of a running controller
 * (its operations API, `/debug/policies` and `/debug/policy-status`), read with Node's `fetch`.
 */
import { Command, InvalidArgumentError, Option } from 'commander';
import { parseGoDuration } from '../catalog/build-snapshot.js';
import { POLICY_KINDS, type PolicyKind } from '../status/object-versions.js';
import { getFromController } from './controller-http.js';
import { isProgrammed, programmedSummary, type PolicyStatus, type PolicyStatusDetail } from '../status/policy-status.js';

/** The operations server `trellis status` and `trellis wait` ask by default. */
export const DEFAULT_CONTROLLER_URL = 'http://127.0.0.1:9091';

/** Where a command writes. */
export interface StatusOutput {
  out(text: string): void;
  err(text: string): void;
}

const STDIO: StatusOutput = { out: (t) => process.stdout.write(t), err: (t) => process.stderr.write(t) };

/** Kind names a user may type (any case): the kind, its plural, and the short names kubectl knows for the SMI/OSM CRDs. */
const KIND_ALIASES: ReadonlyMap<string, PolicyKind> = new Map(
  POLICY_KINDS.flatMap((kind) => {
    const lower = kind.toLowerCase();
    const plural = lower.endsWith('y') ? `${lower.slice(0, -1)}ies` : lower.endsWith('s') ? `${lower}es` : `${lower}s`;
    return [[lower, kind], [plural, kind]] as [string, PolicyKind][];
  }),
);

/**
 * `KIND/NAME` → the policy kind and name.
 * @throws InvalidArgumentError for another shape or an unknown kind.
 */
export function parsePolicyRef(value: string): { kind: PolicyKind; name: string } {
  const slash = value.indexOf('/');
  const kind = slash > 0 ? KIND_ALIASES.get(value.slice(0, slash).toLowerCase()) : undefined;
  const name = value.slice(slash + 1);
  if (slash <= 0 || name === '' || name.includes('/')) throw new InvalidArgumentError(`"${value}" is not KIND/NAME (e.g. trafficsplit/bookstore-split)`);
  if (!kind) throw new InvalidArgumentError(`"${value.slice(0, slash)}" is not a policy kind: one of ${POLICY_KINDS.join(', ')}`);
  return { kind, name };
}

/** A duration: Go syntax (`60s`, `2m`) or a bare number of seconds. */
function seconds(value: string): number {
  const s = /^\d+(\.\d+)?$/.test(value) ? Number(value) : parseGoDuration(value);
  if (s === undefined || s < 0) throw new InvalidArgumentError(`"${value}" is not a duration such as 60s or 2m`);
  return s;
}

/** A whole number above 0. */
function positiveInteger(value: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value) || n < 1) throw new InvalidArgumentError(`"${value}" is not a whole number above 0`);
  return n;
}

/** How long one request to the controller may take, in ms (`trellis wait`: never past its deadline). */
const REQUEST_TIMEOUT_MS = 10_000;

/**
 * GETs `path` from the controller: status and parsed JSON body.
 * @param timeoutMs bound on the request ({@link getFromController}).
 * @throws Error naming the controller when it cannot be reached, does not answer in time, answers too much or no JSON.
 */
async function getJson(controllerUrl: string, path: string, timeoutMs = REQUEST_TIMEOUT_MS): Promise<{ status: number; body: unknown }> {
  const { status, text } = await getFromController(controllerUrl, path, { timeoutMs });
  try {
    return { status, body: JSON.parse(text) };
  } catch {
    throw new Error(`the controller at ${controllerUrl} answered ${status} without JSON: ${text.slice(0, 200).trim()}`);
  }
}

/**
 * The rows of `trellis status`, as text: one line per object, columns aligned. An object not
 * accepted is not in any configuration (the controller keeps its last accepted version, or leaves
 * it out when it has none): its PROGRAMMED count is of that, marked `(last accepted)`, and its
 * message says so. An object whose latest document did not load (manifests mode) shows the
 * version in force and that document's first error.
 */
export function statusTable(statuses: readonly PolicyStatus[]): string {
  const rows = [['KIND', 'NAMESPACE', 'NAME', 'GENERATION', 'ACCEPTED', 'PROGRAMMED', 'NACKED', 'MESSAGE']];
  for (const s of statuses) {
    const message = !s.accepted
      ? `generation ${s.generation} not accepted, the proxies keep the last accepted version (if any): ${s.problems[0] ?? ''}`
      : s.documentErrors && s.documentErrors.length > 0
        ? `the latest document is not loaded, generation ${s.generation} stays in force: ${s.documentErrors[0]}`
        : s.firstNack
          ? `${s.firstNack.type} NACK from ${s.firstNack.identity} ${s.firstNack.proxy}: ${s.firstNack.message}`
          : '';
    const programmed = `${s.programmed}/${s.affected}${s.accepted ? '' : ' (last accepted)'}`;
    rows.push([s.kind, s.namespace, s.name, String(s.generation), s.accepted ? 'True' : 'False', programmed, String(s.nacked), message.replace(/\s+/g, ' ')]);
  }
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  return rows.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]))).join('  ').trimEnd()).join('\n') + '\n';
}

/**
 * `trellis status`: the status of every policy object (`/debug/policies`' `status`), as a table
 * or JSON, optionally of one namespace.
 * @throws Error when the controller cannot be reached or has no status.
 */
export async function printStatus(options: { controller: string; output: 'table' | 'json'; namespace?: string }, io: StatusOutput = STDIO): Promise<void> {
  const { status, body } = await getJson(options.controller, '/debug/policies');
  const list = (body as { status?: PolicyStatus[] }).status;
  if (status !== 200 || !Array.isArray(list)) throw new Error(`the controller at ${options.controller} has no policy status (HTTP ${status}${(body as { starting?: boolean }).starting ? ', starting' : ''})`);
  const shown = options.namespace === undefined ? list : list.filter((s) => s.namespace === options.namespace);
  io.out(options.output === 'json' ? `${JSON.stringify(shown, null, 2)}\n` : statusTable(shown));
}

/** How often `trellis wait` asks the controller, in ms. */
export const WAIT_POLL_MS = 250;

/** How long `trellis wait` waits for an object the controller does not know (one applied a moment ago may not be loaded yet), in ms. */
export const UNKNOWN_OBJECT_GRACE_MS = 10_000;

/**
 * How long an object `trellis wait` saw must stay unknown to the controller before it counts as
 * deleted, in ms (a file rewritten in manifests mode may drop it from one load).
 */
export const DELETED_OBJECT_GRACE_MS = 1000;

/**
 * How long the controller must report the object's latest document as not loaded (manifests
 * mode) before `trellis wait` fails with its error, in ms (a file fixed a moment ago is loaded
 * about 200 ms after its write).
 */
export const DOCUMENT_ERROR_GRACE_MS = 1000;

/** Options of {@link waitProgrammed}. */
export interface WaitOptions {
  readonly controller: string;
  readonly kind: PolicyKind;
  readonly namespace: string;
  readonly name: string;
  readonly timeoutSeconds: number;
  /** Wait for this generation or a later one. */
  readonly generation?: number;
  /** Do not count an object no connected proxy is affected by as programmed: wait for one (default false: exit 0, saying so). */
  readonly requireProxies?: boolean;
  /** Tests shorten {@link UNKNOWN_OBJECT_GRACE_MS}. */
  readonly unknownGraceMs?: number;
  /** Tests shorten {@link DELETED_OBJECT_GRACE_MS}. */
  readonly deletedGraceMs?: number;
  /** Tests shorten {@link DOCUMENT_ERROR_GRACE_MS}. */
  readonly documentErrorGraceMs?: number;
}

/** The line `trellis wait` adds when no connected proxy is affected by the object. */
export function noProxyLine(what: string): string {
  return `no connected proxy is affected by ${what}: nothing holds it yet (--require-proxies waits for one)`;
}

/**
 * `trellis wait --for programmed KIND/NAME -n NS`: polls `/debug/policy-status` until every
 * proxy the object affects has ACKed a configuration made for its current generation (with
 * `generation`, for that generation or a later one: the controller may not have seen a change just
 * applied yet; `kubectl get … -o jsonpath='{.metadata.generation}'` gives it in Kubernetes mode).
 * With no connected proxy affected it is programmed (a policy applied before its workloads must not
 * fail a pipeline) and says so ({@link noProxyLine}); `requireProxies` waits for a proxy instead.
 * @returns the exit status: 0 programmed; 1 when the object is not accepted, its latest document
 *   did not load (manifests mode: for {@link DOCUMENT_ERROR_GRACE_MS}), a proxy NACKed,
 *   the controller has not known it for {@link UNKNOWN_OBJECT_GRACE_MS}, it was deleted while
 *   waiting (unknown for {@link DELETED_OBJECT_GRACE_MS} after being seen), or `timeoutSeconds`
 *   passed (each printed with why).
 */
export async function waitProgrammed(options: WaitOptions, io: StatusOutput = STDIO): Promise<number> {
  const what = `${options.kind} ${options.namespace}/${options.name}`;
  const query = new URLSearchParams({ kind: options.kind, namespace: options.namespace, name: options.name });
  const started = Date.now();
  const deadline = started + options.timeoutSeconds * 1000;
  let last: PolicyStatusDetail | undefined;
  /** Since when the object seen before is unknown to the controller. */
  let goneSince: number | undefined;
  /** Since when the controller reports the object's latest document as not loaded. */
  let documentErrorSince: number | undefined;
  for (;;) {
    // One request never outlasts the deadline (at least 1 s each, so the last one can still answer).
    const { status, body } = await getJson(options.controller, `/debug/policy-status?${query}`, Math.min(REQUEST_TIMEOUT_MS, Math.max(1000, deadline - Date.now())));
    if (status === 200) {
      const detail = body as PolicyStatusDetail;
      last = detail;
      goneSince = undefined;
      const documentErrors = detail.documentErrors ?? [];
      documentErrorSince = documentErrors.length === 0 ? undefined : (documentErrorSince ?? Date.now());
      if (documentErrorSince !== undefined && Date.now() - documentErrorSince >= (options.documentErrorGraceMs ?? DOCUMENT_ERROR_GRACE_MS)) {
        io.err(`${what}: its latest document is not loaded (generation ${detail.generation} stays in force):\n${documentErrors.map((e) => `  ${e}`).join('\n')}\n`);
        return 1;
      }
      // Judged only once a MeshSnapshot was built from the object's current content (and that is the generation asked for).
      if (detail.meshGeneration !== null && detail.generation >= (options.generation ?? 0)) {
        if (!detail.accepted) {
          io.err(`${what} generation ${detail.generation} is not accepted:\n${detail.problems.map((p) => `  ${p}`).join('\n')}\n`);
          return 1;
        }
        if (detail.nacked > 0) {
          io.err(`${what} generation ${detail.generation} was NACKed: ${programmedSummary(detail)}\n`);
          return 1;
        }
        if (isProgrammed(detail) && (detail.affected > 0 || !options.requireProxies)) {
          io.out(`${what} generation ${detail.generation} programmed: ${programmedSummary(detail)}\n${detail.affected === 0 ? `${noProxyLine(what)}\n` : ''}`);
          return 0;
        }
      }
    } else if (status !== 404) {
      throw new Error(`the controller at ${options.controller} answered ${status}: ${JSON.stringify(body)}`);
    } else if (last !== undefined) {
      goneSince ??= Date.now();
      if (Date.now() - goneSince >= (options.deletedGraceMs ?? DELETED_OBJECT_GRACE_MS)) {
        io.err(`${what} was deleted while waiting (the controller last had generation ${last.generation})\n`);
        return 1;
      }
    } else if (Date.now() - started >= (options.unknownGraceMs ?? UNKNOWN_OBJECT_GRACE_MS)) {
      io.err(`the controller at ${options.controller} has no ${what} (for ${(options.unknownGraceMs ?? UNKNOWN_OBJECT_GRACE_MS) / 1000} s): check KIND/NAME and -n\n`);
      return 1;
    }
    if (Date.now() >= deadline) break;
    await new Promise((resolve) => setTimeout(resolve, Math.min(WAIT_POLL_MS, Math.max(0, deadline - Date.now()))));
  }
  if (!last) {
    io.err(`timed out after ${options.timeoutSeconds} s: the controller at ${options.controller} has no ${what}\n`);
    return 1;
  }
  const waiting = last.waiting.map((w) => `  ${w.identity} ${w.proxy}: ${w.reason}`).join('\n');
  const state =
    last.generation < (options.generation ?? 0)
      ? `is at generation ${last.generation}, not ${options.generation} yet`
      : `generation ${last.generation} ${last.meshGeneration === null ? 'is not in a configuration yet' : `is not programmed: ${programmedSummary(last)}`}${waiting ? `\n${waiting}` : ''}${last.affected === 0 && last.meshGeneration !== null ? `\n  ${noProxyLine(what)}` : ''}`;
  io.err(`timed out after ${options.timeoutSeconds} s: ${what} ${state}\n`);
  return 1;
}

/** Registers `trellis status` and `trellis wait`. */
export function registerStatusCommands(program: Command): void {
  const controllerOption = () => new Option('--controller <url>', "the controller's operations server").default(DEFAULT_CONTROLLER_URL);
  program
    .command('status')
    .description('show each policy object: accepted, and how many of the proxies it affects have ACKed its current generation')
    .addOption(controllerOption())
    .addOption(new Option('--output <format>', 'table or json').choices(['table', 'json']).default('table'))
    .option('-n, --namespace <ns>', 'only the objects of this namespace')
    .action(async (opts: { controller: string; output: 'table' | 'json'; namespace?: string }) => {
      try {
        await printStatus(opts);
      } catch (err) {
        process.stderr.write(`trellis status: ${err instanceof Error ? err.message : String(err)}\n`);
        process.exitCode = 1;
      }
    });
  program
    .command('wait')
    .description('wait until every proxy a policy object affects has ACKed its current generation (exit 1 on NACK, timeout, or an object not accepted)')
    .argument('<KIND/NAME>', 'the object, e.g. trafficsplit/bookstore-split', parsePolicyRef)
    .addOption(new Option('--for <condition>', 'the condition to wait for').choices(['programmed']).makeOptionMandatory())
    .option('-n, --namespace <ns>', 'the namespace of the object', 'default')
    .addOption(new Option('--timeout <duration>', 'give up after this long (e.g. 60s, 2m)').argParser(seconds).default(60, '60s'))
    .addOption(new Option('--generation <n>', 'wait for this generation of the object or a later one (metadata.generation in Kubernetes mode), not the one the controller has now').argParser(positiveInteger))
    .option('--require-proxies', 'not programmed while no connected proxy is affected by the object: wait for one (by default that exits 0, saying so)')
    .addOption(controllerOption())
    .action(async (ref: { kind: PolicyKind; name: string }, opts: { namespace: string; timeout: number; controller: string; generation?: number; requireProxies?: boolean }) => {
      try {
        process.exitCode = await waitProgrammed({ controller: opts.controller, kind: ref.kind, namespace: opts.namespace, name: ref.name, timeoutSeconds: opts.timeout, generation: opts.generation, requireProxies: opts.requireProxies === true });
      } catch (err) {
        process.stderr.write(`trellis wait: ${err instanceof Error ? err.message : String(err)}\n`);
        process.exitCode = 1;
      }
    });
}
