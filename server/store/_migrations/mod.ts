import type { Migration } from "kysely";
import * as spine from "./0001_spine.ts";
import * as runs from "./0002_runs.ts";
import * as integrations from "./0003_integrations.ts";
import * as resultTruncated from "./0004_result_truncated.ts";
import * as webhookCredentials from "./0005_webhook_credentials.ts";
import * as keys from "./0006_keys.ts";
import * as deployments from "./0007_deployments.ts";
import * as serviceAccountUsage from "./0008_service_account_usage.ts";
import * as webhookRedelivery from "./0009_webhook_redelivery.ts";
import * as runLogs from "./0010_run_logs.ts";
import * as runReruns from "./0011_run_reruns.ts";
import * as upkeepIndexes from "./0012_upkeep_indexes.ts";
import * as serviceAccountLineage from "./0013_service_account_lineage.ts";
import * as dashboardSessions from "./0014_dashboard_sessions.ts";
import * as redeliveryBudget from "./0015_redelivery_budget.ts";
import * as projectSecrets from "./0016_project_secrets.ts";
import * as sweptRuns from "./0017_swept_runs.ts";
import * as servedDeployments from "./0018_served_deployments.ts";
import * as storeProbes from "./0019_store_probes.ts";
import * as bundleChunks from "./0021_bundle_chunks.ts";
import * as runsByProject from "./0022_runs_by_project.ts";
import * as deploymentIdentity from "./0023_deployment_identity.ts";
import * as cluster from "./0024_cluster.ts";
import * as deploymentConfig from "./0025_deployment_config.ts";
import * as partialRerunIndex from "./0026_partial_rerun_index.ts";
import * as runLeaseGeneration from "./0027_run_lease_generation.ts";
import * as deploymentImage from "./0028_deployment_image.ts";
import * as runMethod from "./0029_run_method.ts";
import * as runWebSocket from "./0030_run_websocket.ts";
import * as websocketTickets from "./0031_websocket_tickets.ts";
import * as appSamples from "./0034_app_samples.ts";
import * as volumes from "./0032_volumes.ts";

/** Every migration, by name; names sort in the order they apply. Append, never edit an applied one. */
export const MIGRATIONS: Record<string, Migration> = {
  "0001_spine": spine,
  "0002_runs": runs,
  "0003_integrations": integrations,
  "0004_result_truncated": resultTruncated,
  "0005_webhook_credentials": webhookCredentials,
  "0006_keys": keys,
  "0007_deployments": deployments,
  "0008_service_account_usage": serviceAccountUsage,
  "0009_webhook_redelivery": webhookRedelivery,
  "0010_run_logs": runLogs,
  "0011_run_reruns": runReruns,
  "0012_upkeep_indexes": upkeepIndexes,
  "0013_service_account_lineage": serviceAccountLineage,
  "0014_dashboard_sessions": dashboardSessions,
  "0015_redelivery_budget": redeliveryBudget,
  "0016_project_secrets": projectSecrets,
  "0017_swept_runs": sweptRuns,
  "0018_served_deployments": servedDeployments,
  "0019_store_probes": storeProbes,
  "0021_bundle_chunks": bundleChunks,
  "0022_runs_by_project": runsByProject,
  "0023_deployment_identity": deploymentIdentity,
  "0024_cluster": cluster,
  "0025_deployment_config": deploymentConfig,
  "0026_partial_rerun_index": partialRerunIndex,
  "0027_run_lease_generation": runLeaseGeneration,
  "0028_deployment_image": deploymentImage,
  "0029_run_method": runMethod,
  "0030_run_websocket": runWebSocket,
  "0031_websocket_tickets": websocketTickets,
  "0032_volumes": volumes,
  "0034_app_samples": appSamples,
};
