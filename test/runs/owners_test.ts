/**
 * What a host knows of the lease owners recorded in its owners folder: its own process is alive, a pid
 * that no longer exists is dead, a pid reused by another process is dead, another host's owner and an
 * untrusted folder are unknown (left to the lease).
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { deadOwners, ownerState, registerOwner } from "../../server/runs/_owners.ts";
import { deferCleanup } from "../_helpers/cleanup.ts";

/** The pid of a process that has exited. */
function goneProcessPid(): number {
  const child = spawnSync(process.execPath, ["-e", "process.stdout.write(String(process.pid))"]);
  return Number(child.stdout.toString());
}

describe("lease owners of this host", () => {
  const defer = deferCleanup();
  /** A fresh owners folder with this process registered as `owner-self`, and that record. */
  function ownersFolder(): { dir: string; record: Record<string, unknown> } {
    const parent = mkdtempSync(join(tmpdir(), "runplane-owners-"));
    defer(() => rm(parent, { recursive: true, force: true }));
    const dir = join(parent, "owners");
    registerOwner(dir, "owner-self");
    return { dir, record: JSON.parse(readFileSync(join(dir, "owner-self.json"), "utf8")) };
  }

  it("sees its own process alive and a pid that no longer exists dead", () => {
    const { dir, record } = ownersFolder();
    assert.equal(ownerState(dir, "owner-self"), "alive");
    writeFileSync(join(dir, "owner-gone.json"), JSON.stringify({ ...record, pid: goneProcessPid() }));
    assert.equal(ownerState(dir, "owner-gone"), "dead");
    assert.deepEqual(deadOwners(dir, "owner-self"), ["owner-gone"]);
  });

  it("takes a pid that exists but started at another time (reused) for dead, and one that started then for alive", () => {
    const { dir, record } = ownersFolder();
    // The parent (the test runner) exists; this process's start time is not its.
    writeFileSync(join(dir, "owner-reused.json"), JSON.stringify({ ...record, pid: process.ppid }));
    assert.equal(ownerState(dir, "owner-reused"), "dead");
    const stat = readFileSync(`/proc/${process.ppid}/stat`, "utf8");
    const started = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19];
    writeFileSync(join(dir, "owner-parent.json"), JSON.stringify({ ...record, pid: process.ppid, started }));
    assert.equal(ownerState(dir, "owner-parent"), "alive");
  });

  it("leaves another host's owner, an unknown owner and a folder others may write to the lease", () => {
    const { dir, record } = ownersFolder();
    writeFileSync(join(dir, "owner-far.json"), JSON.stringify({ ...record, host: "another-host", pid: 1 }));
    assert.equal(ownerState(dir, "owner-far"), "unknown");
    assert.equal(ownerState(dir, "owner-never"), "unknown");
    assert.equal(ownerState(dir, "../owner-self"), "unknown");
    // Anyone could plant a record here: nothing in it is believed.
    chmodSync(dir, 0o777);
    assert.equal(ownerState(dir, "owner-self"), "unknown");
  });
});
