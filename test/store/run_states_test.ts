/**
 * A run's modes, states and failure types are listed once (`server/store/run_states.ts`) and equal the
 * contract's (`generated/openapi.json`, from `spec/runs.tsp`): a status or type added to one and not the
 * other fails here.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, it } from "node:test";
import { TERMINAL_STATUSES as CLIENT_TERMINAL_STATUSES } from "../../client/mod.ts";
import type { components } from "../../generated/api.d.ts";
import { PROBLEM_KINDS } from "../../server/problems/mod.ts";
import { failureFromRunError } from "../../server/runtime/mod.ts";
import {
  isTerminal,
  OPEN_RUN_STATUSES,
  PASSING_START_FAILURE_TYPES,
  RUN_FAILURE_TYPES,
  RUN_MODES,
  RUN_START_FAILURE_TYPES,
  RUN_STATUSES,
  type RunMode,
  type RunStatus,
  sqlStatus,
  sqlStatusList,
  TERMINAL_RUN_STATUSES,
} from "../../server/store/run_states.ts";

interface Schema {
  enum?: string[];
  description?: string;
  properties?: Record<string, Schema>;
}

const CONTRACT = JSON.parse(
  readFileSync(new URL("../../generated/openapi.json", import.meta.url), "utf8"),
) as { components: { schemas: Record<string, Schema> } };

/** The names a contract description marks as code that read as a status or type (`timeout`, not `ValueError`). */
function namedIn(description: string | undefined): string[] {
  return [...(description ?? "").matchAll(/`([a-z][a-z_-]*)`/g)].map((match) => match[1]);
}

// The compiler holds the type equal to the generated one, both ways.
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const statusTypeIsTheContracts: Same<RunStatus, components["schemas"]["RunStatus"]> = true;
const modeTypeIsTheContracts: Same<RunMode, components["schemas"]["RunMode"]> = true;

describe("run modes", () => {
  it("are the contract's RunMode enum, in its order", () => {
    assert.ok(modeTypeIsTheContracts);
    assert.deepEqual([...RUN_MODES], CONTRACT.components.schemas.RunMode.enum);
  });
});

describe("run statuses", () => {
  it("are the contract's RunStatus enum, in its order", () => {
    assert.ok(statusTypeIsTheContracts);
    assert.deepEqual([...RUN_STATUSES], CONTRACT.components.schemas.RunStatus.enum);
  });

  it("end in the statuses the contract calls terminal; the others are open", () => {
    assert.deepEqual(
      [...TERMINAL_RUN_STATUSES].sort(),
      namedIn(CONTRACT.components.schemas.RunStatus.description).sort(),
    );
    assert.deepEqual([...OPEN_RUN_STATUSES, ...TERMINAL_RUN_STATUSES].sort(), [...RUN_STATUSES].sort());
  });

  it("that end are the client's TERMINAL_STATUSES (the client does not load the server, so it lists them too)", () => {
    assert.deepEqual([...CLIENT_TERMINAL_STATUSES], [...TERMINAL_RUN_STATUSES]);
  });

  it("isTerminal is true for an ended run's status only", () => {
    assert.deepEqual(RUN_STATUSES.filter(isTerminal), [...TERMINAL_RUN_STATUSES]);
    for (const status of OPEN_RUN_STATUSES) assert.equal(isTerminal(status), false, status);
    assert.equal(isTerminal("succeeded"), false);
  });

  it("are written into statement texts as SQL literals", () => {
    assert.equal(sqlStatus("queued"), "'queued'");
    assert.equal(sqlStatusList(OPEN_RUN_STATUSES), "('queued', 'running')");
  });
});

describe("run failure types", () => {
  it("are the types the contract's RunError.type names, those of a run that could not start included", () => {
    const named = namedIn(CONTRACT.components.schemas.RunError.properties?.type.description);
    assert.deepEqual([...RUN_FAILURE_TYPES, ...RUN_START_FAILURE_TYPES].sort(), named.sort());
  });

  it("are the fixed kinds the runtime's RunFailure knows: none is read back as an exception's name", () => {
    const runId = "run_0000000000aaaaaaaaaaaaaaaa";
    for (const type of RUN_FAILURE_TYPES) {
      assert.equal(failureFromRunError(runId, { type, message: "m" }).options.exceptionType, undefined, type);
    }
    assert.equal(failureFromRunError(runId, { type: "ValueError", message: "m" }).options.exceptionType, "ValueError");
  });

  it("of a run that could not start are problem kinds with underscores; the passing ones among them", () => {
    for (const type of RUN_START_FAILURE_TYPES) assert.ok(type.replace(/_/g, "-") in PROBLEM_KINDS, type);
    for (const type of PASSING_START_FAILURE_TYPES) assert.ok(RUN_START_FAILURE_TYPES.includes(type), type);
    for (const type of RUN_START_FAILURE_TYPES) assert.ok(!(RUN_FAILURE_TYPES as readonly string[]).includes(type));
  });
});
