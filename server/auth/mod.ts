/** Service-account auth: Ed25519-signed JWTs, their verification, the accounts behind them, and dashboard sessions. */
export { createSessionRecords, type SessionRecords } from "./dashboard_sessions.ts";
export { parseExpiry } from "./expiry.ts";
export { DEFAULT_TOKEN_LIFETIME_MS, mintingGrant } from "./minting.ts";
export { parseScopes, type Scope, SCOPES } from "./scopes.ts";
export {
  anyServiceAccount,
  createServiceAccount,
  type CreateServiceAccountOptions,
  listServiceAccounts,
  revokeServiceAccount,
  type ServiceAccount,
  TOKEN_ISSUER,
} from "./service_accounts.ts";
export {
  generateSigningJwk,
  loadOrCreateSigningKey,
  type PublicSigningJwk,
  type SigningKey,
  signingKeyFromJwk,
  type SigningKeys,
  singleSigningKey,
} from "./signing_key.ts";
export { createStoredWebSocketTickets, type StoredWebSocketTicketsOptions } from "./stored_websocket_tickets.ts";
export { createTokenVerifier, type Principal, type TokenVerifier } from "./token_verifier.ts";
export {
  createWebSocketTickets,
  type MintedTicket,
  TICKET_LIFETIME_MS,
  type TicketRefusal,
  type TicketTarget,
  type WebSocketTickets,
  type WebSocketTicketsOptions,
} from "./websocket_tickets.ts";
