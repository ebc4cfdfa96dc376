/**
 * The ports an OSM sidecar owns in a meshed pod: Envoy's admin (15000), outbound (15001) and
 * inbound (15003) listeners, Prometheus (15010), and the liveness, readiness and startup probe
 * listeners (15901–15903) and osm-healthcheck (15904). An app port among them collides with the
 * sidecar: Envoy NACKs a listener it cannot bind (`cannot bind '0.0.0.0:15001': Address already
 * in use`), the app cannot bind 15003, and the ports OSM never redirects (15000, 15010,
 * 15901–15904) reach the app in plaintext past mTLS and RBAC. Pure data (the numbers of
 * `src/envoy/lds/lds.ts` and `src/injector/iptables.ts`).
 */
export const SIDECAR_PORTS: ReadonlySet<number> = new Set([15000, 15001, 15003, 15010, 15901, 15902, 15903, 15904]);

/** What a port among {@link SIDECAR_PORTS} does to a meshed pod, for a problem's message. */
export function sidecarPortMessage(port: number): string {
  return `${port} is a port of the sidecar (Envoy's ${[...SIDECAR_PORTS].join(', ')}): in a meshed pod the app and Envoy collide on it (Envoy NACKs a listener it cannot bind, or traffic to it skips the sidecar)`;
}
