/** The sandbox's bubblewrap arguments, read without starting anything. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { bubblewrapArgs } from "../../server/sandbox/_policy.ts";

const FILES = { passwd: "/s/passwd", group: "/s/group", hosts: "/s/hosts", resolvConf: "/s/resolv.conf" };
const OPTIONS = { identity: { kind: "user" } as const, files: FILES, fds: { info: 5, block: 6 } };

describe("the policy's device nodes", () => {
  it("binds the spec's devices into the jail's own minimal /dev, after it is made", () => {
    const args = bubblewrapArgs({
      projectId: "p",
      cwd: "/",
      egress: false,
      env: {},
      devices: [{ source: "/fake/dev/nvidia3", target: "/dev/nvidia3" }, {
        source: "/fake/dev/nvidiactl",
        target: "/dev/nvidiactl",
      }],
    }, OPTIONS);
    const dev = args.findIndex((arg, at) => arg === "--dev" && args[at + 1] === "/dev");
    const bound = args.flatMap((arg, at) => (arg === "--dev-bind" ? [[args[at + 1], args[at + 2], at]] : []));
    assert.deepEqual(bound.map(([source, target]) => [source, target]), [
      ["/fake/dev/nvidia3", "/dev/nvidia3"],
      ["/fake/dev/nvidiactl", "/dev/nvidiactl"],
    ]);
    assert.ok(
      dev >= 0 && bound.every(([, , at]) => (at as number) > dev),
      "bound after /dev is made, not hidden by it",
    );
  });

  it("binds no device without them", () => {
    const args = bubblewrapArgs({ projectId: "p", cwd: "/", egress: false, env: {} }, OPTIONS);
    assert.equal(args.includes("--dev-bind"), false);
  });
});
