import type { ServerContext } from "../context.ts";
import type { Handlers } from "../http/mod.ts";
import { ProblemError } from "../problems/mod.ts";
import type { ProjectSecretInfo } from "../project_secrets/mod.ts";

type ProjectSecretHandlers = Pick<Handlers, "putProjectSecret" | "listProjectSecrets" | "deleteProjectSecret">;

function view(secret: ProjectSecretInfo) {
  return { name: secret.name, created_at: secret.createdAt, updated_at: secret.updatedAt };
}

/** Project secrets over REST (the `deploy` scope): set, list names, delete. A value is never answered or logged. */
export function projectSecretHandlers(context: ServerContext): ProjectSecretHandlers {
  const { projectSecrets, logger } = context;
  return {
    async putProjectSecret({ path, body }) {
      // The body is required by the contract (a missing one is a 400 before this runs).
      const { created, secret } = await projectSecrets.put(path.project_id, path.name, body!.value);
      logger.info({ project_id: path.project_id, secret_name: path.name, created }, "project secret set");
      return { status: created ? 201 : 200, contentType: "application/json", body: view(secret) };
    },
    async listProjectSecrets({ path }) {
      const secrets = await projectSecrets.list(path.project_id);
      return { status: 200, contentType: "application/json", body: { secrets: secrets.map(view) } };
    },
    async deleteProjectSecret({ path }) {
      if (!(await projectSecrets.delete(path.project_id, path.name))) {
        throw new ProblemError("not-found", `Project ${path.project_id} has no secret ${path.name}`);
      }
      logger.info({ project_id: path.project_id, secret_name: path.name }, "project secret deleted");
      return { status: 204 };
    },
  };
}
