import { parseArgs } from "node:util";
import { type CommandIo, UsageError } from "../../client/cli_command.ts";
import { writeTable } from "../../client/table_format.ts";
import {
  createServiceAccount,
  listServiceAccounts,
  parseExpiry,
  parseScopes,
  revokeServiceAccount,
} from "../auth/mod.ts";
import { keysBootstrap, loadKeys } from "../keys/mod.ts";
import { openStore } from "../store/mod.ts";
import { masterKeyFor } from "./_keys.ts";
import { serviceAccountOverApi } from "./_service_account_api.ts";
import { dataDirOf, requireExistingDataDir, requireProjectId } from "./_project_id.ts";

/** `runplane service-account create|list|revoke`. */
export async function serviceAccountCommand(io: CommandIo): Promise<number> {
  const [sub, ...rest] = io.args;
  const { values, positionals } = parseArgs({
    args: rest,
    allowPositionals: true,
    options: {
      project: { type: "string" },
      name: { type: "string" },
      expires: { type: "string" },
      scope: { type: "string", default: "rest,run" },
      "data-dir": { type: "string" },
      "database-url": { type: "string" },
      "base-url": { type: "string" },
      token: { type: "string" },
      json: { type: "boolean", default: false },
    },
  });
  // A server named (and no data dir or database): the REST API, with an admin token.
  const baseUrl = values["base-url"] ?? io.env.RUNPLANE_BASE_URL;
  if (baseUrl && !values["data-dir"] && !values["database-url"]) {
    return await serviceAccountOverApi(io, { sub, positionals, flags: { ...values, "base-url": baseUrl } });
  }
  const dataDir = dataDirOf(values["data-dir"], io.env);
  const databaseUrl = values["database-url"] ?? io.env.RUNPLANE_DATABASE_URL;
  // Opening a store creates its folder: a token minted into a data dir made here is one no server accepts.
  const requireDataDir = () => {
    if (!databaseUrl) requireExistingDataDir(dataDir, `service-account ${sub}`);
  };
  if (sub === "create") {
    if (!values.project || !values.name || !values.expires) {
      throw new UsageError("service-account create needs --project, --name and --expires");
    }
    requireProjectId(values.project, "service-account create");
    let expiresAt: number;
    let scopes;
    try {
      expiresAt = parseExpiry(values.expires);
      scopes = parseScopes(values.scope);
    } catch (error) {
      throw new UsageError((error as Error).message);
    }
    const masterKey = masterKeyFor(databaseUrl, io.env);
    requireDataDir();
    const store = await openStore(dataDir, { databaseUrl, bootstrap: keysBootstrap(masterKey) });
    try {
      const keys = await loadKeys(store, { dataDir, masterKey });
      const { account, token } = await createServiceAccount(
        { db: store.db, key: keys.signing.current },
        { projectId: values.project, name: values.name, scopes, expiresAt },
      );
      io.stdout.write(values.json ? `${JSON.stringify({ id: account.id, token })}\n` : `${token}\n`);
      io.stderr.write(
        `Created service account ${account.id} for project ${account.projectId}, expires ${account.expiresAt.toISOString()}\n`,
      );
    } finally {
      await store.close();
    }
    return 0;
  }
  if (sub === "list") {
    if (!values.project) throw new UsageError("service-account list needs --project");
    requireDataDir();
    const store = await openStore(dataDir, { databaseUrl });
    try {
      const accounts = await listServiceAccounts(store.db, values.project);
      if (values.json) {
        io.stdout.write(`${JSON.stringify(accounts, null, 2)}\n`);
      } else {
        writeTable(
          io,
          ["ID", "NAME", "SCOPES", "STATE", "EXPIRES"],
          accounts.map((a) => [
            a.id,
            a.name,
            a.scopes.join(","),
            a.revokedAt ? "revoked" : a.expiresAt.getTime() < Date.now() ? "expired" : "active",
            a.expiresAt.toISOString(),
          ]),
        );
      }
    } finally {
      await store.close();
    }
    return 0;
  }
  if (sub === "revoke") {
    const id = positionals[0];
    if (!id) throw new UsageError("service-account revoke needs the service account's id (see service-account list)");
    requireDataDir();
    const store = await openStore(dataDir, { databaseUrl });
    try {
      if (!(await revokeServiceAccount(store.db, id))) {
        io.stderr.write(`No service account ${id}\n`);
        return 1;
      }
      io.stderr.write(`Revoked ${id}\n`);
    } finally {
      await store.close();
    }
    return 0;
  }
  throw new UsageError(sub ? `Unknown subcommand "${sub}"` : "Name a subcommand: create, list or revoke");
}
