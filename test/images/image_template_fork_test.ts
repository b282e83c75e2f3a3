/**
 * Forked cold starts inside an image (issue 46): an app with `[build] base_image` gets a template per
 * version like any Python app (RUNPLANE_FORK_REPLICAS, on by default), which imports `main.py` once in the
 * image's jail and forks its replicas there. Proved as test/runtime/replica_template_test.ts proves it: the
 * process that imported the app is not the one that answers, but its parent; and what answers still sees
 * the image's system (Debian trixie, Python 3.13), not the host's (bookworm, 3.11).
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { waitFor } from "../_helpers/apps.ts";
import { type ImageAppsServer, startImageAppsServer } from "../_helpers/image_apps.ts";
import { imageToolsWork } from "../_helpers/images.ts";
import { sandboxWorks } from "../_helpers/sandbox.ts";
import { TEST_PROJECT } from "../_helpers/server.ts";

/** Says which process imported it, which answers, and the system both see. */
const FORKED_APP = `import os, platform, time

IMPORT_PID = os.getpid()

def run(pause=0):
    time.sleep(pause)
    with open("/etc/os-release") as f:
        release = dict(line.rstrip("\\n").split("=", 1) for line in f if "=" in line)
    return {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "import_pid": IMPORT_PID,
        "codename": release.get("VERSION_CODENAME"),
        "python": platform.python_version(),
    }
`;

type Seen = { pid: number; ppid: number; import_pid: number; codename: string; python: string };

describe("replicas of an image app forked from its template", async () => {
  const ready = await imageToolsWork("forks in images") && await sandboxWorks("forks in images");
  let apps: ImageAppsServer;

  before(async () => {
    if (ready) apps = await startImageAppsServer();
  });

  after(async () => {
    await apps?.close();
  });

  it("forks each replica from the one template that imported main.py in the image, which each still sees", {
    skip: !ready,
  }, async () => {
    const { deployment, log } = await apps.deployed("forked", {
      "runplane.toml": `[deployment]\nname = "forked"\n[build]\nbase_image = "${apps.reference}"\n`
        + "[scaling]\nmax_replicas = 2\ncooldown = 60\n",
      "main.py": FORKED_APP,
    });
    assert.equal(deployment.status, "ready", `${deployment.error}\n${log}`);
    const call = async (pause: number) => {
      const response = await apps.request(`/v4/${TEST_PROJECT}/forked/run`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ pause }),
      });
      const body = await response.json();
      assert.equal(response.status, 200, JSON.stringify(body));
      return (body as { result: Seen }).result;
    };
    // The first call holds the first replica's only slot: the second needs a second replica.
    const first = call(3);
    const runtime = apps.server.server.context.runtime;
    const states = () => runtime.replicaStates().find((s) => s.app === `${TEST_PROJECT}/forked`);
    await waitFor(() => states()?.busy === 1, "the first replica to be ready and busy", 60_000);
    const second = await call(0);
    const busy = await first;
    for (const seen of [busy, second]) {
      assert.notEqual(seen.pid, seen.import_pid, `the replica did not import the app itself: ${JSON.stringify(seen)}`);
      assert.equal(seen.ppid, seen.import_pid, "its parent is the process that imported the app: the template");
      assert.equal(seen.codename, "trixie", "the image's /etc/os-release, not the host's bookworm");
      assert.match(seen.python, /^3\.13\./, "the image's Python, not the host's 3.11");
    }
    assert.notEqual(second.pid, busy.pid, "two replicas");
    assert.equal(second.import_pid, busy.import_pid, "one template");
    const refused = apps.server.logs.filter((line) =>
      line.app === `${TEST_PROJECT}/forked` && /template (did not load|would be unsafe)/.test(String(line.msg))
    );
    assert.deepEqual(refused, [], "no cold start for want of a template");
  });
});
