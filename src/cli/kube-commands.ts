/**
 * The bodies of `trellis namespace add|remove|list` and `trellis proxy config` (the Kubernetes
 * API calls). `kube-command-line.ts` registers the commands and imports this module, and with
 * it `@kubernetes/client-node`, only when one of them runs.
 */
import { CoreV1Api, PatchStrategy, setHeaderOptions, type KubeConfig, type V1Namespace } from '@kubernetes/client-node';
import { SIDECAR_INJECTION_ANNOTATION } from '../injector/inject.js';
import { PROXY_UUID_LABEL } from '../proxy/pod-check.js';
import { MONITORED_BY_LABEL } from '../sources/kubernetes/kubernetes-source.js';
import { apiErrorMessage, apiStatusCode } from '../util/kube-api.js';
import { printConfigDump } from './proxies-command.js';

/** Where a command writes: standard output for results. */
export interface CommandOutput {
  write(text: string): void;
}

/**
 * `trellis namespace add NS…`: labels each namespace `openservicemesh.io/monitored-by=<mesh>`
 * and annotates it `openservicemesh.io/sidecar-injection: enabled` (`disabled` with
 * `disableSidecarInjection`) with a JSON merge PATCH, as `osm namespace add` does: the sidecar
 * injector then injects its new pods.
 * @throws Error when a namespace does not exist, is already in another mesh, or the API refuses.
 */
export async function namespaceAdd(
  kubeConfig: KubeConfig,
  names: readonly string[],
  meshName: string,
  out: CommandOutput,
  options: { disableSidecarInjection?: boolean } = {},
): Promise<void> {
  const api = kubeConfig.makeApiClient(CoreV1Api);
  for (const name of names) {
    const current = await readNamespace(api, name);
    const other = current.metadata?.labels?.[MONITORED_BY_LABEL];
    if (other === meshName) {
      out.write(`namespace ${name} is already part of mesh ${meshName}\n`);
      continue;
    }
    if (other !== undefined) throw new Error(`namespace ${name} is already part of mesh ${other}; remove it from that mesh first`);
    const injection = options.disableSidecarInjection === true ? 'disabled' : 'enabled';
    await patchMetadata(api, name, { labels: { [MONITORED_BY_LABEL]: meshName }, annotations: { [SIDECAR_INJECTION_ANNOTATION]: injection } });
    out.write(`namespace ${name} added to mesh ${meshName} (sidecar injection ${injection})\n`);
  }
}

/**
 * `trellis namespace remove NS…`: removes the monitoring label and the sidecar-injection
 * annotation (merge PATCH with `null`) from each namespace that is in `meshName`.
 * @throws Error when a namespace does not exist, belongs to another mesh, or the API refuses.
 */
export async function namespaceRemove(kubeConfig: KubeConfig, names: readonly string[], meshName: string, out: CommandOutput): Promise<void> {
  const api = kubeConfig.makeApiClient(CoreV1Api);
  for (const name of names) {
    const current = await readNamespace(api, name);
    const mesh = current.metadata?.labels?.[MONITORED_BY_LABEL];
    if (mesh === undefined) {
      out.write(`namespace ${name} is not part of any mesh\n`);
      continue;
    }
    if (mesh !== meshName) throw new Error(`namespace ${name} is part of mesh ${mesh}, not ${meshName}`);
    await patchMetadata(api, name, { labels: { [MONITORED_BY_LABEL]: null }, annotations: { [SIDECAR_INJECTION_ANNOTATION]: null } });
    out.write(`namespace ${name} removed from mesh ${meshName}\n`);
  }
}

/** `trellis namespace list`: the namespaces labelled for `meshName`, as a two-column table. */
export async function namespaceList(kubeConfig: KubeConfig, meshName: string, out: CommandOutput): Promise<void> {
  const api = kubeConfig.makeApiClient(CoreV1Api);
  let list;
  try {
    list = await api.listNamespace({ labelSelector: `${MONITORED_BY_LABEL}=${meshName}` });
  } catch (err) {
    throw new Error(`cannot list namespaces: ${apiErrorMessage(err)}`);
  }
  const names = list.items.map((n) => n.metadata?.name ?? '').sort();
  if (names.length === 0) {
    out.write(`no namespaces in mesh ${meshName}\n`);
    return;
  }
  const width = Math.max('NAMESPACE'.length, ...names.map((n) => n.length)) + 3;
  out.write(`${'NAMESPACE'.padEnd(width)}MESH\n`);
  for (const n of names) out.write(`${n.padEnd(width)}${meshName}\n`);
}

/**
 * `trellis proxy config POD -n NS --kubernetes`: finds the pod's `osm-proxy-uuid` label through the API, then
 * GETs `/debug/config_dump?proxy=<uuid>` from the controller's operations server and prints it.
 * @param controllerUrl base URL of the controller's operations server, e.g. `http://127.0.0.1:9091`.
 * @throws Error when the pod does not exist or has no proxy, or the controller does not know it.
 */
export async function proxyConfig(kubeConfig: KubeConfig, pod: string, namespace: string, controllerUrl: string, out: CommandOutput): Promise<void> {
  const api = kubeConfig.makeApiClient(CoreV1Api);
  let uuid: string | undefined;
  try {
    uuid = (await api.readNamespacedPod({ name: pod, namespace })).metadata?.labels?.[PROXY_UUID_LABEL];
  } catch (err) {
    throw new Error(apiStatusCode(err) === 404 ? `pod ${namespace}/${pod} not found` : `cannot read pod ${namespace}/${pod}: ${apiErrorMessage(err)}`);
  }
  if (!uuid) throw new Error(`pod ${namespace}/${pod} has no ${PROXY_UUID_LABEL} label: it has no mesh proxy`);
  await printConfigDump(controllerUrl, uuid, `proxy ${uuid} of pod ${namespace}/${pod}`, out);
}

async function readNamespace(api: CoreV1Api, name: string): Promise<V1Namespace> {
  try {
    return await api.readNamespace({ name });
  } catch (err) {
    throw new Error(apiStatusCode(err) === 404 ? `namespace ${name} not found` : `cannot read namespace ${name}: ${apiErrorMessage(err)}`);
  }
}

async function patchMetadata(api: CoreV1Api, name: string, metadata: { labels: Record<string, string | null>; annotations: Record<string, string | null> }): Promise<void> {
  try {
    await api.patchNamespace({ name, body: { metadata } }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch));
  } catch (err) {
    throw new Error(`cannot update namespace ${name}: ${apiErrorMessage(err)}`);
  }
}
