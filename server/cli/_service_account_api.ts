/**
 * `runplane service-account` against a running server (`--base-url` or `RUNPLANE_BASE_URL`): the REST API
 * with a token that has the `admin` scope, instead of the data dir or database. The first token still
 * comes from the data dir (or `npm start`'s demo token).
 */
import { type CommandIo, UsageError } from "../../client/cli_command.ts";
import { createRunplaneClient, type ServiceAccount } from "../../client/mod.ts";
import { writeTable } from "../../client/table_format.ts";
import { parseExpiry, parseScopes } from "../auth/mod.ts";

/** The flags this mode reads. */
export interface ServiceAccountApiFlags {
  project?: string;
  name?: string;
  expires?: string;
  scope: string;
  json: boolean;
  "base-url": string;
  token?: string;
}

function state(account: ServiceAccount): string {
  if (account.revoked_at) return "revoked";
  return Date.parse(account.expires_at) < Date.now() ? "expired" : "active";
}

/** Runs `create|list|revoke` over the REST API. */
export async function serviceAccountOverApi(
  io: CommandIo,
  command: { sub: string | undefined; positionals: string[]; flags: ServiceAccountApiFlags },
): Promise<number> {
  const { sub, positionals, flags } = command;
  if (!flags.project) throw new UsageError(`service-account ${sub ?? ""} needs --project`.replace("  ", " "));
  const client = createRunplaneClient({ baseUrl: flags["base-url"], token: flags.token ?? io.env.RUNPLANE_TOKEN });
  if (sub === "create") {
    if (!flags.name) throw new UsageError("service-account create needs --name");
    let scopes;
    let expiresAt: number | undefined;
    try {
      scopes = parseScopes(flags.scope);
      expiresAt = flags.expires ? parseExpiry(flags.expires) : undefined;
    } catch (error) {
      throw new UsageError((error as Error).message);
    }
    const created = await client.createServiceAccount(flags.project, {
      name: flags.name,
      scopes,
      ...(expiresAt === undefined ? {} : { expires_at: new Date(expiresAt).toISOString() }),
    });
    io.stdout.write(
      flags.json
        ? `${JSON.stringify({ id: created.service_account_id, token: created.token })}\n`
        : `${created.token}\n`,
    );
    io.stderr.write(
      `Created service account ${created.service_account_id} for project ${created.project_id}, expires ${created.expires_at}\n`,
    );
    return 0;
  }
  if (sub === "list") {
    const accounts = await client.listServiceAccounts(flags.project);
    if (flags.json) {
      io.stdout.write(`${JSON.stringify(accounts, null, 2)}\n`);
      return 0;
    }
    writeTable(
      io,
      ["ID", "NAME", "SCOPES", "STATE", "EXPIRES", "LAST USED"],
      accounts.map((a) => [
        a.service_account_id,
        a.name,
        a.scopes.join(","),
        state(a),
        a.expires_at,
        a.last_used_at ?? "never",
      ]),
    );
    return 0;
  }
  if (sub === "revoke") {
    const id = positionals[0];
    if (!id) throw new UsageError("service-account revoke needs the service account's id (see service-account list)");
    await client.revokeServiceAccount(flags.project, id);
    io.stderr.write(`Revoked ${id}\n`);
    return 0;
  }
  throw new UsageError(sub ? `Unknown subcommand "${sub}"` : "Name a subcommand: create, list or revoke");
}
