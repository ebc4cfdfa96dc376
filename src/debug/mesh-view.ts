import type { MeshSnapshot } from '../catalog/types.js';
import type { ConnectedProxy } from '../proxy/registry.js';
import type { ServiceIdentity } from '../proxy/types.js';
import type { ProxySnapshot } from '../xds/cache/types.js';
import type { StreamInfo } from '../xds/server/stream-common.js';
import { typeSync, type TypeSyncState } from './proxy-sync.js';

/** Problems listed by text in {@link MeshView.problems} (the counts are always complete). */
export const MESH_VIEW_PROBLEM_TEXTS = 50;

/** One service of the mesh (every port of a Kubernetes Service together), with the identities behind it. */
export interface MeshViewService {
  readonly namespace: string;
  readonly name: string;
  readonly ports: readonly { readonly port: number; readonly targetPort: number; readonly protocol: string }[];
  /** Service identities (`<ns>/<sa>`) whose workloads back it. */
  readonly identities: readonly string[];
  /** Endpoints of all its ports. */
  readonly endpoints: number;
}

/** One identity (service account) of the mesh: a node of the graph. */
export interface MeshViewIdentity {
  /** `<namespace>/<serviceaccount>`. */
  readonly name: string;
  /** Services (`<ns>/<svc>`) its workloads back. */
  readonly services: readonly string[];
  /** Connected proxies of this identity. */
  readonly proxies: number;
}

/** An SMI access edge: `source` may talk to `destination`'s services as `trafficTarget` says. */
export interface MeshViewEdge {
  readonly source: string;
  readonly destination: string;
  /** `<namespace>/<name>` of the TrafficTarget. */
  readonly trafficTarget: string;
  /** HTTP matches allowed (names, `<ns>/<HTTPRouteGroup>/<match>`); empty without an HTTPRouteGroup rule. */
  readonly httpMatches: readonly string[];
  /** TCP ports allowed by TCPRoute rules: `any`, a list, or null without a TCPRoute rule. */
  readonly tcpPorts: readonly number[] | 'any' | null;
}

/** One connected proxy with the state of each xDS type of its streams. */
export interface MeshViewProxy {
  readonly uuid: string;
  readonly identity: string;
  readonly clientType: string;
  readonly connectedSince: string;
  /** Per type (`CDS`, `EDS`, …): its state (`typeSync`, as `/debug/proxies` and `trellis proxies` say), over every stream of the proxy (the worst wins). */
  readonly types: Readonly<Record<string, TypeSyncState>>;
  /** The most recent NACK of any type, or null. */
  readonly lastNack: { readonly type: string; readonly version: string; readonly message: string; readonly at: string } | null;
}

/**
 * The `/debug/mesh` view the page draws: who is in the mesh and who may talk to whom. In
 * permissive mode `edges` is empty and `permissive` true: every identity may reach every
 * service (drawn as such, not as N² edges).
 */
export interface MeshView {
  readonly meshName: string;
  readonly generation: number;
  readonly permissive: boolean;
  readonly services: readonly MeshViewService[];
  readonly identities: readonly MeshViewIdentity[];
  readonly edges: readonly MeshViewEdge[];
  readonly trafficSplits: readonly { readonly name: string; readonly namespace: string; readonly service: string; readonly backends: readonly { readonly service: string; readonly weight: number }[] }[];
  readonly proxies: readonly MeshViewProxy[];
  /** `/debug/policies`' `status` array (policy status, computed elsewhere) when it has one, else null. */
  readonly policyStatus: readonly unknown[] | null;
  /** Counts of what is wrong, and the first {@link MESH_VIEW_PROBLEM_TEXTS} texts. */
  readonly problems: {
    readonly manifestErrors: number;
    readonly manifestWarnings: number;
    readonly policyProblems: number;
    readonly validationFailures: number;
    readonly texts: readonly string[];
  };
}

/** What {@link meshView} is made of. */
export interface MeshViewInput {
  readonly snapshot: MeshSnapshot;
  /** The mesh's identities: service accounts of monitored namespaces and identities behind services (`MeshController.meshIdentities`). */
  readonly meshIdentities: ReadonlySet<string>;
  readonly connected: readonly ConnectedProxy[];
  readonly streams: readonly StreamInfo[];
  /** A proxy's latest snapshot, by UUID (the snapshot cache's): what each type's state is compared with. */
  readonly snapshotOf: (uuid: string) => ProxySnapshot | undefined;
  /** `/debug/policies`' body (its `status`, when an array, is passed through). */
  readonly policies: unknown;
  /** Formatted problems of each kind. */
  readonly manifestErrors: readonly string[];
  readonly manifestWarnings: number;
  readonly policyProblems: readonly string[];
  readonly validationFailures: readonly string[];
}

const STATE_RANK: Readonly<Record<TypeSyncState, number>> = { synced: 0, stale: 1, nacked: 2 };

/**
 * The mesh as the page draws it, from the controller's MeshSnapshot, its registry and the ADS
 * server's streams. Linear in services, identities, policies' sources and streams' types.
 */
export function meshView(input: MeshViewInput): MeshView {
  const { snapshot } = input;
  const services = new Map<string, { namespace: string; name: string; ports: MeshViewService['ports'][number][]; endpoints: number }>();
  for (const s of snapshot.services) {
    const key = `${s.namespace}/${s.name}`;
    let entry = services.get(key);
    if (!entry) services.set(key, (entry = { namespace: s.namespace, name: s.name, ports: [], endpoints: 0 }));
    entry.ports.push({ port: s.port, targetPort: s.targetPort, protocol: s.protocol });
    entry.endpoints += snapshot.endpoints.get(`${key}|${s.targetPort}`)?.length ?? 0;
  }
  const proxiesByIdentity = new Map<string, number>();
  for (const c of input.connected) proxiesByIdentity.set(c.proxy.identity, (proxiesByIdentity.get(c.proxy.identity) ?? 0) + 1);

  const identityNames = new Set<string>([...input.meshIdentities, ...snapshot.servicesByIdentity.keys()]);
  for (const t of snapshot.trafficTargets) {
    identityNames.add(t.destination);
    for (const s of t.sources) identityNames.add(s);
  }
  for (const identity of proxiesByIdentity.keys()) identityNames.add(identity);
  const identities = [...identityNames].sort().map((name) => ({
    name,
    services: [...(snapshot.servicesByIdentity.get(name as ServiceIdentity) ?? [])],
    proxies: proxiesByIdentity.get(name) ?? 0,
  }));

  const permissive = snapshot.settings.permissiveTrafficPolicyMode;
  const edges: MeshViewEdge[] = [];
  if (!permissive) {
    for (const t of snapshot.trafficTargets) {
      for (const source of t.sources) {
        edges.push({ source, destination: t.destination, trafficTarget: t.name, httpMatches: t.httpMatches.map((m) => m.name), tcpPorts: t.tcpPorts ?? null });
      }
    }
  }

  const streamsByUuid = new Map<string, StreamInfo[]>();
  for (const s of input.streams) {
    const list = streamsByUuid.get(s.proxy.uuid);
    if (list) list.push(s);
    else streamsByUuid.set(s.proxy.uuid, [s]);
  }
  const proxies = input.connected.map((c): MeshViewProxy => {
    const types: Record<string, TypeSyncState> = {};
    let lastNack: MeshViewProxy['lastNack'] = null;
    const latest = input.snapshotOf(c.proxy.uuid);
    for (const stream of streamsByUuid.get(c.proxy.uuid) ?? []) {
      for (const t of stream.types) {
        const { state } = typeSync(t, stream.mode, latest);
        const before = types[t.type];
        if (before === undefined || STATE_RANK[state] > STATE_RANK[before]) types[t.type] = state;
        if (t.lastNack && (!lastNack || t.lastNack.at.toISOString() > lastNack.at)) {
          lastNack = { type: t.type, version: t.lastNack.version, message: t.lastNack.message, at: t.lastNack.at.toISOString() };
        }
      }
    }
    return { uuid: c.proxy.uuid, identity: c.proxy.identity, clientType: c.proxy.clientType ?? 'envoy', connectedSince: c.connectedSince.toISOString(), types, lastNack };
  });

  const status = (input.policies as { status?: unknown } | null | undefined)?.status;
  const texts = [...input.manifestErrors, ...input.policyProblems, ...input.validationFailures].slice(0, MESH_VIEW_PROBLEM_TEXTS);
  return {
    meshName: snapshot.meshName,
    generation: snapshot.generation,
    permissive,
    services: [...services.values()].map((s) => ({ ...s, identities: [...(snapshot.identitiesByService.get(`${s.namespace}/${s.name}`) ?? [])] })),
    identities,
    edges,
    trafficSplits: snapshot.trafficSplits.map((s) => ({ name: s.name, namespace: s.namespace, service: s.service, backends: s.backends.map((b) => ({ service: b.service, weight: b.weight })) })),
    proxies,
    policyStatus: Array.isArray(status) ? status : null,
    problems: {
      manifestErrors: input.manifestErrors.length,
      manifestWarnings: input.manifestWarnings,
      policyProblems: input.policyProblems.length,
      validationFailures: input.validationFailures.length,
      texts,
    },
  };
}
