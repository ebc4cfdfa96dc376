/**
 * The incremental (delta) ADS twin of {@link LeanSidecar}, for `npm run bench -- --delta`: one
 * `DeltaAggregatedResources` stream over real gRPC; wildcard CDS and LDS, and subscriptions to
 * the EDS, RDS and SDS names the clusters and listeners it holds refer to, changed by
 * `resource_names_subscribe`/`_unsubscribe` as those change (Envoy's `xds_protocol`,
 * "Incremental xDS"); ACKs every response. It decodes as little as the SotW sidecar (only
 * the Clusters and Listeners it receives, to find those names) and records times, not
 * configuration. What a Cluster or Listener refers to is read once per resource version
 * (its hash) by all the sidecars sharing a {@link ReferenceCache}, and they share the result:
 * a thousand sidecars holding the same thousand clusters (permissive mode) each decoding them
 * and keeping their own two sets per cluster made the load generator, not the controller, the
 * bound of `--delta` runs (35 s of its CPU for the N=S=1000 mesh-wide change, 15 s now).
 */
import type protobuf from 'protobufjs';
import { messageType } from '../src/api/codec.js';
import { TypeUrl } from '../src/api/type-urls.js';
import { SidecarStream, clusterReferences, listenerReferences, type SidecarObserver } from './lean-sidecar.js';

/** The delta ADS method path. */
export const DELTA_ADS_METHOD = '/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources';

/** The delta request and response types (`messageType` looks each up once). */
const requestType = (): protobuf.Type => messageType('envoy.service.discovery.v3.DeltaDiscoveryRequest');
const responseType = (): protobuf.Type => messageType('envoy.service.discovery.v3.DeltaDiscoveryResponse');

interface DecodedDeltaResponse {
  type_url?: string;
  nonce?: string;
  resources?: { name?: string; version?: string; resource?: { type_url?: string; value?: Uint8Array } }[];
  removed_resources?: string[];
}

/** The names a held Cluster or Listener refers to: its EDS or RDS names, and its secrets. */
interface References {
  readonly names: readonly string[];
  readonly secrets: readonly string[];
}

/** Most entries a {@link ReferenceCache} keeps; when full it starts again empty. */
export const MAX_CACHED_REFERENCES = 100_000;

/**
 * What each Cluster and Listener version refers to, read once and shared by the sidecars that
 * hold it: keyed by type, name and the resource's `version` (the controller's hash of its
 * bytes, so one version is one encoding). At most {@link MAX_CACHED_REFERENCES} entries.
 */
export class ReferenceCache {
  private readonly entries = new Map<string, References>();
  private decodes = 0;

  /** How many resources were decoded (a version the cache did not hold, or a resource without one). */
  get decoded(): number {
    return this.decodes;
  }

  /** What `resource` (of `type`, named `name`, at `version`) refers to, decoded only when no sidecar did yet. */
  get(type: string, name: string, version: string | undefined, resource: { type_url?: string; value?: Uint8Array }): References {
    const key = version ? `${type}\n${name}\n${version}` : undefined;
    const cached = key === undefined ? undefined : this.entries.get(key);
    if (cached) return cached;
    this.decodes++;
    const refs = type === TypeUrl.Cluster ? clusterReferences([resource]) : listenerReferences([resource]);
    const found: References = { names: [...('eds' in refs ? refs.eds : refs.rds)], secrets: [...refs.secrets] };
    if (key !== undefined) {
      if (this.entries.size >= MAX_CACHED_REFERENCES) this.entries.clear();
      this.entries.set(key, found);
    }
    return found;
  }
}

/** One simulated sidecar on its own channel (its own TCP connection), over delta ADS. */
export class LeanDeltaSidecar extends SidecarStream {
  /** What each held Cluster and Listener refers to, by resource name. */
  private readonly clusters = new Map<string, References>();
  private readonly listeners = new Map<string, References>();

  /**
   * @param nodeId the proxy's CommonName (node.id; on mTLS the certificate says the same).
   * @param references shared with the other sidecars of the load generator (default: its own).
   */
  constructor(
    nodeId: string,
    observer: SidecarObserver,
    private readonly references: ReferenceCache = new ReferenceCache(),
  ) {
    super(nodeId, observer, DELTA_ADS_METHOD);
  }

  /** A first request with no names is the wildcard subscription (LDS and CDS). */
  protected requestWildcards(): void {
    this.send({ type_url: TypeUrl.Cluster });
    this.send({ type_url: TypeUrl.Listener });
  }

  private send(req: Record<string, unknown>): void {
    if (!this.call || this.ended) return;
    const t = requestType();
    this.call.write(Buffer.from(t.encode(t.fromObject(this.withNode(req))).finish()));
  }

  protected onData(buf: Buffer): void {
    const res = responseType().decode(buf) as DecodedDeltaResponse;
    const type = res.type_url ?? '';
    const updates = res.resources ?? [];
    const removed = res.removed_resources ?? [];
    if (type === TypeUrl.Cluster || type === TypeUrl.Listener) {
      const held = type === TypeUrl.Cluster ? this.clusters : this.listeners;
      for (const r of updates) {
        if (!r.name || !r.resource) continue;
        held.set(r.name, this.references.get(type, r.name, r.version, r.resource));
      }
      for (const name of removed) held.delete(name);
      if (type === TypeUrl.Cluster) this.cdsAcked = true;
      else this.ldsAcked = true;
    } else {
      let have = this.have.get(type);
      if (!have) this.have.set(type, (have = new Set()));
      for (const r of updates) if (r.name) have.add(r.name);
      for (const name of removed) have.delete(name);
    }
    this.send({ type_url: type, response_nonce: res.nonce ?? '' });
    if (type === TypeUrl.Cluster) this.resubscribe(TypeUrl.ClusterLoadAssignment, this.referenced(this.clusters, 'names'));
    if (type === TypeUrl.Listener) this.resubscribe(TypeUrl.RouteConfiguration, this.referenced(this.listeners, 'names'));
    if (type === TypeUrl.Cluster || type === TypeUrl.Listener) {
      const secrets = this.referenced(this.clusters, 'secrets');
      for (const s of this.referenced(this.listeners, 'secrets')) secrets.add(s);
      this.resubscribe(TypeUrl.Secret, secrets);
    }
    this.responded(type, buf.length);
  }

  private referenced(held: ReadonlyMap<string, References>, which: keyof References): Set<string> {
    const out = new Set<string>();
    for (const refs of held.values()) for (const n of refs[which]) out.add(n);
    return out;
  }

  /** Subscribes to the names of `wanted` not subscribed yet, unsubscribes the ones no longer wanted (one request, if any). */
  private resubscribe(type: string, wanted: Set<string>): void {
    let current = this.wanted.get(type);
    if (!current) this.wanted.set(type, (current = new Set()));
    const subscribe = [...wanted].filter((n) => !current.has(n));
    const unsubscribe = [...current].filter((n) => !wanted.has(n));
    if (subscribe.length === 0 && unsubscribe.length === 0) return;
    for (const n of subscribe) current.add(n);
    for (const n of unsubscribe) current.delete(n);
    const have = this.have.get(type);
    if (have) for (const n of unsubscribe) have.delete(n);
    this.send({ type_url: type, resource_names_subscribe: subscribe.sort(), resource_names_unsubscribe: unsubscribe.sort() });
  }
}
