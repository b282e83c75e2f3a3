import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { ROOT } from "../../scripts/generate.ts";
import { redoclyProblems, spectralProblems } from "../../scripts/openapi_lint.ts";

describe("the OpenAPI linters of npm run check", () => {
  let dir: string;
  let flawed: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "runplane-lint-"));
    const document = JSON.parse(await readFile(join(ROOT, "generated", "openapi.json"), "utf8"));
    // A component nothing refers to: a warning, not an error, for both.
    document.components.schemas.NeverUsed = { type: "string" };
    flawed = join(dir, "openapi.json");
    await writeFile(flawed, JSON.stringify(document, null, 2));
  });
  after(() => rm(dir, { recursive: true, force: true }));

  it("Redocly (recommended) reports nothing on generated/openapi.json", () => {
    assert.deepEqual(redoclyProblems("generated/openapi.json"), []);
  });

  it("Spectral (spectral:oas) reports nothing on generated/openapi.json", () => {
    assert.deepEqual(spectralProblems("generated/openapi.json"), []);
  });

  it("both report a warning, which fails the check", () => {
    assert.deepEqual(redoclyProblems(flawed), [
      'warn no-unused-components at #/components/schemas/NeverUsed: Component: "NeverUsed" is never used.',
    ]);
    assert.deepEqual(spectralProblems(flawed), [
      "warn oas3-unused-component at #/components/schemas/NeverUsed: Potentially unused component has been detected.",
    ]);
  });
});
