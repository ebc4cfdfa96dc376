import { TypeUrl } from '../../src/api/type-urls.js';
import type { DiscoveryResponse__Output } from '../../src/xds/server/discovery-types.js';
import { decodeResources, type AdsTestStream } from './ads-client.js';
import { Waiters } from './wait.js';

type Decoded = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

/**
 * Drives an ADS stream the way an Envoy sidecar does: wildcard CDS and LDS, EDS for every EDS
 * cluster, RDS for every route configuration an HTTP connection manager names, SDS for every
 * secret a TLS context names; ACKs every response and keeps the current resources by type.
 */
export class SimulatedSidecar {
  /** Current resources by type URL and name (decoded, Envoy field names). */
  readonly resources = new Map<string, Map<string, Decoded>>();
  /** Every response in arrival order, with its type URL. */
  readonly log: DiscoveryResponse__Output[] = [];
  private readonly subscribed = new Map<string, string[]>();
  private readonly waiters = new Waiters();
  private stopped = false;

  /**
   * @param options.reject when it returns a message for a response, the sidecar NACKs that
   *   response with it (as Envoy does a configuration it refuses) instead of applying and ACKing it.
   */
  constructor(
    readonly stream: AdsTestStream,
    private readonly options: { reject?: (response: DiscoveryResponse__Output) => string | undefined } = {},
  ) {}

  /** Sends the first requests (CDS and LDS wildcard) and starts answering responses. */
  start(): this {
    this.stream.request(TypeUrl.Cluster);
    this.stream.request(TypeUrl.Listener);
    void this.loop();
    return this;
  }

  private async loop(): Promise<void> {
    while (!this.stopped) {
      let response: DiscoveryResponse__Output;
      try {
        response = await this.stream.next(60_000);
      } catch {
        this.stopped = true;
        this.wake();
        return;
      }
      this.apply(response);
    }
  }

  private apply(response: DiscoveryResponse__Output): void {
    const type = response.type_url ?? '';
    this.log.push(response);
    const rejection = this.options.reject?.(response);
    if (rejection !== undefined) {
      this.stream.nack(response, rejection);
      this.wake();
      return;
    }
    const decoded = decodeResources(response);
    const byName = new Map<string, Decoded>(decoded.map((r) => [String(r.name ?? r.cluster_name), r]));
    if (type === TypeUrl.Cluster || type === TypeUrl.Listener) this.resources.set(type, byName);
    else this.resources.set(type, new Map([...(this.resources.get(type) ?? new Map()), ...byName]));
    this.stream.ack(response);
    if (type === TypeUrl.Cluster) {
      this.subscribe(TypeUrl.ClusterLoadAssignment, decoded.filter((c) => c.type === 'EDS').map((c) => String(c.name)));
      this.subscribe(TypeUrl.Secret, secretNames(decoded));
    }
    if (type === TypeUrl.Listener) {
      this.subscribe(TypeUrl.RouteConfiguration, routeConfigNames(decoded));
      this.subscribe(TypeUrl.Secret, secretNames(decoded));
    }
    this.wake();
  }

  private subscribe(type: TypeUrl, names: string[]): void {
    const current = this.subscribed.get(type) ?? [];
    const wanted = [...new Set(type === TypeUrl.Secret ? [...current, ...names] : names)].sort();
    if (JSON.stringify(wanted) === JSON.stringify(current)) return;
    this.subscribed.set(type, wanted);
    const kept = this.resources.get(type);
    if (kept) for (const name of [...kept.keys()]) if (!wanted.includes(name)) kept.delete(name);
    const last = [...this.log].reverse().find((r) => r.type_url === type);
    this.stream.send({
      type_url: type,
      resource_names: wanted,
      version_info: last?.version_info ?? '',
      response_nonce: last?.nonce ?? '',
    });
  }

  private wake(): void {
    this.waiters.wake();
  }

  /** The current resource of `type` named `name`, or undefined. */
  get(type: TypeUrl, name: string): Decoded | undefined {
    return this.resources.get(type)?.get(name);
  }

  /** Names of the current resources of `type`, sorted. */
  names(type: TypeUrl): string[] {
    return [...(this.resources.get(type)?.keys() ?? [])].sort();
  }

  /**
   * Resolves once `predicate` holds for the current resources.
   * @throws Error naming `what` after `timeoutMs`, or when the stream ended.
   */
  async until(predicate: (s: this) => boolean, what: string, timeoutMs = 5000): Promise<void> {
    await this.waiters.until(() => predicate(this), timeoutMs, what, () => (this.stopped ? 'stream ended' : undefined));
  }

  /** Stops answering and cancels the stream. */
  stop(): void {
    this.stopped = true;
    this.stream.cancel();
  }
}

function walk(value: unknown, visit: (obj: Decoded) => void): void {
  if (Array.isArray(value)) value.forEach((v) => walk(v, visit));
  else if (value && typeof value === 'object') {
    visit(value as Decoded);
    for (const v of Object.values(value)) walk(v, visit);
  }
}

function routeConfigNames(listeners: Decoded[]): string[] {
  const names = new Set<string>();
  walk(listeners, (o) => {
    if (o.rds?.route_config_name) names.add(o.rds.route_config_name);
  });
  return [...names];
}

function secretNames(resources: Decoded[]): string[] {
  const names = new Set<string>();
  walk(resources, (o) => {
    for (const c of o.tls_certificate_sds_secret_configs ?? []) names.add(c.name);
    if (o.validation_context_sds_secret_config?.name) names.add(o.validation_context_sds_secret_config.name);
  });
  return [...names];
}
