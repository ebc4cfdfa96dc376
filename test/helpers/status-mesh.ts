/**
 * What the policy status tests share: the example's TrafficSplit with other weights, and a
 * sidecar of the mesh (a certificate of the controller's CA from `trellis bootstrap`'s code)
 * driven by a real gRPC client over mTLS.
 */
import * as grpc from '@grpc/grpc-js';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { writeProxyBootstrap } from '../../src/cli/bootstrap-command.js';
import type { DiscoveryResponse__Output } from '../../src/xds/server/discovery-types.js';
import { AdsTestClient, type AdsTestStream } from './ads-client.js';
import { SimulatedSidecar } from './sidecar.js';

/** examples/bookstore's `split.yaml` with these weights for bookstore-v1 and bookstore-v2. */
export function splitYaml(v1: number, v2: number): string {
  return `apiVersion: split.smi-spec.io/v1alpha2
kind: TrafficSplit
metadata:
  name: bookstore-split
  namespace: bookstore
spec:
  service: bookstore.bookstore
  backends:
    - service: bookstore-v1
      weight: ${v1}
    - service: bookstore-v2
      weight: ${v2}
`;
}

/** A proxy of the mesh connected over mTLS: its client (to close), its raw stream, UUID and CommonName. */
export interface MeshProxyStream {
  readonly client: AdsTestClient;
  readonly stream: AdsTestStream;
  readonly uuid: string;
}

/**
 * Issues a certificate for `namespace/serviceAccount` from the CA in `stateDir` (into `out`) and
 * opens an ADS stream with it to `xdsAddress` (nothing requested yet).
 */
export async function openMeshStream(options: { stateDir: string; xdsAddress: string; out: string; namespace: string; serviceAccount: string }): Promise<MeshProxyStream> {
  const result = await writeProxyBootstrap({ namespace: options.namespace, serviceAccount: options.serviceAccount, out: options.out, stateDir: options.stateDir, xdsAddress: options.xdsAddress });
  const credentials = grpc.credentials.createSsl(await readFile(result.files.ca), await readFile(result.files.key), await readFile(result.files.cert));
  const client = new AdsTestClient(options.xdsAddress, credentials);
  return { client, stream: client.openStream(result.commonName), uuid: result.commonName.split('.')[0]! };
}

/** {@link openMeshStream} driven by a {@link SimulatedSidecar} (ACKing, or NACKing what `reject` names). */
export async function connectMeshSidecar(
  options: Parameters<typeof openMeshStream>[0] & { reject?: (response: DiscoveryResponse__Output) => string | undefined },
): Promise<MeshProxyStream & { sidecar: SimulatedSidecar }> {
  const opened = await openMeshStream({ ...options, out: path.resolve(options.out) });
  return { ...opened, sidecar: new SimulatedSidecar(opened.stream, { reject: options.reject }).start() };
}
