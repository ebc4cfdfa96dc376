/**
 * Whether a proxy has what the controller means it to have, per xDS type: what `/debug/proxies`
 * and `trellis proxies` show as synced, stale or NACKed.
 */
import type { TypeUrl } from '../api/type-urls.js';
import type { StreamMode, TypeStreamInfo } from '../xds/server/stream-common.js';
import type { ProxySnapshot } from '../xds/cache/types.js';

/**
 * - `synced`: the proxy ACKed the latest configuration of the type;
 * - `nacked`: it rejected the last response sent and has not accepted one since;
 * - `stale`: anything else (a response not answered yet, a newer configuration not sent yet, none ACKed).
 */
export type TypeSyncState = 'synced' | 'stale' | 'nacked';

/** The sync state of one type of a stream, and the version it is compared with. */
export interface TypeSync {
  readonly state: TypeSyncState;
  /** The version of the type in the proxy's latest snapshot (null without one). */
  readonly latestVersion: string | null;
}

/**
 * The sync state of a stream's `type` against the proxy's latest `snapshot`: synced when the ACKed
 * version is the snapshot's version of the type (what a delta stream, and a SotW stream subscribed to
 * every name, is sent). A SotW stream subscribed to fewer names than the snapshot has is sent a version
 * of that subset: it is synced when it ACKed the last version sent. NACKed when the last response sent
 * was rejected and none accepted since.
 */
export function typeSync(info: TypeStreamInfo, mode: StreamMode, snapshot: ProxySnapshot | undefined): TypeSync {
  const type: TypeUrl = info.typeUrl;
  const latestVersion = snapshot?.versions.get(type) ?? null;
  const acked = info.versionAcked;
  if (acked !== undefined && acked === latestVersion) return { state: 'synced', latestVersion };
  const sentAcked = acked !== undefined && acked === info.lastVersionSent;
  if (info.lastNack && info.lastNack.version === info.lastVersionSent && !sentAcked) return { state: 'nacked', latestVersion };
  const subset = mode === 'sotw' && !info.wildcard && info.resourceNameCount < (snapshot?.resources.get(type)?.size ?? 0);
  return { state: subset && sentAcked ? 'synced' : 'stale', latestVersion };
}
