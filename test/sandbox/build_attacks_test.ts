/**
 * A hostile tenant's attacks through the build pipeline, each tried by real deployments against a real,
 * jailed server (issue 43): a bundle's files standing in for the standard library in the virtualenv's steps,
 * and links left where the root server later writes, chowns, reads or removes. Each succeeded before.
 */
import assert from "node:assert/strict";
import { chmod, lstat, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { identityFor } from "../../server/sandbox/_identity.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { bundleOf, deployBundle } from "../_helpers/deployments.ts";
import { sandboxWorks } from "../_helpers/sandbox.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { writeWheel } from "../_helpers/wheels.ts";

const OTHER_PROJECT = "p-other";

/** Plants a `.pth` hook in every virtualenv it can reach; prints what it did, so a build log shows it. */
const PLANT = `
import glob, os, sys
print("ATTACK RAN " + __file__, flush=True)

def plant():
    for root in [os.environ.get("VIRTUAL_ENV") or "", sys.prefix] + sys.argv[1:]:
        for site in glob.glob(os.path.join(root, "lib", "python3*", "site-packages")):
            try:
                with open(os.path.join(site, "zz_planted.pth"), "w") as f:
                    f.write("import builtins; builtins.PLANTED = 'by project A'\\n")
                print("ATTACK PLANTED " + site, flush=True)
            except OSError as e:
                print("ATTACK REFUSED " + site + ": " + str(e), flush=True)
`;

/** A module that stands in for `name` of the standard library: plants, then runs the real one. */
function impostor(name: string): string {
  return `${PLANT}
if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    import runpy
    try:
        runpy.run_module(${JSON.stringify(name)}, run_name="__main__", alter_sys=True)
    finally:
        plant()
else:
    plant()
`;
}

const PIP_TOML = `[deployment]\n\n[dependencies.pip]\nrp_shared = "1.0"\n`;

/** Project A's bundle: every file that could stand in for a module a virtualenv's steps import. */
const POISONED_BUNDLE = {
  "runplane.toml": PIP_TOML,
  "venv.py": impostor("venv"),
  "pip.py": impostor("pip"),
  "site.py": PLANT + "plant()\n",
  "sitecustomize.py": PLANT + "plant()\n",
  "usercustomize.py": PLANT + "plant()\n",
  "zz_bundle.pth": "import os; print('ATTACK RAN a .pth of the bundle', flush=True)\n",
  "main.py": `
import builtins, glob, os, sys

def run():
    tried = {}
    for site in glob.glob(os.path.join(sys.prefix, "lib", "python3*", "site-packages")):
        try:
            with open(os.path.join(site, "zz_planted.pth"), "w") as f:
                f.write("import builtins; builtins.PLANTED = 'by project A at run time'\\n")
            tried[site] = "written"
        except OSError as e:
            tried[site] = type(e).__name__
    return {"tried": tried, "prefix": sys.prefix}
`,
};

/** Project B's app: the same dependencies; it reports whether anything planted ran in its process. */
const VICTIM_BUNDLE = {
  "runplane.toml": PIP_TOML,
  "main.py": `
import builtins, rp_shared

def run():
    return {"planted": getattr(builtins, "PLANTED", None), "value": rp_shared.VALUE}
`,
};

interface HostFile {
  path: string;
  uid: number;
  gid: number;
  mode: number;
  text: string;
}

async function snapshot(path: string): Promise<HostFile> {
  const s = await lstat(path);
  return { path, uid: s.uid, gid: s.gid, mode: s.mode, text: await readFile(path, "utf8") };
}

/** Every entry under `dir` (links not followed), with its owner. */
async function owners(dir: string): Promise<Map<string, number>> {
  const found = new Map<string, number>();
  for (const name of await readdir(dir, { recursive: true })) found.set(name, (await lstat(join(dir, name))).uid);
  return found;
}

if (await sandboxWorks("the build attack tests")) {
  describe("a hostile tenant's build cannot reach another project or the host", () => {
    let t: TestServer;
    let root: string;
    let deployA: string;
    let deployB: string;
    let tokenB: string;
    /** Host files outside the data dir, owned by root: a private one, a setuid one, a folder with a file. */
    let victim: string;
    let setuid: string;
    let victimDir: string;
    let secret: string;

    before(async () => {
      root = await mkdtemp(join(tmpdir(), "runplane-build-attacks-"));
      const wheels = join(root, "wheels");
      await mkdir(wheels);
      writeWheel(wheels, "rp_shared", "1.0");
      writeWheel(wheels, "rp_private", "1.0");
      victim = join(root, "victim");
      await writeFile(victim, "victim-original\n", { mode: 0o600 });
      setuid = join(root, "setuid");
      await writeFile(setuid, "#!/bin/sh\n", { mode: 0o755 });
      await chmod(setuid, 0o4755);
      victimDir = join(root, "victim-dir");
      await mkdir(victimDir);
      await writeFile(join(victimDir, "kept"), "kept\n");
      secret = join(root, "secret");
      await writeFile(secret, `[deployment]\nname = "SECRET-${process.pid}"\n`, { mode: 0o600 });
      t = await startTestServer({ env: { RUNPLANE_PIP_FIND_LINKS: wheels } });
      deployA = (await t.mintToken({ scopes: ["deploy", "rest", "run"] })).token;
      tokenB = (await t.mintToken({ projectId: OTHER_PROJECT, scopes: ["deploy", "rest", "run"] })).token;
      deployB = tokenB;
    });
    after(async () => {
      await t?.close();
      await rm(root, { recursive: true, force: true });
    });

    async function call(project: string, app: string, token: string): Promise<Record<string, unknown>> {
      const response = await checkedFetch(`${t.url}/v4/${project}/${app}/run`, {
        method: "POST",
        headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
        body: "{}",
      });
      const text = await response.text();
      assert.equal(response.status, 200, text);
      return (JSON.parse(text) as { result: Record<string, unknown> }).result;
    }

    it("a bundle's venv.py, pip.py, site.py, sitecustomize.py, usercustomize.py and .pth never touch a virtualenv another project uses", async () => {
      const a = await deployBundle(t, "poisoner", await bundleOf(POISONED_BUNDLE), deployA);
      const logA = a.lines.join("\n");
      assert.equal(a.status, "ready", `${a.error}\n${logA}`);
      assert.match(logA, /==> pip: new virtualenv/);
      assert.doesNotMatch(logA, /ATTACK/, "a file of the bundle ran in the virtualenv's steps");

      const b = await deployBundle(t, "victim", await bundleOf(VICTIM_BUNDLE), deployB, { project: OTHER_PROJECT });
      const logB = b.lines.join("\n");
      assert.equal(b.status, "ready", `${b.error}\n${logB}`);
      assert.match(logB, /==> pip: cached virtualenv/, "projects with the same inputs still share the layer");

      // A's own code, at run time, cannot write the layer either: it is mounted read-only.
      const tried = (await call(TEST_PROJECT, "poisoner", t.token)).tried as Record<string, string>;
      assert.ok(Object.keys(tried).length > 0, "the app found its virtualenv's site-packages");
      for (const [site, outcome] of Object.entries(tried)) assert.notEqual(outcome, "written", site);

      assert.deepEqual(await call(OTHER_PROJECT, "victim", tokenB), { planted: null, value: "1.0" });

      const venvs = join(t.dataDir, "venvs");
      const layer = (await readdir(venvs)).find((name) => /^[0-9a-f]{64}$/.test(name))!;
      const files = await owners(join(venvs, layer));
      assert.ok(![...files.keys()].some((name) => name.includes("planted")), "a hook was planted");
      if (process.getuid?.() === 0) {
        const tenants = [TEST_PROJECT, OTHER_PROJECT].map((p) => (identityFor(p) as { uid: number }).uid);
        const builder = (await lstat(join(venvs, layer))).uid;
        assert.ok(!tenants.includes(builder) && builder !== 0, `the layer is owned by ${builder}`);
        for (const [name, uid] of files) {
          // The ready marker is the server's; everything else the layer's builder made.
          assert.equal(uid, name === ".runplane-ready" ? 0 : builder, `${name} is owned by ${uid}`);
        }
      }
    });

    it("links a build left in its folder never lead the server to write, chown or read a host file", async () => {
      const before = [await snapshot(victim), await snapshot(setuid)];
      const toml = `[deployment]\n\n[build]\npre_build_commands = ${
        JSON.stringify([
          `ln -s ${victim} victim_link`,
          `ln -s ${setuid} setuid_link`,
          `ln -s ${victim} .runplane-deployment.json`,
        ])
      }\nshell_commands = ${JSON.stringify([`ln -sf ${secret} runplane.toml`, "echo built > built.txt"])}\n`;
      const main = "def run():\n    return open('built.txt').read()\n";
      const end = await deployBundle(t, "linker", await bundleOf({ "runplane.toml": toml, "main.py": main }), deployA);
      const log = end.lines.join("\n");
      assert.equal(end.status, "ready", `${end.error}\n${log}`);
      assert.deepEqual([await snapshot(victim), await snapshot(setuid)], before, "a host file was changed");
      assert.equal((await stat(setuid)).mode & 0o4000, 0o4000, "the setuid file lost its bit");
      // Served from the runplane.toml read before the build's commands ran, not from the link.
      assert.equal(await call(TEST_PROJECT, "linker", t.token), "built\n" as unknown);
      const apps = await checkedFetch(`${t.url}/v3/projects/${TEST_PROJECT}/apps`, {
        headers: { Authorization: `Bearer ${t.token}` },
      });
      assert.doesNotMatch(await apps.text(), /SECRET-/);
      assert.doesNotMatch(t.rawLogs(), /SECRET-/, "the server read the host file through the link");
    });

    it("a failed build's folder is removed without following the links its commands left", async () => {
      const toml = `[deployment]\n\n[build]\npre_build_commands = ${
        JSON.stringify([`mkdir -p sub && ln -s ${victimDir} sub/dir_link && ln -s ${victim} file_link`])
      }\nshell_commands = ["exit 3"]\n`;
      const end = await deployBundle(t, "remover", await bundleOf({ "runplane.toml": toml, "main.py": "" }), deployA);
      assert.equal(end.status, "failed");
      assert.equal(await readFile(join(victimDir, "kept"), "utf8"), "kept\n");
      assert.equal(await readFile(victim, "utf8"), "victim-original\n");
    });

    it("a project's own virtualenv (an interpreter in its bundle) cannot make the server write through its links", async () => {
      const before = await snapshot(victim);
      const mypython = `#!/bin/sh\npython3 "$@" || exit $?\n`
        + `for dir in "$@"; do [ -d "$dir/bin" ] && ln -s ${victim} "$dir/.runplane-ready"; done\nexit 0\n`;
      const toml = `[deployment]\npython = "./mypython"\n\n[dependencies.pip]\nrp_private = "1.0"\n`;
      const bundle = await bundleOf({ "runplane.toml": toml, "main.py": "def run():\n    return 1\n", mypython });
      const end = await deployBundle(t, "own-layer", bundle, deployA);
      const log = end.lines.join("\n");
      assert.deepEqual(await snapshot(victim), before, "the server wrote through the layer's link");
      assert.match(
        log,
        /==> pip: new project virtualenv/,
        "an interpreter of the bundle makes the layer the project's",
      );
      assert.equal(end.status, "failed", log);
    });
  });
}
