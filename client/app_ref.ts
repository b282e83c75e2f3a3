/** Naming an app (and one of its functions) in client calls: `"project/app[/function]"` or an object. */

/** An app and optionally one of its functions; the function defaults to `run`. */
export interface AppLocation {
  project: string;
  app: string;
  function?: string;
}

/** `"<project>/<app>"`, `"<project>/<app>/<function>"`, or an `AppLocation`. */
export type AppRef = string | AppLocation;

/** The function a run call uses when the reference names none. */
export const DEFAULT_FUNCTION = "run";

/**
 * Resolves `ref` to its project, app and function (default `run`). Throws a `TypeError` when a string
 * reference does not have two or three non-empty `/`-separated parts.
 */
export function resolveAppRef(ref: AppRef): Required<AppLocation> {
  if (typeof ref !== "string") {
    return { project: ref.project, app: ref.app, function: ref.function ?? DEFAULT_FUNCTION };
  }
  const parts = ref.split("/");
  if ((parts.length !== 2 && parts.length !== 3) || parts.some((p) => p === "")) {
    throw new TypeError(`Invalid app reference "${ref}": write <project>/<app> or <project>/<app>/<function>`);
  }
  return { project: parts[0], app: parts[1], function: parts[2] ?? DEFAULT_FUNCTION };
}
