import { parseArgs } from "node:util";
import { type CommandIo, UsageError } from "../../client/cli_command.ts";
import { GITHUB_API_URL, normalizeGithubApiUrl, saveProjectIntegration } from "../integrations/mod.ts";
import { keysBootstrap, loadKeys } from "../keys/mod.ts";
import { openStore } from "../store/mod.ts";
import { masterKeyFor } from "./_keys.ts";
import { dataDirOf, requireProjectId } from "./_project_id.ts";

async function readStdin(stream: NodeJS.ReadableStream): Promise<string> {
  let text = "";
  for await (const chunk of stream) text += String(chunk);
  return text.trim();
}

/** `runplane integration github|local`. */
export async function integrationCommand(io: CommandIo): Promise<number> {
  const [sub, ...rest] = io.args;
  if (sub !== "github" && sub !== "local") {
    throw new UsageError(sub ? `Unknown provider "${sub}": use github or local` : "Name a provider: github or local");
  }
  const { values } = parseArgs({
    args: rest,
    options: {
      project: { type: "string" },
      token: { type: "string" },
      "github-api-url": { type: "string" },
      "data-dir": { type: "string" },
      "database-url": { type: "string" },
    },
  });
  const projectId = requireProjectId(values.project, `integration ${sub}`);
  let integration: Parameters<typeof saveProjectIntegration>[1]["integration"] = { provider: "local" };
  if (sub === "github") {
    const token = values.token === "-" ? await readStdin(io.stdin ?? process.stdin) : values.token;
    if (!token) throw new UsageError("integration github needs --token <token> (or --token - to read it from stdin)");
    let apiUrl: string;
    try {
      apiUrl = normalizeGithubApiUrl(values["github-api-url"] ?? GITHUB_API_URL);
    } catch (error) {
      throw new UsageError((error as Error).message);
    }
    integration = { provider: "github", apiUrl, token };
  }
  const dataDir = dataDirOf(values["data-dir"], io.env);
  const databaseUrl = values["database-url"] ?? io.env.RUNPLANE_DATABASE_URL;
  const masterKey = masterKeyFor(databaseUrl, io.env);
  const store = await openStore(dataDir, { databaseUrl, bootstrap: keysBootstrap(masterKey) });
  try {
    const { secrets } = await loadKeys(store, { dataDir, masterKey });
    await saveProjectIntegration({ db: store.db, secrets }, { projectId, integration });
  } finally {
    await store.close();
  }
  io.stderr.write(
    integration.provider === "github"
      ? `Project ${projectId} now reads repositories from GitHub at ${integration.apiUrl}; the token is stored encrypted\n`
      : `Project ${projectId} now reads repositories from the data dir's repos folder\n`,
  );
  return 0;
}
