/**
 * The relay's interpreter in a jail whose `/` is an image: the HOST's python3, started through the host's
 * own dynamic loader and libraries from the host's `/usr`, which the image jail binds read-only at
 * `/.runplane/host/usr` (server/sandbox/_image_root.ts, for the privilege drop). So the relay runs in any
 * image, one without python3 too (a Dockerfile `FROM node:…`), and never runs the image's interpreter.
 * The sandbox's `hostProgramInImage` names the host's loader and libraries, as for the privilege drop.
 * `-I -S`: no PYTHON* variable, no user or site folders; its prefix is found from its own path
 * (`/.runplane/host/usr/lib/python3.X`), so no PYTHONHOME is needed — and none reaches the app.
 * This process runs as the tenant (after the privilege drop), reading only the host's read-only `/usr`.
 */
import { hostProgramInImage } from "../sandbox/mod.ts";

/**
 * `[loader, its options, python, -I, -S]` as paths inside an image jail: the command that runs a script
 * with the host's python3 there.
 */
export function hostPythonInImage(): string[] {
  return [...hostProgramInImage("/usr/bin/python3"), "-I", "-S"];
}
