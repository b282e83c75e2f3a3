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

describe("the policy's descriptors", () => {
  const spec = { projectId: "p", cwd: "/", egress: true, env: {} };
  const after = (args: string[], flag: string) => (args.includes(flag) ? args[args.indexOf(flag) + 1] : undefined);

  it("holds the command on its block until the network is in", () => {
    const args = bubblewrapArgs(spec, OPTIONS);
    assert.deepEqual([after(args, "--info-fd"), after(args, "--block-fd")], ["5", "6"]);
  });

  it("names the child on info alone when the command waits on a gate of its own", () => {
    const args = bubblewrapArgs(spec, { ...OPTIONS, fds: { info: 5 } });
    assert.equal(after(args, "--info-fd"), "5");
    assert.equal(args.includes("--block-fd"), false);
  });
});
