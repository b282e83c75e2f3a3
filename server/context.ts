/** What the handlers share: the server's settings and its domain services. */
import type { Registry } from "prom-client";
import type { SigningKey } from "./auth/mod.ts";
import type { Config } from "./config.ts";
import type { Logger } from "./log.ts";
import type { RunService } from "./runs/mod.ts";
import type { SecretBox } from "./secrets/mod.ts";
import type { Store } from "./store/mod.ts";

/** Why the server is not ready, if it is not. */
export interface Readiness {
  /** Empty when ready; otherwise each reason, e.g. `apps are loading`, `draining`. */
  reasons(): Promise<string[]>;
}

/** The services a handler may call. */
export interface ServerContext {
  config: Config;
  store: Store;
  key: SigningKey;
  logger: Logger;
  readiness: Readiness;
  metrics: Registry;
  /** Seals secrets kept at rest (webhook secrets, GitHub tokens). */
  secrets: SecretBox;
  /** Run records, submitting calls, the async dispatcher, cancel. */
  runs: RunService;
}
