#!/usr/bin/env node
// The `runplane` executable: loads the TypeScript CLI through tsx's loader.
import { register } from "tsx/esm/api";

register();
const { main } = await import("../server/cli/mod.ts");
process.exitCode = await main(process.argv.slice(2));
