import type { Violation } from '../envoy/validate/index.js';
import type { Proxy, ServiceIdentity } from './types.js';

/** What the controller tracks of a connected proxy's configuration (see `MeshController`). */
export interface ProxyConfigurationState {
  /**
   * The services its current configuration was generated from (`proxyDependencies`): a change
   * to none of them cannot alter it (`affectedBy`). Undefined while it must be generated again
   * in full on every change: it has no configuration yet, the last one failed or broke a rule,
   * or its first one was sent without its invalid resources.
   */
  readonly dependencies: ReadonlySet<string> | undefined;
  /** The validation violations of its latest configuration (empty when it had none). */
  readonly violations: readonly Violation[];
  /** Why its latest generation failed, until one succeeds. */
  readonly lastError: string | undefined;
  /**
   * The MeshSnapshot generation its current snapshot was generated or last updated from (a
   * change that cannot alter it leaves it as it was); undefined before its first one.
   */
  readonly generation: number | undefined;
}

/** A connected proxy: who it is, on which streams, since when, and the state of its configuration. */
export interface ConnectedProxy extends ProxyConfigurationState {
  readonly proxy: Proxy;
  /** When its first current stream opened. */
  readonly connectedSince: Date;
  /** IDs of its open ADS streams (a reconnect may briefly overlap the old stream). */
  readonly streamIds: ReadonlySet<number>;
}

/** The state of a proxy with no configuration yet. */
const UNCONFIGURED: ProxyConfigurationState = { dependencies: undefined, violations: [], lastError: undefined, generation: undefined };

type Entry = { -readonly [K in keyof ConnectedProxy]: ConnectedProxy[K] } & { streamIds: Set<number> };

/**
 * The proxies connected now, by UUID (the mesh catalog's proxy registry): one record per
 * proxy. A proxy is registered when a stream of it opens and unregistered, with its state,
 * when its last stream closes.
 */
export class ProxyRegistry {
  private readonly byUuid = new Map<string, Entry>();
  /** How many registered proxies have each identity. */
  private readonly identities = new Map<ServiceIdentity, number>();

  /**
   * Registers a stream of `proxy` (the proxy of the UUID becomes `proxy`). A proxy whose client
   * type or verification differs from its UUID's registered one gets another configuration:
   * its state starts over.
   */
  register(proxy: Proxy, streamId: number, at: Date): void {
    const entry = this.byUuid.get(proxy.uuid);
    if (entry) {
      entry.streamIds.add(streamId);
      this.count(entry.proxy.identity, -1);
      if ((entry.proxy.clientType ?? 'envoy') !== (proxy.clientType ?? 'envoy') || (entry.proxy.verified === true) !== (proxy.verified === true)) {
        Object.assign(entry, UNCONFIGURED);
      }
      entry.proxy = proxy;
      this.count(proxy.identity, 1);
      return;
    }
    this.byUuid.set(proxy.uuid, { proxy, connectedSince: at, streamIds: new Set([streamId]), ...UNCONFIGURED });
    this.count(proxy.identity, 1);
  }

  /** Whether a registered proxy has `identity`. */
  hasIdentity(identity: ServiceIdentity): boolean {
    return this.identities.has(identity);
  }

  private count(identity: ServiceIdentity, delta: number): void {
    const n = (this.identities.get(identity) ?? 0) + delta;
    if (n > 0) this.identities.set(identity, n);
    else this.identities.delete(identity);
  }

  /**
   * Unregisters one stream of the proxy.
   * @returns how many streams of that proxy remain (0 = it is gone from the registry).
   */
  unregister(uuid: string, streamId: number): number {
    const entry = this.byUuid.get(uuid);
    if (!entry) return 0;
    entry.streamIds.delete(streamId);
    if (entry.streamIds.size === 0) {
      this.byUuid.delete(uuid);
      this.count(entry.proxy.identity, -1);
    }
    return entry.streamIds.size;
  }

  /** Sets some of the configuration state of the proxy with this UUID (nothing when it is not registered). */
  update(uuid: string, state: Partial<ProxyConfigurationState>): void {
    const entry = this.byUuid.get(uuid);
    if (entry) Object.assign(entry, state);
  }

  /** The connected proxy with this UUID, or undefined. */
  get(uuid: string): ConnectedProxy | undefined {
    return this.byUuid.get(uuid);
  }

  /** Every connected proxy, sorted by identity then UUID. */
  connected(): ConnectedProxy[] {
    return [...this.byUuid.values()].sort((a, b) =>
      a.proxy.identity !== b.proxy.identity ? (a.proxy.identity < b.proxy.identity ? -1 : 1) : a.proxy.uuid < b.proxy.uuid ? -1 : 1,
    );
  }

  /** Every connected proxy's {@link Proxy}. */
  proxies(): Proxy[] {
    return this.connected().map((c) => c.proxy);
  }
}
