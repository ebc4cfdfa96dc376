import type { Proxy } from './types.js';

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

  /** Registers a stream of `proxy`. */
  register(proxy: Proxy, streamId: number, at: Date): void {
    const entry = this.byUuid.get(proxy.uuid);
    if (entry) {
      entry.streamIds.add(streamId);
      entry.proxy = proxy;
      return;
    }
    this.byUuid.set(proxy.uuid, { proxy, connectedSince: at, streamIds: new Set([streamId]) });
  }

  /**
   * Unregisters one stream of the proxy.
   * @returns how many streams of that proxy remain (0 = it is gone from the registry).
   */
  unregister(uuid: string, streamId: number): number {
    const entry = this.byUuid.get(uuid);
    if (!entry) return 0;
    entry.streamIds.delete(streamId);
    if (entry.streamIds.size === 0) this.byUuid.delete(uuid);
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
