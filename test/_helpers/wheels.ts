/** Wheels for build tests, made on the spot: no index, no network. */
import { execFileSync } from "node:child_process";

/** Writes a pure-Python wheel `name`-`version` exposing `VALUE` into `dir` (a zip, as pip reads it). */
export function writeWheel(dir: string, name: string, version: string): void {
  const script = `
import sys, zipfile
dir, name, version = sys.argv[1:4]
info = f"{name}-{version}.dist-info"
with zipfile.ZipFile(f"{dir}/{name}-{version}-py3-none-any.whl", "w") as z:
    z.writestr(f"{name}/__init__.py", f"VALUE = {version!r}\\n")
    z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\\nName: {name}\\nVersion: {version}\\n")
    z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\\nGenerator: runplane-test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n")
    z.writestr(f"{info}/RECORD", f"{name}/__init__.py,,\\n{info}/METADATA,,\\n{info}/WHEEL,,\\n{info}/RECORD,,\\n")
`;
  execFileSync("python3", ["-c", script, dir, name, version]);
}
