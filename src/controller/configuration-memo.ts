/**
 * The memo of proxy configurations per MeshSnapshot generation: generation is a pure function of
 * the MeshSnapshot, the proxy's identity, client type and verification, and the identity's
 * certificate, so proxies that share those (one "kind") share one computation per generation.
 * A configuration that a change cannot alter is carried into the next generation's memo.
 */
import type { TypeUrl } from '../api/type-urls.js';
import type { MeshChange } from '../catalog/snapshot-diff.js';
import { affectedBy } from '../envoy/dependencies.js';
import type { Violation } from '../envoy/validate/index.js';
import type { Proxy, ServiceIdentity } from '../proxy/types.js';
import type { ProxySnapshot } from '../xds/cache/types.js';

/** One computation of a configuration (or of some of its types), shared by the proxies of one kind. */
export interface GeneratedConfig {
  readonly violations: readonly Violation[];
  /** `CDS name`, `LDS name`, … of the resources left out of {@link validSnapshot}. */
  readonly dropped: readonly string[];
  /** Everything, encoded; undefined when there are violations. */
  readonly snapshot: ProxySnapshot | undefined;
  /** The valid subset, encoded, when a full generation has violations (a proxy's first configuration then). */
  readonly validSnapshot: ProxySnapshot | undefined;
  /** The services this configuration was generated from (`proxyDependencies`). */
  readonly dependencies: ReadonlySet<string>;
  /** The proxy it was generated for (its identity and client type are what it depends on). */
  readonly proxy: Proxy;
  /** Generated ahead by the warm-up, within its budget. */
  ahead: boolean;
}

/** The kind of a proxy: its identity, client type and whether it is verified, which are all its configuration depends on. */
export function proxyKind(proxy: Proxy): string {
  return `${proxy.identity}|${proxy.clientType ?? 'envoy'}|${proxy.verified === true ? 'verified' : 'claimed'}`;
}

/** The memo key of a configuration: proxies of one kind, with one certificate (`serial`, `none` without one), share it. */
export function memoKey(proxy: Proxy, certificateSerial: string): string {
  return `${proxyKind(proxy)}|${certificateSerial}`;
}

/**
 * Configurations of one MeshSnapshot generation: full ones by memo key, and updates of some
 * types by memo key, types and the snapshot they update (proxies of one kind whose snapshots
 * are the same object share one). Holds only the current generation; {@link carry} starts the
 * next one.
 */
export class ConfigurationMemo {
  private generation = -1;
  private entries = new Map<string, GeneratedConfig>();
  /** Updates by memo key and types, then by the snapshot updated; undefined: a full generation is needed instead. */
  private updates = new Map<string, WeakMap<ProxySnapshot, { config: GeneratedConfig | undefined }>>();

  /** The full configuration of `key` for `generation`: found, else `compute`d once and remembered. */
  full(generation: number, key: string, compute: () => GeneratedConfig): GeneratedConfig {
    this.at(generation);
    let config = this.entries.get(key);
    if (!config) {
      config = compute();
      this.entries.set(key, config);
    }
    return config;
  }

  /**
   * The update of `types` of `previous` (a snapshot of a proxy of memo key `key`) for
   * `generation`: found, else `compute`d once and remembered. A valid update is also the full
   * configuration of `key` for `generation` when there is none yet (it is what a full generation
   * gives), so that a proxy connecting later finds it.
   * @param compute returns undefined when the update cannot be made (a full generation is needed).
   */
  update(generation: number, key: string, types: ReadonlySet<TypeUrl>, previous: ProxySnapshot, compute: () => GeneratedConfig | undefined): GeneratedConfig | undefined {
    this.at(generation);
    const updateKey = `${key}|${[...types].sort().join(' ')}`;
    let bySnapshot = this.updates.get(updateKey);
    if (!bySnapshot) this.updates.set(updateKey, (bySnapshot = new WeakMap()));
    let found = bySnapshot.get(previous);
    if (!found) {
      found = { config: compute() };
      bySnapshot.set(previous, found);
      if (found.config?.snapshot && !this.entries.has(key)) this.entries.set(key, found.config);
    }
    return found.config;
  }

  /**
   * Starts the memo of `generation` with the configurations of the current one that `change`
   * cannot alter (`affectedBy`), of identities whose certificate did not rotate, and that `keep`
   * accepts (those generated ahead, and those a connected proxy uses: the rest would only hold
   * memory). Nothing is carried for a mesh-wide change.
   */
  carry(generation: number, change: 'all' | MeshChange, rotated: ReadonlySet<ServiceIdentity>, keep: (config: GeneratedConfig) => boolean): void {
    const entries = new Map<string, GeneratedConfig>();
    if (change !== 'all') {
      for (const [key, config] of this.entries) {
        if (rotated.has(config.proxy.identity) || !keep(config)) continue;
        if (!affectedBy(change, config.proxy, config.dependencies)) entries.set(key, config);
      }
    }
    this.generation = generation;
    this.entries = entries;
    this.updates = new Map();
  }

  /** Drops what another generation left. */
  private at(generation: number): void {
    if (this.generation === generation) return;
    this.generation = generation;
    this.entries = new Map();
    this.updates = new Map();
  }
}
