/**
 * `copyInto`, the upload's writer, with a file handle of the test's own: however an upload ends, no write
 * is still in flight when it settles (its caller closes the handle next, and a write failing after that
 * would be an unhandled rejection; a local CI run met one, "ENOSPC: no space left on device, write"), and a
 * write that fails while the body's next chunk is still awaited is observed at once (CI met that one too).
 */
import assert from "node:assert/strict";
import type { FileHandle } from "node:fs/promises";
import { describe, it } from "node:test";
import { copyInto } from "../../server/volumes/_volume_files.ts";

const MIB = 1024 * 1024;

/** A handle whose every write fails with ENOSPC after `delayMs`, counting the writes in flight. */
function fullDisk(delayMs: number) {
  const state = { inFlight: 0, writes: 0 };
  const handle = {
    writev() {
      state.inFlight++;
      state.writes++;
      return new Promise((_, reject) =>
        setTimeout(() => {
          state.inFlight--;
          reject(Object.assign(new Error("ENOSPC: no space left on device, write"), { code: "ENOSPC" }));
        }, delayMs)
      );
    },
  } as unknown as FileHandle;
  return { handle, state };
}

async function* chunks(count: number, options: { breakAfter?: number; gapMs?: number } = {}) {
  for (let i = 0; i < count; i++) {
    if (i === options.breakAfter) throw new Error("the client went away");
    if (options.gapMs) await new Promise((resolve) => setTimeout(resolve, options.gapMs));
    yield new Uint8Array(MIB);
  }
}

describe("copyInto", () => {
  it("refused past its room while a write is in flight, settles after that write", async () => {
    const { handle, state } = fullDisk(100);
    // 1 MiB fits and is written (slowly); the rest is past the limit, dropped until the drain's 16 MiB.
    await assert.rejects(copyInto(handle, chunks(40), 1 * MIB), /does not fit in the volume/);
    assert.equal(state.writes, 1);
    assert.equal(state.inFlight, 0, "no write is left in flight");
  });

  it("a body that breaks off while a write is in flight settles after that write", async () => {
    const { handle, state } = fullDisk(100);
    await assert.rejects(copyInto(handle, chunks(40, { breakAfter: 1 }), 64 * MIB), /went away/);
    assert.equal(state.inFlight, 0, "no write is left in flight");
  });

  it("a write that fails while the next chunk is awaited is never an unhandled rejection", async () => {
    // What CI met: the body's next chunk is slower than the disk's ENOSPC, so the failed write waits,
    // unobserved, for a loop that is still reading the socket.
    const { handle } = fullDisk(10);
    const unhandled: unknown[] = [];
    const record = (reason: unknown) => unhandled.push(reason);
    process.on("unhandledRejection", record);
    try {
      await assert.rejects(copyInto(handle, chunks(4, { gapMs: 100 }), 64 * MIB), /does not fit in the volume/);
      await new Promise((resolve) => setTimeout(resolve, 50));
    } finally {
      process.off("unhandledRejection", record);
    }
    assert.deepEqual(unhandled, []);
  });
});
