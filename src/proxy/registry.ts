import type { Proxy, ServiceIdentity } from './types.js';

/** A connected proxy: who it is, on which streams, since when. */
export interface ConnectedProxy {
  readonly proxy: Proxy;
  /** When its first current stream opened. */
  readonly connectedSince: Date;
  /** IDs of its open ADS streams (a reconnect may briefly overlap the old stream). */
  readonly streamIds: ReadonlySet<number>;
}

/**
 * The proxies connected now, by UUID (the mesh catalog's proxy registry). A proxy is
 * registered when a stream of it opens and unregistered when its last stream closes.
 */
export class ProxyRegistry {
  private readonly byUuid = new Map<string, { proxy: Proxy; connectedSince: Date; streamIds: Set<number> }>();
  /** How many registered proxies have each identity. */
  private readonly identities = new Map<ServiceIdentity, number>();

  /** Registers a stream of `proxy` (the proxy of the UUID becomes `proxy`). */
  register(proxy: Proxy, streamId: number, at: Date): void {
    const entry = this.byUuid.get(proxy.uuid);
    if (entry) {
      entry.streamIds.add(streamId);
      this.count(entry.proxy.identity, -1);
      entry.proxy = proxy;
      this.count(proxy.identity, 1);
      return;
    }
    this.byUuid.set(proxy.uuid, { proxy, connectedSince: at, streamIds: new Set([streamId]) });
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
