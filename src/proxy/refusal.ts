/**
 * Why a proxy's stream was refused, as the `reason` label of `trellis_xds_connections_refused_total`
 * (and, for the controller's own checks, `trellis_proxy_refusals_total`): a short snake_case word
 * such as `no_pod`, `uuid_conflict` or `identity_not_in_mesh`.
 */
export type RefusalReason = string;

/**
 * Thrown (or rejected with) by whoever admits a proxy (the ADS server's `onStreamOpen` hook) to
 * refuse it: the ADS server ends the stream with `PERMISSION_DENIED` and `message` as status
 * details, counts it under `reason` and logs it (rate-limited, see `RefusalLog`), instead of
 * treating it as a failure to set the stream up (`UNAVAILABLE`).
 */
export class ProxyRefusedError extends Error {
  /** @param reason the metric label; @param message what the client and the log are told. */
  constructor(
    readonly reason: RefusalReason,
    message: string,
  ) {
    super(message);
    this.name = 'ProxyRefusedError';
  }
}
