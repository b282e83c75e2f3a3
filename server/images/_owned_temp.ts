/**
 * Temporary folders the store makes beside what it finishes (so a rename publishes a finished one whole),
 * and their removal, which refuses any path it did not make: never empty, relative, or outside `parent`.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { basename, dirname, isAbsolute, join } from "node:path";

const TEMP_PREFIX = ".partial-";

/** Makes a new empty folder in `parent` (an absolute path) whose name marks it unfinished. */
export function makeOwnedTemp(parent: string, label: string): Promise<string> {
  if (!isAbsolute(parent)) throw new Error(`The image store's folder ${parent} is not an absolute path`);
  return mkdtemp(join(parent, `${TEMP_PREFIX}${label}-`));
}

/** Whether `name` is a folder {@link makeOwnedTemp} made (unfinished, never to be used as a result). */
export function isOwnedTempName(name: string): boolean {
  return name.startsWith(TEMP_PREFIX);
}

/** Removes `path`, made by {@link makeOwnedTemp} in `parent`; throws rather than remove anything else. */
export async function removeOwnedTemp(parent: string, path: string): Promise<void> {
  const name = basename(path);
  const ours = isAbsolute(parent) && isAbsolute(path) && dirname(path) === parent && parent !== "/"
    && name.length > TEMP_PREFIX.length + 1 && isOwnedTempName(name) && !name.includes("/");
  if (!ours) throw new Error(`Refusing to remove ${JSON.stringify(path)}: not a temporary folder of ${parent}`);
  await rm(path, { recursive: true, force: true });
}
