/**
 * The command line of `trellis namespace add|remove|list` and `trellis proxy config`. Their
 * bodies (`kube-commands.ts`) and the Kubernetes client they use are imported only when one of
 * them runs: `@kubernetes/client-node` takes about 0.5 s to load, which every other command
 * (`trellis controller --manifests`, `--help`) would pay otherwise.
 */
import type { Command } from 'commander';
import type { KubeConfig } from '@kubernetes/client-node';
import type { CommandOutput } from './kube-commands.js';

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
    .argument('<pod>')
    .description("print a pod's proxy configuration (the controller's /debug/config_dump)")
    .requiredOption('-n, --namespace <ns>', 'namespace of the pod')
    .option('--controller <url>', 'the controller operations server (e.g. through kubectl port-forward -n osm-system svc/osm-controller 9091)', 'http://127.0.0.1:9091')
    .option('--kubeconfig <file>', 'kubeconfig (default: $KUBECONFIG, ~/.kube/config, or in-cluster)')
    .action((pod: string, opts: { namespace: string; controller: string; kubeconfig?: string }) =>
      run('proxy config', opts.kubeconfig, (commands, kubeConfig) => commands.proxyConfig(kubeConfig, pod, opts.namespace, opts.controller, stdout)),
    );
}
