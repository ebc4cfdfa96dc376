import { Command, InvalidArgumentError, Option } from 'commander';
import { parseGoDuration } from '../catalog/build-snapshot.js';
import { StartError } from '../controller/lifecycle.js';
import { runController } from '../main.js';
import { writeProxyBootstrap } from './bootstrap-command.js';
import { registerExplainCommands } from './explain-command.js';
import { registerInjectorCommands } from './injector-command.js';
import { registerKubeCommands } from './kube-command-line.js';
import { registerLabCommands } from './lab-command.js';
import { registerLabToolCommands } from './lab-tools-command.js';
import { addLogOptions, createLogger, type LogOptions } from './logging.js';
import { registerProxiesCommands } from './proxies-command.js';
import { registerValidateCommands } from './validate-command.js';
import { registerStatusCommands } from './status-command.js';
import { exitOnSignal } from './signals.js';
import { readBuildInfo, versionText } from './version.js';
import { DEFAULT_MAX_MANIFEST_BYTES, DEFAULT_MAX_MANIFESTS_TOTAL_BYTES } from '../sources/manifests/index.js';
import { splitHostPort } from '../util/address.js';
import { DEFAULT_UNREAD_TIMEOUT_MS } from '../xds/server/ads-server.js';

function duration(value: string): number {
  const seconds = /^\d+$/.test(value) ? Number(value) : parseGoDuration(value);
  if (seconds === undefined || seconds < 0) throw new InvalidArgumentError(`"${value}" is not a duration such as 60s, 5m or 1h`);
  return seconds;
}

/** A parser of sizes in MiB: 0 and more, or (`positive`) above 0. */
function mebibytes(positive: boolean): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (value.trim() === '' || !Number.isFinite(n) || n < 0 || (positive && n === 0)) {
      throw new InvalidArgumentError(positive ? `"${value}" is not a size in MiB above 0, such as 4 or 0.5` : `"${value}" is not a size in MiB such as 64 or 0`);
    }
    return n;
  };
}

const MiB = 1024 * 1024;

/** A TCP port, 1–65535. @throws InvalidArgumentError otherwise. */
function tcpPort(value: string): number {
  const port = Number(value);
  if (!/^\d+$/.test(value) || port < 1 || port > 65535) throw new InvalidArgumentError(`"${value}" is not a port (1-65535)`);
  return port;
}

function address(value: string): string {
  const { host, port } = splitHostPort(value);
  if (host === '' || !Number.isInteger(port) || port < 0 || port > 65535) throw new InvalidArgumentError(`"${value}" is not HOST:PORT`);
  return value;
}

/**
 * The `trellis` command line: `trellis controller` runs the control plane, `trellis bootstrap`
 * writes an Envoy bootstrap and xDS client certificate for one proxy.
 * @param argv `process.argv`.
 */
export async function main(argv: readonly string[]): Promise<void> {
  const program = new Command('trellis')
    .description('Trellis: a service-mesh control plane (xDS server for Envoy and SMI policies)')
    .version(versionText(readBuildInfo()), '-V, --version', 'print the version and the git commit it was built from');

  addLogOptions(program
    .command('controller')
    .description('run the controller: watch the manifests, serve ADS over mTLS, push configuration to every proxy')
    .addOption(new Option('--manifests <dir>', 'directory of Kubernetes/SMI manifests to load and watch').default('examples/bookstore').conflicts('kubernetes'))
    .addOption(new Option('--kubernetes', 'watch the Kubernetes API server (in-cluster credentials in a pod, else --kubeconfig or the default kubeconfig) instead of --manifests').default(false))
    .addOption(new Option('--kubeconfig <file>', 'kubeconfig for --kubernetes').implies({ kubernetes: true }))
    .option('--mesh-name <name>', 'mesh name: namespaces labelled openservicemesh.io/monitored-by=<name> are in the mesh', 'osm')
    .option('--state-dir <dir>', 'where the CA root certificate and key persist', '.trellis')
    .option('--xds-address <host:port>', 'mTLS ADS listener', address, '0.0.0.0:15128')
    .option('--xds-plaintext-address <host:port>', 'plaintext ADS listener for proxyless gRPC and local tests (identity from node.id)', address)
    .option('--insecure-allow-remote', 'allow the plaintext listener on a non-loopback address', false)
    .option('--http-address <host:port>', 'health, metrics and debug HTTP server', address, '127.0.0.1:9091')
    .option('--http-allowed-host <name>', 'a host name requests to the HTTP server may use besides its IP addresses, localhost and Kubernetes service names (repeatable; others get 421, a guard against DNS rebinding)', (value: string, list: string[]) => [...list, value], [] as string[])
    .addOption(
      new Option('--resync-interval <duration>', 'push to every proxy at least this often (e.g. 30s, 5m; a bare number is seconds; 0 turns it off)')
        .argParser(duration)
        .default(60, '60s'),
    )
    .addOption(
      new Option('--xds-unread-timeout <duration>', 'close an ADS stream whose proxy leaves a response unread this long (e.g. 30s; a bare number is seconds; 0 turns it off)')
        .argParser(duration)
        .default(DEFAULT_UNREAD_TIMEOUT_MS / 1000, `${DEFAULT_UNREAD_TIMEOUT_MS / 1000}s`),
    )
    .addOption(
      new Option('--warm-up-config <MiB>', 'at start-up, generate the configuration of each identity of the mesh ahead until this many MiB are encoded (0: none)')
        .argParser(mebibytes(false))
        .default(64),
    )
    .addOption(
      new Option('--max-manifest-size <MiB>', 'the largest manifest file read; a larger one is reported as a manifest error and not read')
        .argParser(mebibytes(true))
        .default(DEFAULT_MAX_MANIFEST_BYTES / MiB),
    )
    .addOption(
      new Option('--max-manifests-total-size <MiB>', 'the most manifests loaded from the directory, all files together; a file past it is reported as a manifest error and keeps its previous objects')
        .argParser(mebibytes(true))
        .default(DEFAULT_MAX_MANIFESTS_TOTAL_BYTES / MiB),
    ))
    .action(async (opts: LogOptions & {
      manifests: string;
      kubernetes: boolean;
      kubeconfig?: string;
      meshName: string;
      stateDir: string;
      xdsAddress: string;
      xdsPlaintextAddress?: string;
      insecureAllowRemote: boolean;
      httpAddress: string;
      httpAllowedHost: string[];
      resyncInterval: number;
      xdsUnreadTimeout: number;
      warmUpConfig: number;
      maxManifestSize: number;
      maxManifestsTotalSize: number;
    }) => {
      const logger = createLogger(opts);
      let started: ReturnType<typeof runController> | undefined;
      const starting = new AbortController();
      // Installed before the start: a signal during start-up ends a wait without bound (the API
      // server down), lets the start finish or unwind, then stops in order (a start that fails
      // for another reason exits 1 below on its own).
      exitOnSignal(async (signal) => {
        logger.info({ signal }, 'shutting down');
        starting.abort();
        const running = await started?.catch(() => undefined);
        await running?.stop();
      });
      try {
        started = runController({
          ...(opts.kubernetes ? { kubernetes: { kubeconfig: opts.kubeconfig } } : { manifests: opts.manifests }),
          meshName: opts.meshName,
          stateDir: opts.stateDir,
          xdsAddress: opts.xdsAddress,
          xdsPlaintextAddress: opts.xdsPlaintextAddress,
          insecureAllowRemote: opts.insecureAllowRemote,
          httpAddress: opts.httpAddress,
          httpAllowedHosts: opts.httpAllowedHost,
          resyncIntervalMs: opts.resyncInterval * 1000,
          xdsUnreadTimeoutMs: opts.xdsUnreadTimeout * 1000,
          warmUpConfigurationBytes: opts.warmUpConfig * MiB,
          maxManifestBytes: Math.floor(opts.maxManifestSize * MiB),
          maxManifestsTotalBytes: Math.floor(opts.maxManifestsTotalSize * MiB),
          logger,
          signal: starting.signal,
        });
        await started;
      } catch (err) {
        if (starting.signal.aborted) return; // stopped during start-up: the signal handler exits
        logger.fatal({ err: err instanceof Error ? err.message : String(err), ...(err instanceof StartError ? { part: err.part } : {}) }, 'controller failed to start');
        process.exit(1);
      }
    });

  program
    .command('bootstrap')
    .description('issue an xDS client certificate and write an Envoy bootstrap for one proxy')
    .requiredOption('--namespace <ns>', 'namespace of the proxy')
    .requiredOption('--service-account <sa>', 'service account (identity) of the proxy')
    .requiredOption('--out <dir>', 'output directory for bootstrap.yaml, cert.pem, key.pem, ca.pem')
    .option('--state-dir <dir>', 'the controller state directory holding the CA', '.trellis')
    .option('--xds-address <host:port>', 'the controller ADS address as the proxy reaches it', address, '127.0.0.1:15128')
    .option('--uuid <uuid>', 'proxy UUID (default: random)')
    .option('--delta', 'incremental xDS (ads_config.api_type DELTA_GRPC) instead of state of the world', false)
    .option('--admin-socket <path>', 'serve Envoy\'s admin interface on this Unix socket instead of 127.0.0.1:15000')
    .option('--admin-port <port>', "serve Envoy's admin interface on 127.0.0.1:<port> instead of 15000 (the mesh's envoy-metrics-cluster still reads 15000: for a proxy on a shared host)", tcpPort)
    .option('--kubernetes', "take the CA from the controller's Secret (--ca-secret in --ca-namespace) instead of --state-dir", false)
    .option('--kubeconfig <file>', 'kubeconfig for --kubernetes (default: in-cluster, $KUBECONFIG or ~/.kube/config)')
    .option('--ca-secret <name>', "the controller's CA Secret", 'trellis-ca')
    .option('--ca-namespace <ns>', "the controller's namespace ($POD_NAMESPACE, else osm-system)", process.env.POD_NAMESPACE || 'osm-system')
    .action(async (opts: {
      namespace: string; serviceAccount: string; out: string; stateDir: string; xdsAddress: string; uuid?: string; delta: boolean; adminSocket?: string; adminPort?: number;
      kubernetes: boolean; kubeconfig?: string; caSecret: string; caNamespace: string;
    }) => {
      try {
        let ca;
        if (opts.kubernetes || opts.kubeconfig !== undefined) {
          const [{ readCaSecret, secretApiFor }, { loadKubeConfig }] = await Promise.all([import('../certificate/secret-store.js'), import('../sources/kubernetes/kubernetes-source.js')]);
          ca = await readCaSecret({ api: secretApiFor(loadKubeConfig(opts.kubeconfig)), namespace: opts.caNamespace, name: opts.caSecret });
        }
        if (opts.adminSocket !== undefined && opts.adminPort !== undefined) throw new Error('--admin-socket and --admin-port both place the admin interface: give one');
        const result = await writeProxyBootstrap({ ...opts, adminSocketPath: opts.adminSocket, ca });
        process.stdout.write(`${result.commonName}\n${Object.values(result.files).join('\n')}\n`);
      } catch (err) {
        process.stderr.write(`trellis bootstrap: ${err instanceof Error ? err.message : String(err)}\n`);
        process.exitCode = 1;
      }
    });

  registerKubeCommands(program);
  registerExplainCommands(program);
  registerStatusCommands(program);
  registerInjectorCommands(program);
  registerLabCommands(program, registerLabToolCommands);
  registerValidateCommands(program);
  registerProxiesCommands(program);

  await program.parseAsync([...argv]);
}
