import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/**
 * The checkout's root folder. Its own module, so that what needs only the root (the benchmark, on a lent
 * machine without the build-time tools) does not load the generator's TypeScript and TypeSpec.
 */
export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
