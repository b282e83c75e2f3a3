import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { engines } from "../_helpers/postgres.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

const b64 = (text: string) => Buffer.from(text).toString("base64");

for (const engine of await engines()) {
  describe(`createBaseImageHash over HTTP (${engine})`, () => {
    let t: TestServer;
    before(async () => {
      t = await startTestServer({ engine });
    });
    after(() => t.close());

    function hash(appId: string, body: Record<string, unknown>) {
      return t.client.POST("/v3/projects/{project_id}/apps/{app_id}/base-image", {
        params: { path: { project_id: TEST_PROJECT, app_id: appId } },
        body,
      });
    }

    it("answers the same digest for the same request, new while no build made its virtualenv", async () => {
      const body = { aptPackages: ["curl", "git"], pipRequirements: ["requests==2.32.0"] };
      const first = await hash("app1", body);
      const second = await hash("app1", body);
      assert.equal(first.data?.status, "new");
      assert.equal(second.data?.status, "new", "asking again installs nothing: pip still has to run");
      assert.equal(first.data?.digest, second.data?.digest);
      assert.match(first.data!.digest, /^sha256:[0-9a-f]{64}$/);
    });

    it("ignores package order and duplicates", async () => {
      const a = await hash("order", { aptPackages: ["git", "curl", " curl "], condaPackages: ["b", "a"] });
      const b = await hash("order", { aptPackages: ["curl", "git"], condaPackages: ["a", "b", ""] });
      assert.equal(a.data?.digest, b.data?.digest);
    });

    it("keeps command order", async () => {
      const a = await hash("cmd", { shellCommands: [b64("echo 1"), b64("echo 2")] });
      const b = await hash("cmd", { shellCommands: [b64("echo 2"), b64("echo 1")] });
      assert.notEqual(a.data?.digest, b.data?.digest);
    });

    it("treats PEP 503 equivalent pip names as equal", async () => {
      const a = await hash("pip", { pipRequirements: ["Foo_Bar==1.0"] });
      const b = await hash("pip", { pipRequirements: ["foo-bar==1.0"] });
      assert.equal(a.data?.digest, b.data?.digest);
    });

    it("answers 400 naming shellCommands[1] for bad Base64", async () => {
      const { error, response } = await hash("bad", { shellCommands: [b64("ok"), "not base64!"] });
      assert.equal(response.status, 400);
      assert.match(error?.detail ?? "", /shellCommands\[1\]/);
      assert.deepEqual(error?.errors?.map((e) => e.path), ["body.shellCommands[1]"]);
    });

    it("answers 400 for unknown members and wrong types", async () => {
      const { error, response } = await hash("bad", { aptPackages: "curl", extra: true });
      assert.equal(response.status, 400);
      const paths = error?.errors?.map((e) => e.path).sort();
      assert.deepEqual(paths, ["body.aptPackages", "body.extra"]);
    });
  });
}
