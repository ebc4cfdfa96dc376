/**
 * `trellis lab up|exec|status|down` (and the hidden `lab supervise` that `up` starts in the
 * background): the mesh on one Linux host with real Envoy sidecars (src/lab/lab.ts).
 */
import { spawn } from 'node:child_process';
import { closeSync, existsSync, fstatSync, openSync, readSync } from 'node:fs';
import { mkdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { Command, InvalidArgumentError, Option } from 'commander';
import {
  checkLabXdsPort, cleanUpLab, DEFAULT_LAB_HTTP_ADDRESS, DEFAULT_LAB_PREFIX, DEFAULT_LAB_SUBNET, LAB_XDS_PORT, startLab, type Lab,
} from '../lab/lab.js';
import { findEnvoy } from '../lab/envoy.js';
import { checkLabPrefix, inPod, labSubnetAddress } from '../lab/network.js';
import { describeMissing, ENVOY_INSTALL, missingLabPrerequisites, whichCommand } from '../lab/prerequisites.js';
import { loggedFailure, processAlive, sleep } from '../lab/process.js';
import { defaultLabStateDir, readLabOwner, readLabState } from '../lab/state.js';
import { allReady, formatLabStatus, labFailedForGood, labFailures, labStatus, type LabStatus } from '../lab/status.js';
import { addLogOptions, createLogger, type LogOptions } from './logging.js';
import { exitOnSignal } from './signals.js';

const TRELLIS_BIN = path.resolve(import.meta.dirname, '../../bin/trellis.js');
/** The most of the supervisor's log `up` prints when the supervisor fails, in bytes. */
const LOG_TAIL_BYTES = 4000;

function prefixOption(value: string): string {
  try {
    checkLabPrefix(value);
  } catch (err) {
    throw new InvalidArgumentError((err as Error).message);
  }
  return value;
}

function subnetOption(value: string): string {
  try {
    labSubnetAddress(value, 1);
  } catch (err) {
    throw new InvalidArgumentError((err as Error).message);
  }
  return value;
}

function portOption(value: string): number {
  const n = Number(value);
  try {
    if (!/^\d+$/.test(value)) throw new Error(`"${value}" is not a TCP port (1-65535)`);
    checkLabXdsPort(n);
  } catch (err) {
    throw new InvalidArgumentError((err as Error).message);
  }
  return n;
}

function seconds(value: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value) || n <= 0) throw new InvalidArgumentError(`"${value}" is not a number of seconds above 0`);
  return n;
}

interface CommonOptions { prefix: string; stateDir?: string }
interface UpOptions extends CommonOptions {
  manifests: string;
  envoy?: string;
  subnet: string;
  httpAddress: string;
  xdsPort: number;
  delta: boolean;
  timeout: number;
}

/** The lab's state dir: `--state-dir`, else the one its prefix's owner recorded, else the default. */
async function stateDirOf(opts: CommonOptions): Promise<string> {
  if (opts.stateDir !== undefined) return path.resolve(opts.stateDir);
  return (await readLabOwner(opts.prefix))?.stateDir ?? defaultLabStateDir(opts.prefix);
}

function fail(message: string): void {
  process.stderr.write(`trellis lab: ${message}\n`);
  process.exitCode = 1;
}

/**
 * Why the supervisor exited, from its log read through `fd` (the log file itself is gone once
 * the failed lab removed its state dir): its own error line, else the end of the log.
 */
function supervisorFailure(fd: number): string {
  const buffer = Buffer.alloc(LOG_TAIL_BYTES * 16);
  const size = fstatSync(fd).size;
  const bytes = readSync(fd, buffer, 0, buffer.length, Math.max(0, size - buffer.length));
  return loggedFailure(buffer.subarray(0, bytes).toString('utf8'), LOG_TAIL_BYTES);
}

/** `lab up`: checks what is needed, starts `lab supervise` detached, waits until every sidecar ACKed. */
async function up(opts: UpOptions): Promise<void> {
  const missing = missingLabPrerequisites();
  const envoy = opts.envoy ?? findEnvoy();
  if (envoy === undefined || !existsSync(envoy)) {
    missing.push({
      what: 'Envoy',
      ...(envoy !== undefined ? { detail: `no file ${envoy}` } : {}),
      howToGet: `${ENVOY_INSTALL}, or pass --envoy PATH, or set TRELLIS_ENVOY`,
    });
  }
  if (missing.length > 0) return fail(`lab up cannot start: ${describeMissing(missing)}`);
  const manifests = path.resolve(opts.manifests);
  const manifestsStat = await stat(manifests).catch((err: NodeJS.ErrnoException) => err);
  if (manifestsStat instanceof Error) return fail(`--manifests ${manifests}: ${manifestsStat.code === 'ENOENT' ? 'no such directory' : `cannot read it (${manifestsStat.code ?? manifestsStat.message})`}`);
  if (!manifestsStat.isDirectory()) return fail(`--manifests ${manifests} is not a directory (the lab reads a directory of manifests)`);
  const owner = await readLabOwner(opts.prefix);
  if (owner?.alive) return fail(`lab ${opts.prefix} is running already (pid ${owner.pid}, state dir ${owner.stateDir}); trellis lab down --prefix ${opts.prefix}`);
  const stateDir = opts.stateDir !== undefined ? path.resolve(opts.stateDir) : defaultLabStateDir(opts.prefix);
  await mkdir(stateDir, { recursive: true, mode: 0o755 });
  const logFile = path.join(stateDir, 'supervisor.log');
  // Kept open (read back on failure): a lab that fails to start removes its state dir, log too.
  const fd = openSync(logFile, 'w+', 0o600);
  try {
    await superviseUntilReady(opts, { manifests, envoy: envoy!, stateDir, logFile, fd });
  } finally {
    closeSync(fd);
  }
}

async function superviseUntilReady(opts: UpOptions, run: { manifests: string; envoy: string; stateDir: string; logFile: string; fd: number }): Promise<void> {
  const { stateDir, logFile, fd } = run;
  const args = [
    TRELLIS_BIN, 'lab', 'supervise', '--manifests', run.manifests, '--envoy', run.envoy, '--prefix', opts.prefix,
    '--subnet', opts.subnet, '--http-address', opts.httpAddress, '--xds-port', String(opts.xdsPort), '--state-dir', stateDir, ...(opts.delta ? ['--delta'] : []),
  ];
  const child = spawn(process.execPath, args, { detached: true, stdio: ['ignore', fd, fd] });
  const pid = child.pid!;
  child.unref();
  const deadline = Date.now() + opts.timeout * 1000;
  let status: LabStatus | undefined;
  for (;;) {
    if (!processAlive(pid)) return fail(`the lab failed to start: ${supervisorFailure(fd)}`);
    const state = await readLabState(stateDir).catch(() => undefined);
    if (state && state.supervisorPid === pid && state.phase === 'running') {
      status = await labStatus(state);
      if (allReady(status)) break;
      if (labFailedForGood(status)) {
        process.stdout.write(formatLabStatus(status));
        return fail(`lab ${opts.prefix} is of no use: ${labFailures(status).join('; ')}; it keeps running (trellis lab down --prefix ${opts.prefix}); log: ${logFile}`);
      }
    }
    if (Date.now() > deadline) {
      process.stdout.write(status ? formatLabStatus(status) : '');
      return fail(`not every sidecar ACKed after ${opts.timeout} s; the lab keeps running (trellis lab status, trellis lab down --prefix ${opts.prefix}); log: ${logFile}`);
    }
    await sleep(250);
  }
  process.stdout.write(formatLabStatus(status));
}

/** `lab supervise`: the supervisor itself (what `up` runs in the background). */
async function supervise(opts: UpOptions & LogOptions): Promise<void> {
  const logger = createLogger(opts);
  let lab: Lab;
  try {
    lab = await startLab({
      manifestsDir: opts.manifests, envoyPath: opts.envoy, prefix: opts.prefix, subnet: opts.subnet, httpAddress: opts.httpAddress,
      xdsPort: opts.xdsPort, delta: opts.delta, stateDir: opts.stateDir, logger,
    });
  } catch (err) {
    logger.fatal({ err: err instanceof Error ? err.message : String(err) }, 'the lab failed to start');
    process.exit(1);
  }
  exitOnSignal(async (signal) => {
    logger.info({ signal }, 'stopping the lab');
    try {
      logger.info({ removed: await lab.stop() }, 'lab stopped');
    } catch (err) {
      logger.error({ err: err instanceof Error ? err.message : String(err) }, 'lab stop failed');
      throw err;
    }
  });
}

/** `lab exec`: runs a command in a pod's netns as its app runs (`inPod`), inheriting stdio; passes its exit status through. */
async function exec(pod: string, argv: string[], opts: CommonOptions & { namespace: string }): Promise<void> {
  const stateDir = await stateDirOf(opts);
  const state = await readLabState(stateDir);
  if (!state) return fail(`no lab ${opts.prefix} (no state in ${stateDir}): trellis lab up first`);
  const found = state.pods.find((p) => p.name === pod && p.namespace === opts.namespace);
  if (!found || found.netns === '') return fail(`lab ${opts.prefix} runs no pod ${opts.namespace}/${pod} (trellis lab status lists them)`);
  if (argv.length === 0) return fail('lab exec needs a command after --');
  // `ip netns exec` exits 1 when it cannot run the command: answer as a shell does instead.
  const program = argv[0].includes('/') ? (existsSync(argv[0]) ? argv[0] : undefined) : whichCommand(argv[0]);
  if (program === undefined) {
    fail(`${argv[0]}: command not found`);
    process.exitCode = 127;
    return;
  }
  const [command, ...args] = inPod(found.netns, argv, stateDir);
  const child = spawn(command, args, { stdio: 'inherit' });
  const code = await new Promise<number>((resolve) => {
    child.once('error', (err) => { process.stderr.write(`trellis lab: exec ${argv[0]}: ${err.message}\n`); resolve(127); });
    child.once('exit', (c, signal) => resolve(c ?? (signal === 'SIGKILL' ? 137 : 128 + 15)));
  });
  process.exitCode = code;
}

async function status(opts: CommonOptions & { json: boolean }): Promise<void> {
  const stateDir = await stateDirOf(opts);
  const state = await readLabState(stateDir);
  if (!state) {
    const message = `no lab ${opts.prefix} (no state in ${stateDir})`;
    if (opts.json) process.stdout.write(`${JSON.stringify({ error: message, prefix: opts.prefix, stateDir })}\n`);
    return fail(message);
  }
  const result = await labStatus(state);
  process.stdout.write(opts.json ? `${JSON.stringify(result, null, 2)}\n` : formatLabStatus(result));
  const failures = labFailures(result);
  if (failures.length > 0) fail(`lab ${opts.prefix} is of no use: ${failures.join('; ')}`);
}

async function down(opts: CommonOptions): Promise<void> {
  const removed = await cleanUpLab(opts.prefix, await stateDirOf(opts), { keepStateDir: false });
  process.stdout.write(removed.length > 0 ? `${removed.join('\n')}\n` : `no lab ${opts.prefix}: nothing to remove\n`);
}

function commonOptions(cmd: Command): Command {
  return cmd
    .option('--prefix <p>', 'the lab\'s prefix: every name it creates starts with <p>- (1-5 lowercase letters/digits)', prefixOption, DEFAULT_LAB_PREFIX)
    .option('--state-dir <dir>', 'the lab\'s state directory (default /run/trellis-lab/<prefix>)');
}

function upOptions(cmd: Command): Command {
  return commonOptions(cmd)
    .requiredOption('--manifests <dir>', 'directory of Kubernetes/SMI manifests: its Pods become network namespaces with their app (and Envoy, in monitored namespaces)')
    .option('--envoy <path>', 'the Envoy binary (default $TRELLIS_ENVOY, else .cache/envoy-venv\'s)')
    .option('--subnet <cidr>', 'the lab subnet: its first address is the bridge\'s (the controller\'s ADS listens there)', subnetOption, DEFAULT_LAB_SUBNET)
    .option('--http-address <host:port>', 'the controller\'s health, metrics and debug HTTP server', DEFAULT_LAB_HTTP_ADDRESS)
    .option('--xds-port <port>', 'the port of the controller\'s ADS on the bridge address (another than a controller of the host listens on, e.g. npm start\'s 0.0.0.0:15128)', portOption, LAB_XDS_PORT)
    .option('--delta', 'sidecars speak incremental xDS (DELTA_GRPC)', false);
}

/**
 * Registers `trellis lab` and its subcommands on `program`.
 * @param extra registers further `lab` subcommands (the lab's app and traffic generator).
 */
export function registerLabCommands(program: Command, extra?: (lab: Command) => void): void {
  const lab = program.command('lab').description('the mesh on this Linux host with real Envoy sidecars, one network namespace per pod (needs root and Envoy; a test bed, not a node agent)');
  upOptions(lab.command('up'))
    .description('start the lab in the background and wait until every sidecar has ACKed its configuration; prints the status')
    .addOption(new Option('--timeout <seconds>', 'how long to wait for every ACK').argParser(seconds).default(120))
    .action((opts: UpOptions) => up(opts));
  lab.addCommand(
    addLogOptions(upOptions(new Command('supervise')))
      .description('run the lab supervisor in the foreground (what lab up starts; its log is JSON in the log file lab up names)')
      .action((opts: UpOptions & LogOptions) => supervise(opts)),
    { hidden: true },
  );
  commonOptions(lab.command('exec'))
    .description('run a command in a pod\'s network namespace (as root, the app\'s user, not Envoy\'s uid): trellis lab exec POD -n NS -- CMD...')
    .argument('<pod>', 'pod name')
    .argument('<command...>', 'the command and its arguments (after --)')
    .requiredOption('-n, --namespace <ns>', 'the pod\'s namespace')
    .configureOutput({
      // `lab exec POD -n NS curl -s URL` reads -s as an option of exec's: say where the command goes.
      outputError: (text, write) => write(/unknown option/.test(text) ? `${text.trimEnd()}: put the pod's command after --: trellis lab exec POD -n NS -- CMD...\n` : text),
    })
    .action((pod: string, argv: string[], opts: CommonOptions & { namespace: string }) => exec(pod, argv, opts));
  commonOptions(lab.command('status'))
    .description('list the pods, their addresses, their Envoy and its ADS state (ACK/NACK per type)')
    .option('--json', 'as JSON', false)
    .action((opts: CommonOptions & { json: boolean }) => status(opts));
  commonOptions(lab.command('down'))
    .description('stop the lab and remove everything named with its prefix (also after a crash)')
    .action((opts: CommonOptions) => down(opts));
  extra?.(lab);
}
