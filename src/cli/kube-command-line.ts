/**
 * The command line of `trellis namespace add|remove|list` and `trellis proxy config`. Their
 * bodies (`kube-commands.ts`) and the Kubernetes client they use are imported only when one of
 * them runs (`trellis proxy config` only with `--kubernetes`; else it asks the controller): `@kubernetes/client-node` takes about 0.5 s to load, which every other command
 * (`trellis controller --manifests`, `--help`) would pay otherwise.
 */
import type { Command } from 'commander';
import type { KubeConfig } from '@kubernetes/client-node';
import type { CommandOutput } from './kube-commands.js';
import { DEFAULT_CONTROLLER_URL, isProxyUuid, proxyConfigFromController } from './proxies-command.js';

/** The commands' bodies (`kube-commands.ts`), imported when one runs. */
type KubeCommands = typeof import('./kube-commands.js');

/**
 * Runs one command: imports its module and loads the kubeconfig (`file`, else in-cluster or
 * the default one), then runs `body`; an error is printed as `trellis <command>: <message>`
 * and sets the exit code.
 */
async function run(command: string, file: string | undefined, body: (commands: KubeCommands, kubeConfig: KubeConfig) => Promise<void>): Promise<void> {
  try {
    const [commands, { loadKubeConfig }] = await Promise.all([import('./kube-commands.js'), import('../sources/kubernetes/kubernetes-source.js')]);
    await body(commands, loadKubeConfig(file));
  } catch (err) {
    process.stderr.write(`trellis ${command}: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  }
}

/** Adds `trellis namespace add|remove|list` and `trellis proxy config` to `program`. */
export function registerKubeCommands(program: Command): void {
  const stdout: CommandOutput = { write: (text) => void process.stdout.write(text) };
  const namespace = program.command('namespace').description('add namespaces to the mesh, remove them, list them (the openservicemesh.io/monitored-by label)');
  const meshOptions = (c: Command): Command =>
    c.option('--mesh-name <name>', 'mesh name', 'osm').option('--kubeconfig <file>', 'kubeconfig (default: $KUBECONFIG, ~/.kube/config, or in-cluster)');
  meshOptions(namespace.command('add').argument('<namespace...>').description('label namespaces as monitored by the mesh and enable sidecar injection in them'))
    .option('--disable-sidecar-injection', 'annotate openservicemesh.io/sidecar-injection: disabled instead of enabled', false)
    .action((names: string[], opts: { meshName: string; kubeconfig?: string; disableSidecarInjection: boolean }) =>
      run('namespace add', opts.kubeconfig, (commands, kubeConfig) =>
        commands.namespaceAdd(kubeConfig, names, opts.meshName, stdout, { disableSidecarInjection: opts.disableSidecarInjection }),
      ),
    );
  meshOptions(namespace.command('remove').argument('<namespace...>').description('remove the mesh label and the sidecar-injection annotation from namespaces')).action(
    (names: string[], opts: { meshName: string; kubeconfig?: string }) =>
      run('namespace remove', opts.kubeconfig, (commands, kubeConfig) => commands.namespaceRemove(kubeConfig, names, opts.meshName, stdout)),
  );
  meshOptions(namespace.command('list').description('list the namespaces in the mesh')).action((opts: { meshName: string; kubeconfig?: string }) =>
    run('namespace list', opts.kubeconfig, (commands, kubeConfig) => commands.namespaceList(kubeConfig, opts.meshName, stdout)),
  );

  const proxy = program.command('proxy').description('inspect mesh proxies');
  proxy
    .command('config')
    .argument('<uuid|pod>', 'a proxy UUID, or the name of the pod it runs in')
    .description("print a proxy's configuration (the controller's /debug/config_dump); a pod is resolved by the controller from its store (its osm-proxy-uuid label, else the one connected proxy of its service account), or with --kubernetes through the API server")
    .option('-n, --namespace <ns>', 'namespace of the pod', 'default')
    .option('--controller <url>', 'the controller operations server (e.g. through kubectl port-forward -n osm-system svc/osm-controller 9091)', DEFAULT_CONTROLLER_URL)
    .option('--kubernetes', "read the pod's osm-proxy-uuid label from the Kubernetes API server instead of the controller's store", false)
    .option('--kubeconfig <file>', 'kubeconfig for --kubernetes (default: $KUBECONFIG, ~/.kube/config, or in-cluster)')
    .action(async (target: string, opts: { namespace: string; controller: string; kubernetes: boolean; kubeconfig?: string }) => {
      if (isProxyUuid(target) || !(opts.kubernetes || opts.kubeconfig !== undefined)) {
        try {
          await proxyConfigFromController(target, opts.namespace, opts.controller, stdout);
        } catch (err) {
          process.stderr.write(`trellis proxy config: ${err instanceof Error ? err.message : String(err)}\n`);
          process.exitCode = 1;
        }
        return;
      }
      await run('proxy config', opts.kubeconfig, (commands, kubeConfig) => commands.proxyConfig(kubeConfig, target, opts.namespace, opts.controller, stdout));
    });
}
