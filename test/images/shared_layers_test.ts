/**
 * Hosts that share a registry (`RUNPLANE_REGISTRY`) share the layers they build: the host that builds an
 * image's system layer pushes it, another host deploying the same image and packages pulls it instead of
 * running apt. Two real servers, each with its own data dir, one loopback registry.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { debianReachable, hostHas, type ImageAppsServer, startImageAppsServer } from "../_helpers/image_apps.ts";
import { imageToolsWork } from "../_helpers/images.ts";
import { sandboxWorks } from "../_helpers/sandbox.ts";

function figletApp(reference: string): Record<string, string> {
  return {
    "runplane.toml":
      `[deployment]\nname = "shared"\n[build]\nbase_image = "${reference}"\n[dependencies.apt]\nfiglet = "*"\n`,
    "main.py": `import subprocess\n\ndef run():\n`
      + `    return {"said": subprocess.run(["figlet", "-f", "term", "hi"], capture_output=True, text=True).stdout.strip()}\n`,
  };
}

describe("a registry shared by hosts", async () => {
  const ready = await imageToolsWork("shared layers") && await sandboxWorks("shared layers");
  const online = ready && await debianReachable();
  if (ready && !online) console.error("\n*** SKIPPED shared layers: deb.debian.org is unreachable from here.\n");
  let first: ImageAppsServer;
  let second: ImageAppsServer;

  before(async () => {
    if (!online) return;
    first = await startImageAppsServer({ shareRegistry: true });
    second = await startImageAppsServer({ registry: first.registry, shareRegistry: true });
  });

  after(async () => {
    await second?.close();
    await first?.close();
  });

  it("gives a system layer one host built to another, which runs no apt", { skip: !online }, async () => {
    assert.equal(await hostHas("figlet"), false, "the host lacks figlet: only the layer can have it");
    const built = await first.deployed("shared", figletApp(first.reference));
    assert.equal(built.deployment.status, "ready", `${built.deployment.error}\n${built.log}`);
    assert.match(built.log, /==> apt: built system layer sha256:[0-9a-f]{64}/);
    assert.match(built.log, /==> apt: pushed to 127\.0\.0\.1:\d+\/runplane/);
    const pulled = await second.deployed("shared", figletApp(second.reference));
    assert.equal(pulled.deployment.status, "ready", `${pulled.deployment.error}\n${pulled.log}`);
    assert.match(pulled.log, /==> apt: pulled system layer sha256:[0-9a-f]{64} from 127\.0\.0\.1:\d+\/runplane/);
    assert.doesNotMatch(pulled.log, /apt-get|Setting up figlet/, "the second host ran no apt");
    for (const host of [first, second]) {
      const call = await host.call("shared");
      assert.equal(call.status, 200, JSON.stringify(call.body));
      assert.equal(call.body.result?.said, "hi");
    }
  });
});
