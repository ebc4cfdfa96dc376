/**
 * The command line of `trellis injector` (the sidecar injector webhook), `trellis iptables-init`
 * (what the injected `osm-init` container runs) and `trellis healthcheck` (the
 * `osm-healthcheck` container). The injector's modules, and with them `@kubernetes/client-node`,
 * are imported only when `trellis injector` runs.
 */
import { readFile, stat } from 'node:fs/promises';
import { Command, InvalidArgumentError, Option } from 'commander';
import { applyInterception, INBOUND_PORT, interceptionRules, OUTBOUND_PORT, PROXY_UID, type InterceptionOptions } from '../injector/iptables.js';
import { splitHostPort } from '../util/address.js';
import { addLogOptions, createLogger, type LogOptions } from './logging.js';
import { exitOnSignal } from './signals.js';

/** A comma-separated list flag's parser (entries trimmed, empty entries dropped). */
function list(value: string): string[] {
  return value.split(',').map((v) => v.trim()).filter((v) => v !== '');
}

/** A comma-separated port list: every entry an integer 1–65535. */
function ports(flag: string): (value: string) => number[] {
  return (value) =>
    list(value).map((v) => {
      const n = /^\d{1,5}$/.test(v) ? Number(v) : NaN;
      if (!(n >= 1 && n <= 65535)) throw new InvalidArgumentError(`${flag}: "${v}" is not a port (1 to 65535)`);
      return n;
    });
}

/**
 * The interception options of `trellis iptables-init`'s flags (the lists the injector merged from
 * the MeshConfig and the pod's annotations, see `interceptionArgs` in src/injector/inject.ts),
 * with Envoy's uid and listener ports.
 */
export function parseInterceptionArgs(opts: {
  outboundIpRangeExclusions?: string[];
  outboundIpRangeInclusions?: string[];
  outboundPortExclusions?: number[];
  inboundPortExclusions?: number[];
  networkInterfaceExclusions?: string[];
}): InterceptionOptions {
  return {
    proxyUid: PROXY_UID,
    outboundPort: OUTBOUND_PORT,
    inboundPort: INBOUND_PORT,
    outboundIPRangeExclusions: opts.outboundIpRangeExclusions ?? [],
    outboundIPRangeInclusions: opts.outboundIpRangeInclusions ?? [],
    outboundPortExclusions: opts.outboundPortExclusions ?? [],
    inboundPortExclusions: opts.inboundPortExclusions ?? [],
    networkInterfaceExclusions: opts.networkInterfaceExclusions ?? [],
  };
}

function fail(command: string, err: unknown): void {
  process.stderr.write(`trellis ${command}: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exitCode = 1;
}

/** `--address HOST:PORT` (`splitHostPort`; no host: every address, 0.0.0.0). */
function listenAddress(value: string): { host: string; port: number } {
  const { host, port } = splitHostPort(value);
  if (!(port >= 0 && port <= 65535)) throw new InvalidArgumentError(`"${value}" is not HOST:PORT`);
  return { host: host || '0.0.0.0', port };
}

/** The largest --client-ca-file read (a CA bundle of a few certificates is a few KiB). */
const MAX_CLIENT_CA_BYTES = 1024 * 1024;

/** The PEM of --client-ca-file. @throws Error naming the file when it is larger than {@link MAX_CLIENT_CA_BYTES} or holds no certificate. */
async function readClientCa(file: string): Promise<string> {
  if ((await stat(file)).size > MAX_CLIENT_CA_BYTES) throw new Error(`--client-ca-file ${file}: larger than ${MAX_CLIENT_CA_BYTES} bytes`);
  const pem = await readFile(file, 'utf8');
  if (!pem.includes('-----BEGIN CERTIFICATE-----')) throw new Error(`--client-ca-file ${file}: no PEM certificate`);
  return pem;
}

/** A flag's positive integer. */
function positiveInteger(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n <= 0) throw new InvalidArgumentError(`"${value}" is not a positive integer`);
  return n;
}

/** Adds `trellis injector`, `trellis iptables-init` and `trellis healthcheck` to `program`. */
export function registerInjectorCommands(program: Command): void {
  const namespace = process.env.POD_NAMESPACE || 'osm-system';
  addLogOptions(program
    .command('injector')
    .description('run the sidecar injector: a mutating admission webhook (HTTPS) that adds the Envoy sidecar, its init container and bootstrap to pods of the mesh')
    .option('--kubeconfig <file>', 'kubeconfig (default: in-cluster in a pod, else $KUBECONFIG or ~/.kube/config)')
    .option('--mesh-name <name>', 'mesh name: pods of namespaces labelled openservicemesh.io/monitored-by=<name> are injected', 'osm')
    .option('--namespace <ns>', "the mesh's namespace: the injector's Service, the CA Secret, the MeshConfig ($POD_NAMESPACE)", namespace)
    .addOption(new Option('--ca-secret <name>', "the controller's CA Secret in --namespace").default('trellis-ca').conflicts('stateDir'))
    .option('--state-dir <dir>', "take the CA from the controller's state directory instead of its Secret")
    .option('--mesh-config <name>', 'MeshConfig name in --namespace', 'osm-mesh-config')
    .option('--webhook-config-name <name>', 'MutatingWebhookConfiguration to write the CA bundle into (default osm-webhook-<mesh-name>)')
    .option('--no-webhook-config', 'write no CA bundle (a local run without a MutatingWebhookConfiguration)')
    .option('--address <host:port>', 'HTTPS listener of the webhook', '0.0.0.0:9090')
    .option('--dns-name <name...>', 'extra DNS names of the serving certificate')
    .option('--ip-address <ip...>', 'IP addresses of the serving certificate')
    .option('--xds-address <host:port>', "the controller's ADS address as pods reach it (default osm-controller.<namespace>.svc.cluster.local:15128)")
    .option('--envoy-image <image>', 'Envoy image when MeshConfig spec.sidecar.envoyImage is unset', 'envoyproxy/envoy:v1.40.0')
    .option('--trellis-image <image>', 'image of the init and healthcheck containers when MeshConfig spec.sidecar.initContainerImage is unset', 'trellis:latest')
    .option('--trellis-command <argv>', 'how trellis runs in that image, space-separated', 'node /app/bin/trellis.js')
    .option('--delta', 'bootstraps use incremental xDS (DELTA_GRPC)', false)
    .option('--client-ca-file <file>', "CA (PEM) of the API server's webhook client certificate: AdmissionReviews without one are refused (403)")
    .option('--max-secret-creations-per-second <n>', 'bootstrap Secrets created per second at most; beyond, pods are refused (429) and retried by their controller', positiveInteger, 20)
    .option('--max-concurrent-secret-creations <n>', 'bootstrap Secret creations in progress at once at most; beyond, pods are refused (429)', positiveInteger, 8)
    .option('--secret-adopt-timeout <seconds>', 'a bootstrap Secret whose pod is not stored within this time is deleted', positiveInteger, 120))
    .action(async (opts: LogOptions & {
      kubeconfig?: string; meshName: string; namespace: string; caSecret: string; stateDir?: string; meshConfig: string;
      webhookConfigName?: string; webhookConfig: boolean; address: string; dnsName?: string[]; ipAddress?: string[];
      xdsAddress?: string; envoyImage: string; trellisImage: string; trellisCommand: string; delta: boolean;
      clientCaFile?: string; maxSecretCreationsPerSecond: number; maxConcurrentSecretCreations: number; secretAdoptTimeout: number;
    }) => {
      const logger = createLogger(opts);
      try {
        const listen = listenAddress(opts.address);
        const [{ runInjector }, { loadKubeConfig }] = await Promise.all([import('../injector/run.js'), import('../sources/kubernetes/kubernetes-source.js')]);
        const clientCaPem = opts.clientCaFile !== undefined ? await readClientCa(opts.clientCaFile) : undefined;
        const injector = await runInjector({
          kubeConfig: loadKubeConfig(opts.kubeconfig),
          clientCaPem,
          secretCreationBounds: { maxPerWindow: opts.maxSecretCreationsPerSecond, windowMs: 1000, maxConcurrent: opts.maxConcurrentSecretCreations },
          adoptTimeoutMs: opts.secretAdoptTimeout * 1000,
          namespace: opts.namespace,
          ca: opts.stateDir !== undefined ? { stateDir: opts.stateDir } : { secretName: opts.caSecret },
          meshConfig: { namespace: opts.namespace, name: opts.meshConfig },
          webhookConfigName: opts.webhookConfig ? (opts.webhookConfigName ?? `osm-webhook-${opts.meshName}`) : undefined,
          host: listen.host,
          port: listen.port,
          dnsNames: opts.dnsName,
          ipAddresses: opts.ipAddress,
          settings: {
            meshName: opts.meshName,
            xdsAddress: opts.xdsAddress ?? `osm-controller.${opts.namespace}.svc.cluster.local:15128`,
            envoyImage: opts.envoyImage,
            trellisImage: opts.trellisImage,
            trellisCommand: opts.trellisCommand.split(/\s+/).filter((a) => a !== ''),
            delta: opts.delta,
          },
          logger,
        });
        process.stdout.write(`injector listening on ${listen.host}:${injector.port}\n`);
        exitOnSignal(async (signal) => {
          logger.info({ signal }, 'shutting down');
          await injector.stop();
        });
      } catch (err) {
        logger.fatal({ err: err instanceof Error ? err.message : String(err) }, 'injector failed to start');
        process.exit(1);
      }
    });

  program
    .command('iptables-init')
    .description("set up the pod's traffic interception (iptables nat rules sending its TCP through Envoy): the injected osm-init container runs this")
    .option('--outbound-ip-range-exclusions <cidrs>', 'IPv4 CIDRs whose outbound traffic bypasses Envoy', list)
    .option('--outbound-ip-range-inclusions <cidrs>', 'when given, only outbound traffic to these CIDRs goes through Envoy', list)
    .option('--outbound-port-exclusions <ports>', 'destination ports whose outbound TCP bypasses Envoy', ports('--outbound-port-exclusions'))
    .option('--inbound-port-exclusions <ports>', 'ports whose inbound TCP bypasses Envoy', ports('--inbound-port-exclusions'))
    .option('--network-interface-exclusions <names>', 'interfaces whose traffic bypasses Envoy', list)
    .option('--netns <name>', 'in this network namespace (ip netns exec) instead of our own')
    .option('--print', 'print the iptables-restore input instead of applying it', false)
    .action(async (opts: Parameters<typeof parseInterceptionArgs>[0] & { netns?: string; print: boolean }) => {
      try {
        const options = parseInterceptionArgs(opts);
        if (opts.print) process.stdout.write(interceptionRules(options));
        else await applyInterception(opts.netns, options);
      } catch (err) {
        fail('iptables-init', err);
      }
    });

  program
    .command('healthcheck')
    .description('answer rewritten tcpSocket probes: GET /osm-healthcheck with Original-Tcp-Port (the injected osm-healthcheck container)')
    .option('--host <address>', 'address to listen on', '0.0.0.0')
    .option('--port <port>', 'port to listen on', '15904')
    .action(async (opts: { host: string; port: string }) => {
      try {
        const { startHealthcheckServer } = await import('../injector/healthcheck.js');
        const server = await startHealthcheckServer({ host: opts.host, port: Number(opts.port) });
        exitOnSignal(() => server.close());
      } catch (err) {
        fail('healthcheck', err);
      }
    });
}
