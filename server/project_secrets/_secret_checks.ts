/** What a project secret's name and value may be (`PROJECT_SECRET_LIMITS`, `secretNameProblem`: re-exported by mod.ts). */
import { ProblemError } from "../problems/mod.ts";
import { envNameProblem } from "../runtime/mod.ts";

/** The limits of a project's secrets (each a 4xx problem naming it). */
export const PROJECT_SECRET_LIMITS = {
  /** A name's length in characters. */
  nameLength: 128,
  /** One value's size in UTF-8 bytes (64 KiB): 413 above it. */
  valueBytes: 64 * 1024,
  /** Secrets per project: 409 for one more. */
  secrets: 100,
  /**
   * The project's values together, in UTF-8 bytes (1 MiB): 413 above it. A replica gets them all in its
   * environment, and Linux refuses to start a process whose arguments and environment pass 2 MiB.
   */
  totalBytes: 1024 * 1024,
} as const;

/**
 * Why `name` cannot name a secret, or null when it can: the rules of an app's `[env]` names (one list, in
 * `server/runtime/_app_env.ts`: the platform's own names, and those a program reads before its code runs),
 * and a length limit. Given the `value` it would hold, also why `[env]` refuses that value to that name (a
 * locale name holding `/`).
 */
export function secretNameProblem(name: string, value?: string): string | null {
  if (name === "") return "is empty: name the secret like an environment variable, e.g. API_KEY";
  if (name.length > PROJECT_SECRET_LIMITS.nameLength) {
    return `is ${name.length} characters long; the limit is ${PROJECT_SECRET_LIMITS.nameLength}`;
  }
  return envNameProblem(name, value);
}

/** The 400 problem for a refused secret name. */
export function nameRefusal(name: string, problem: string): ProblemError {
  return new ProblemError("validation", `The secret name ${JSON.stringify(name)} ${problem}`, {
    errors: [{ path: "path.name", message: problem }],
  });
}

/** Throws the 400 problem for a refused secret name. */
export function checkName(name: string): void {
  const problem = secretNameProblem(name);
  if (problem) throw nameRefusal(name, problem);
}

/**
 * The value's size in bytes; throws for a value no environment can hold, one `[env]` refuses to `name`
 * (already checked alone), or one over the limit.
 */
export function checkValue(name: string, value: string): number {
  if (typeof value !== "string") {
    throw new ProblemError("validation", "The secret's value must be a string", {
      errors: [{ path: "body.value", message: "must be a string" }],
    });
  }
  if (value.includes("\u0000")) {
    throw new ProblemError(
      "validation",
      "The secret's value holds a NUL character, which no environment variable can",
      {
        errors: [{ path: "body.value", message: "must not contain NUL (\\u0000)" }],
      },
    );
  }
  // The name passed alone, so what is refused here is the value it would hold; checked before it is sealed.
  const problem = secretNameProblem(name, value);
  if (problem) {
    throw new ProblemError("validation", `The secret ${JSON.stringify(name)} ${problem}`, {
      errors: [{ path: "body.value", message: problem }],
    });
  }
  const bytes = Buffer.byteLength(value, "utf8");
  if (bytes > PROJECT_SECRET_LIMITS.valueBytes) {
    throw new ProblemError(
      "content-too-large",
      `The secret's value is ${bytes} bytes; the limit is ${PROJECT_SECRET_LIMITS.valueBytes} bytes (64 KiB) per value`,
    );
  }
  return bytes;
}
