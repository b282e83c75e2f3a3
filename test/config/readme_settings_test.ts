import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, it } from "node:test";
import { ROOT } from "../../scripts/generate.ts";
import { SETTINGS, settingsMarkdown } from "../../server/config.ts";
import { runMain } from "../_helpers/cli.ts";

describe("settings documentation", () => {
  it("docs/configuration.md's table lists every setting with its default", async () => {
    const page = await readFile(join(ROOT, "docs", "configuration.md"), "utf8");
    assert.ok(
      page.includes(settingsMarkdown()),
      "docs/configuration.md's table differs from SETTINGS: paste settingsMarkdown() into it",
    );
  });

  it("runplane serve --help lists every setting, its variable and default", async () => {
    const outcome = await runMain(["serve", "--help"]);
    assert.equal(outcome.code, 0);
    for (const setting of SETTINGS) {
      assert.match(outcome.stdout, new RegExp(`${setting.flag}\\s+${setting.env}\\s`), setting.env);
      assert.ok(outcome.stdout.includes(`(default: ${setting.default})`), `${setting.env} default`);
    }
  });
});
