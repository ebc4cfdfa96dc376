/** A pod the injector refuses, with the field that made it; becomes `allowed: false` with this message. */
export class InjectionRefusal extends Error {
  /** @param field where in the pod, its namespace or the MeshConfig, e.g. `spec.containers[0].livenessProbe.httpGet.port`. */
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(`${field}: ${message}`);
    this.name = 'InjectionRefusal';
  }
}
