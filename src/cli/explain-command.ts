/**
 * `trellis explain`: whether a request from a source identity (or pod) to a service port is
 * allowed, and why, from the running controller's MeshSnapshot (`/debug/explain`) or offline
 * from a manifests directory (`--manifests DIR`, loaded once as the controller loads it).
 * Exit status: 0 allowed, 1 denied (or allowed by only some of a split's backends), 2 when the
 * question cannot be answered (an unknown identity, pod, service or port, a bad argument, a
 * controller that cannot be reached, a directory that cannot be read).
 */
import { Command, Option } from 'commander';
import { ExplainError, type Explanation, type ExplainQuery } from '../explain/explain.js';
import { explainQueryParams, parseHeaderArguments } from '../explain/http.js';
import { getFromController } from './controller-http.js';

/** `trellis explain`'s exit status for an answer: 0 allowed, 1 denied or partial. */
export function explainExitCode(explanation: Pick<Explanation, 'decision'>): 0 | 1 {
  return explanation.decision === 'allowed' ? 0 : 1;
}

/** Exit status when the question cannot be answered. */
export const EXPLAIN_ERROR_EXIT = 2;

/** Asks the controller's `/debug/explain`. @throws ExplainError for its 400/404 answers, Error when it cannot be reached or fails. */
async function explainOnline(controller: string, query: ExplainQuery): Promise<Explanation> {
  const url = new URL('/debug/explain', controller);
  url.search = explainQueryParams(query).toString();
  const { status, text } = await getFromController(controller, `${url.pathname}${url.search}`, { timeoutMs: 10_000, unreachableHint: ' (start it, or pass --manifests DIR to explain offline)' });
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new Error(`the controller at ${controller} answered ${status} with no JSON: ${text.slice(0, 200).trim()}`);
  }
  const error = (body as { error?: unknown }).error;
  if (status === 400 || status === 404) throw new ExplainError(status === 404 ? 'unknown' : 'invalid', String(error));
  if (status < 200 || status > 299) throw new Error(`the controller at ${controller} answered ${status}: ${typeof error === 'string' ? error : text.trim()}`);
  return body as Explanation;
}

/** Explains offline: loads `dir` once (the controller's loader and builder), reports its manifest errors on stderr. */
async function explainOffline(dir: string, meshName: string, query: ExplainQuery): Promise<Explanation> {
  const [{ loadMeshDirectory }, { explainRequest }] = await Promise.all([import('../offline/mesh-directory.js'), import('../explain/explain.js')]);
  const mesh = await loadMeshDirectory({ dir, meshName });
  if (mesh.manifestErrors.length > 0) {
    process.stderr.write(`trellis explain: ${mesh.manifestErrors.length} manifest error(s) in ${dir}: the documents concerned are left out (trellis validate ${dir} lists them)\n`);
  }
  return explainRequest(mesh.snapshot, mesh.store, query);
}

/** Adds `trellis explain` to `program`. */
export function registerExplainCommands(program: Command): void {
  program
    .command('explain')
    .description('is a request from a source identity to a service port allowed, and why (exit 0 allowed, 1 denied, 2 unknown names or errors)')
    .addOption(new Option('--from <ns/sa>', 'the source identity: NAMESPACE/SERVICEACCOUNT').conflicts('fromPod'))
    .option('--from-pod <ns/pod>', "the source pod: NAMESPACE/POD (its service account and address)")
    .requiredOption('--to <svc.ns:port>', 'the destination: SERVICE.NAMESPACE:PORT (the Service port the client dials)')
    .option('--path <path>', 'request path', '/')
    .option('--method <method>', 'request method', 'GET')
    .option('--header <name=value>', 'a request header (repeatable); host=… sets the Host (default SERVICE.NAMESPACE:PORT)', (v: string, all: string[]) => [...all, v], [] as string[])
    .addOption(new Option('--output <format>', 'output format').choices(['text', 'json']).default('text'))
    .addOption(new Option('--controller <url>', "the controller's operations server").default('http://127.0.0.1:9091').conflicts('manifests'))
    .option('--manifests <dir>', 'explain offline from this manifests directory instead of asking a controller')
    .option('--mesh-name <name>', 'with --manifests: the mesh name (namespaces labelled openservicemesh.io/monitored-by=<name>)', 'osm')
    .action(async (opts: { from?: string; fromPod?: string; to: string; path: string; method: string; header: string[]; output: 'text' | 'json'; controller: string; manifests?: string; meshName: string }) => {
      try {
        const query: ExplainQuery = { from: opts.from, fromPod: opts.fromPod, to: opts.to, path: opts.path, method: opts.method, headers: parseHeaderArguments(opts.header) };
        if ((query.from === undefined) === (query.fromPod === undefined)) throw new ExplainError('invalid', 'give exactly one of --from NAMESPACE/SERVICEACCOUNT and --from-pod NAMESPACE/POD');
        const explanation = opts.manifests !== undefined ? await explainOffline(opts.manifests, opts.meshName, query) : await explainOnline(opts.controller, query);
        if (opts.output === 'json') process.stdout.write(`${JSON.stringify(explanation, null, 2)}\n`);
        else process.stdout.write((await import('../explain/format.js')).formatExplanation(explanation));
        process.exitCode = explainExitCode(explanation);
      } catch (err) {
        process.stderr.write(`trellis explain: ${err instanceof Error ? err.message : String(err)}\n`);
        process.exitCode = EXPLAIN_ERROR_EXIT;
      }
    });
}
