/**
 * What a proxy's inbound side (its inbound listener and `rds-inbound.<port>` route
 * configurations) is generated from, gathered once per identity as one object that stays the
 * same while those parts of the MeshSnapshot do: the generators of the inbound side share
 * their resources on it (`GenerationContext.shared`), so a push that changes none of it (a
 * MeshConfig change of TLS settings, for the routes) builds, checks and encodes nothing again.
 */
import { meshServicePorts, inboundServices, inboundTrafficTargets } from '../../catalog/traffic-policy.js';
import type { MeshService, TrafficTargetPolicy, UpstreamTrafficSettingPolicy } from '../../catalog/types.js';
import type { ServiceIdentity } from '../../proxy/types.js';
import type { GenerationContext } from '../context.js';
import { upstreamTrafficSettingFor } from '../upstream-settings.js';

/** One service a proxy serves, with what its inbound chain and routes read of the snapshot. */
export interface InboundService {
  readonly service: MeshService;
  /** Its UpstreamTrafficSetting (rate limits), if any. */
  readonly setting: UpstreamTrafficSettingPolicy | undefined;
  /** The ports (same service port) of the TrafficSplit apexes it backs: their host names are its routes' too. */
  readonly apexes: readonly MeshService[];
}

/** The inbound side of the proxies of one identity ({@link inboundSide}). */
export interface InboundSide {
  /** SMI mode (permissive mode off): access is what TrafficTargets allow. */
  readonly smi: boolean;
  /** In SMI mode, the TrafficTargets whose destination is the identity; empty in permissive mode. */
  readonly targets: readonly TrafficTargetPolicy[];
  /** The services whose workloads run as the identity, in snapshot order. */
  readonly services: readonly InboundService[];
}

/**
 * The {@link InboundSide} of `identity` in `context`'s MeshSnapshot: one object per identity,
 * the very object of a generation before while it is made of the same parts (MeshService,
 * TrafficTarget, UpstreamTrafficSetting objects, which a rebuild keeps when unchanged).
 */
export function inboundSide(context: GenerationContext, identity: ServiceIdentity): InboundSide {
  const { snapshot } = context;
  const smi = !snapshot.settings.permissiveTrafficPolicyMode;
  const targets = smi ? inboundTrafficTargets(snapshot, identity) : [];
  // Flat, for `shared` to compare element by element: SMI, the targets' count and the targets
  // (objects: a rebuild keeps a TrafficTarget policy whose content did not change), then per
  // service: the service, its setting, its apexes' count and the apexes.
  const inputs: unknown[] = [smi, targets.length, ...targets];
  for (const svc of inboundServices(snapshot, identity)) {
    const apexes = snapshot.trafficSplits
      .filter((s) => s.namespace === svc.namespace && s.backends.some((b) => b.service === svc.name))
      .flatMap((s) => meshServicePorts(snapshot, s.namespace, s.service).filter((a) => a.port === svc.port));
    inputs.push(svc, upstreamTrafficSettingFor(snapshot, svc), apexes.length, ...apexes);
  }
  return context.shared('InboundSide', identity, inputs, inboundSideOf);
}

/** The {@link InboundSide} of {@link inboundSide}'s flat inputs. */
function inboundSideOf(...inputs: unknown[]): InboundSide {
  const smi = inputs[0] as boolean;
  const count = inputs[1] as number;
  const targets = inputs.slice(2, 2 + count) as TrafficTargetPolicy[];
  const services: InboundService[] = [];
  for (let i = 2 + count; i < inputs.length; ) {
    const apexCount = inputs[i + 2] as number;
    services.push({ service: inputs[i] as MeshService, setting: inputs[i + 1] as UpstreamTrafficSettingPolicy | undefined, apexes: inputs.slice(i + 3, i + 3 + apexCount) as MeshService[] });
    i += 3 + apexCount;
  }
  return Object.freeze({ smi, targets, services });
}
