/**
 * Whether replicas' cgroups can be made on this machine (root, or a delegated cgroup): the resource-limit
 * tests need them, skip loudly without them, and fail instead under RUNPLANE_TEST_REQUIRE_CGROUPS=1 (CI).
 */
import { createLogger } from "../../server/log.ts";
import { createCgroups } from "../../server/sandbox/mod.ts";

const REQUIRED = process.env.RUNPLANE_TEST_REQUIRE_CGROUPS === "1";

let probed: Promise<string | null> | undefined;

/** Whether cgroups work here; otherwise says loudly that `what` was skipped (or throws in CI). */
export async function cgroupsWork(what: string): Promise<boolean> {
  probed ??= createCgroups("auto", {
    logger: createLogger({ level: "silent" }),
    owner: "rp_testprobe",
    pids: 64,
  }).then(async (cgroups) => {
    await cgroups.close();
    return cgroups.status.version ? null : cgroups.status.problems.join("; ");
  });
  const problem = await probed;
  if (problem === null) return true;
  const message = `${what}: ${problem}`;
  if (REQUIRED) throw new Error(`${message}, and RUNPLANE_TEST_REQUIRE_CGROUPS=1 requires them`);
  console.error(
    `\n*** SKIPPED ${message}.\n*** Run as root (or in a delegated cgroup) with the memory, cpu and pids controllers;\n`
      + `*** RUNPLANE_TEST_REQUIRE_CGROUPS=1 fails instead of skipping.\n`,
  );
  return false;
}
