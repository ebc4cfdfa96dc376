/**
 * Warm-up: before a mesh connects at once (a restart while proxies run), issue every mesh
 * identity's service certificate and generate the configuration of a sidecar of each, within a
 * budget of encoded bytes, so that proxies find both ready instead of each waiting for them.
 */
import type { Logger } from 'pino';
import type { CertificateManager } from '../certificate/manager.js';
import { identityParts, parseCommonName, proxyCommonName, type Proxy, type ServiceIdentity } from '../proxy/types.js';
import type { ProxySnapshot } from '../xds/cache/types.js';

/** Default of {@link WarmUpOptions.configurationBytes}: 64 MiB of encoded configuration. */
export const DEFAULT_WARM_UP_CONFIGURATION_BYTES = 64 * 1024 * 1024;

/** The UUID of the stand-in proxy configurations are generated for ahead (generation does not read it). */
const WARM_UP_UUID = '00000000-0000-4000-8000-000000000000';

/** Options of {@link warmUp}. */
export interface WarmUpOptions {
  /** Identities worked on at once (default 4). */
  readonly concurrency?: number;
  /**
   * Budget of encoded configuration generated ahead, in bytes (default
   * {@link DEFAULT_WARM_UP_CONFIGURATION_BYTES}): no identity is started once this much is
   * generated (the last one may pass it); 0 issues certificates only.
   */
  readonly configurationBytes?: number;
}

/** What {@link warmUp} did. */
export interface WarmUpResult {
  /** Identities of the mesh. */
  readonly identities: number;
  readonly certificatesIssued: number;
  readonly configurationsGenerated: number;
  /** Encoded size of the configurations generated, in bytes. */
  readonly configurationBytes: number;
  /** Some identities got no configuration ahead: the budget was used up first. */
  readonly budgetReached: boolean;
}

/** What {@link warmUp} works with. */
export interface WarmUpInputs {
  /** The identities of the mesh. */
  readonly identities: ReadonlySet<ServiceIdentity>;
  readonly certificates: Pick<CertificateManager, 'peekServiceCertificate' | 'getServiceCertificate'>;
  readonly logger: Logger;
  /**
   * Generates (or finds) the configuration of `proxy`, a verified stand-in sidecar of one
   * identity, and keeps it for that identity's proxies.
   * @returns its encoded size, in bytes.
   */
  readonly configure: (proxy: Proxy) => Promise<number>;
}

/** The verified stand-in sidecar of `identity` whose configuration is generated ahead. */
export function warmUpProxy(identity: ServiceIdentity): Proxy {
  const { namespace, serviceAccount } = identityParts(identity);
  return { ...parseCommonName(proxyCommonName(WARM_UP_UUID, 'sidecar', namespace, serviceAccount)), verified: true };
}

/** Encoded size of a proxy snapshot's resources, in bytes (0 for none). */
export function snapshotBytes(snapshot: ProxySnapshot | undefined): number {
  let bytes = 0;
  for (const resources of snapshot?.resources.values() ?? []) for (const r of resources.values()) bytes += r.resource.value.length;
  return bytes;
}

/**
 * For every identity, issues its service certificate and, while `configurationBytes` last,
 * configures its stand-in sidecar ({@link warmUpProxy}), `concurrency` identities at a time
 * (one configuration at a time: it runs on this thread anyway, and the budget is checked right
 * before each, so at most the last one passes it). A failure is logged; that identity's
 * certificate and configuration are then made on first connection.
 * @returns the certificates issued, the configurations generated and their encoded size (bytes).
 */
export async function warmUp(inputs: WarmUpInputs, options: WarmUpOptions = {}): Promise<WarmUpResult> {
  const { identities, certificates, logger } = inputs;
  const budget = options.configurationBytes ?? DEFAULT_WARM_UP_CONFIGURATION_BYTES;
  const result = { identities: identities.size, certificatesIssued: 0, configurationsGenerated: 0, configurationBytes: 0, budgetReached: false };
  const todo = [...identities].sort().reverse();
  let generating: Promise<void> = Promise.resolve();
  const generate = (id: ServiceIdentity): Promise<void> => {
    const run = generating.then(async () => {
      if (result.configurationBytes >= budget) {
        result.budgetReached = budget > 0;
        return;
      }
      const bytes = await inputs.configure(warmUpProxy(id));
      result.configurationsGenerated++;
      result.configurationBytes += bytes;
    });
    generating = run.catch(() => undefined);
    return run;
  };
  const worker = async (): Promise<void> => {
    for (let id = todo.pop(); id !== undefined; id = todo.pop()) {
      try {
        if (!certificates.peekServiceCertificate(id)) {
          await certificates.getServiceCertificate(id);
          result.certificatesIssued++;
        }
      } catch (err) {
        logger.warn({ identity: id, err: err instanceof Error ? err.message : String(err) }, 'service certificate not issued ahead; it will be on first connection');
        continue;
      }
      try {
        await generate(id);
      } catch (err) {
        logger.warn({ identity: id, err: err instanceof Error ? err.message : String(err) }, 'configuration not generated ahead; it will be on first connection');
      }
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, options.concurrency ?? 4) }, worker));
  return result;
}
