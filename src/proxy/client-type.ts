import type { Proxy, XdsClientType } from './types.js';

/**
 * The parts of an xDS `Node` (Envoy `config.core.v3.Node`) that tell what software the client
 * is. Structural, so any decoded `Node` (proto-loader output, snake_case) fits.
 */
export interface NodeSoftware {
  /** `user_agent_name`: Envoy sends `envoy`; gRPC sends `gRPC <language>…`. */
  readonly user_agent_name?: string | null;
  /** `client_features`: well-known feature strings the client supports. */
  readonly client_features?: readonly string[] | null;
}

/**
 * The `client_features` entry every gRPC xDS client sends on ADS (gRFC A27, "xDS Client"):
 * gRPC does not implement overprovisioning. Envoy does not send it.
 */
export const GRPC_CLIENT_FEATURE = 'envoy.lb.does_not_support_overprovisioning';

/** `user_agent_name` of a gRPC client: `gRPC` as its own first word (`gRPC Node Pure JS`, `gRPC C-core linux Python`, `gRPC Go`, `gRPC Java`). */
const GRPC_USER_AGENT = /^grpc(\s|$)/i;

/**
 * Tells a proxyless gRPC client from an Envoy sidecar by the first request's `node`:
 * `grpc` when `user_agent_name` starts with the word `gRPC` (what grpc-js, C-core and its
 * wrapped languages, Go and Java send, gRFC A27), or when `client_features` lists
 * {@link GRPC_CLIENT_FEATURE}; `envoy` otherwise (including a missing node). Only the
 * configuration format depends on it: the identity still comes from the certificate (or the
 * plaintext listener's node.id).
 */
export function detectClientType(node: NodeSoftware | null | undefined): XdsClientType {
  if (!node) return 'envoy';
  if (GRPC_USER_AGENT.test(node.user_agent_name ?? '')) return 'grpc';
  if ((node.client_features ?? []).includes(GRPC_CLIENT_FEATURE)) return 'grpc';
  return 'envoy';
}

/** The proxy with its {@link XdsClientType} detected from `node` (the same object when nothing changes). */
export function withClientType(proxy: Proxy, node: NodeSoftware | null | undefined): Proxy {
  const clientType = detectClientType(node);
  return proxy.clientType === clientType ? proxy : { ...proxy, clientType };
}
