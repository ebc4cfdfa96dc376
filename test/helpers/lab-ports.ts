/**
 * The fixed ports of the lab test suites, in one table so that no two share one: each suite's
 * controller ADS port on its lab bridge (`startLab({ xdsPort })`, `trellis lab up --xds-port`)
 * and its operations server on loopback. None is a controller's default (15128, 15129, 9091,
 * 9090: a controller started by hand on 0.0.0.0:15128 holds that port on every address, the lab
 * bridges' too), and they stay out of the ranges other suites pick ports from (19210-19215
 * envoy-anchors, 19410-19412 bench-envoys, 19460-19471 injector-lab, 19500-19599 the real
 * kube-apiservers, 19600-19659 the engineers' controllers, 19800-19899 kube-real-injector).
 * Block 19160-19189; lab-telemetry keeps its 19900/19901.
 */
export const LAB_SUITE_PORTS = {
  /** test/lab.test.ts (`tla`). */
  lab: { xds: 19160, http: 19161 },
  /** test/lab-cli.test.ts (`tpo`). */
  labCli: { xds: 19162, http: 19163 },
  /** test/lab-explain.test.ts (`s9e`). */
  labExplain: { xds: 19164, http: 19165 },
  /** test/lab-faults.test.ts, state of the world (`tlf`). */
  labFaults: { xds: 19166, http: 19167 },
  /** test/lab-faults.test.ts, delta (`tlfd`). */
  labFaultsDelta: { xds: 19168, http: 19169 },
  /** test/lab-isolation.test.ts (`tis`). */
  labIsolation: { xds: 19170, http: 19171 },
  /** test/lab-policies.test.ts (`tlq`). */
  labPolicies: { xds: 19172, http: 19173 },
  /** test/lab-policy-status.test.ts (`s9s`: its own controller, not startLab's). */
  labPolicyStatus: { xds: 19174, http: 19175 },
  /** test/lab-routes.test.ts (`r7`). */
  labRoutes: { xds: 19176, http: 19177 },
  /** test/lab-telemetry.test.ts (`tte`), and its OTLP collector on 19901. */
  labTelemetry: { xds: 19178, http: 19900 },
  /** test/lab-topology.test.ts (`tto`). */
  labTopology: { xds: 19179, http: 19180 },
  /** test/lab-traffic.test.ts, examples/bookstore (`tlp`). */
  labTraffic: { xds: 19181, http: 19182 },
  /** test/lab-traffic.test.ts, the echo lab (`tlp`, after the first). */
  labTrafficEcho: { xds: 19183, http: 19184 },
} as const satisfies Record<string, { readonly xds: number; readonly http: number }>;
