/**
 * The cluster: what lets processes on one PostgreSQL count and reach each other's replicas. Hosts and
 * the replica seats they hold are shared in the store (`registry.ts`), and a call is forwarded to another
 * host's replicas over HTTP (`forward_client.ts`, `forward_endpoint.ts`). A domain folder, free of Koa:
 * the HTTP layer mounts the forwarding endpoint, the composition root wires it.
 */
export {
  type ClusterHost,
  type ClusterRegistry,
  type ClusterRegistryOptions,
  type ClusterView,
  createClusterRegistry,
  type HostCapacity,
  type LiveSeat,
  PUBLISH_DELAY_MS,
  type SeatKey,
  type SeatState,
} from "./registry.ts";

// An app's replicas per host (`getApp`'s `replicas.hosts`), and the cluster's gauges.
export {
  appHostsOf,
  type AppHostReplicas,
  type AppHostsRequest,
  localAppHosts,
  type LocalReplicas,
  seatCounts,
} from "./app_hosts.ts";

// The forwarding hop: a call sent to another host's replicas, and that host's side of it.
export {
  FORWARD_SKEW_MS,
  ForwardKey,
  type ForwardFields,
  forwardKey,
  signForward,
  verifyForward,
  type VerifyForwardOptions,
} from "./_forward_credential.ts";
export {
  closeForwardConnections,
  forwardCall,
  type ForwardCallOptions,
  FORWARD_PATH,
  type ForwardRequest,
  interrupted,
  type OpenCall,
  readOutcome,
} from "./forward_client.ts";
// The frames of an answer, for another wire that carries them (a host's workers and its supervisor).
export { FrameSplitter, type Frame } from "./_frames.ts";
export { decodeHttpPart, FORWARD_HTTP_HEADER } from "./_http_part.ts";
export { type ForwardedCallInput, serveForwardedCall } from "./forward_endpoint.ts";
// A WebSocket opened on another host's replica (the landing host keeps the run's record).
export {
  decodeWebSocketHeaders,
  FORWARD_DEPLOYMENT_HEADER,
  FORWARD_GRACE_HEADER,
  FORWARD_WEBSOCKET_HEADERS,
  FORWARD_WEBSOCKET_PATH,
  forwardWebSocket,
  type ForwardWebSocketOptions,
} from "./websocket_forward.ts";
