#!/usr/bin/env bash
# The `cli` scenario (scripts/bench/scenarios/cli_start.ts) on a lent machine without Node
# (`scripts/device/make_kit.sh` here first, then the device tool's run with carry [".kit", "dist"]): what one
# `runplane` command costs from a checkout on a machine whose `node -e 0` is not the 2-core VM's ~110-160 ms.
# The checkout's compiled CLI is built there by the warm-up round (the kit leaves node_modules/.cache
# behind). The server runs unjailed (no bubblewrap there; `apps list` starts no replica). Results and the
# log go to $OUT (cli_results.json, cli_log.txt). ROUNDS (default 30).
set -uo pipefail
out="${OUT:-/tmp/cli-out}"
mkdir -p "$out" /tmp/kit/bin
xz -dc .kit/node.xz > /tmp/kit/bin/node && chmod +x /tmp/kit/bin/node
tar -C . -xJf .kit/node_modules.tar.xz
export PATH="/tmp/kit/bin:$PATH"
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo), node $(node --version)" | tee "$out/cli_log.txt"
export RUNPLANE_SANDBOX=off BENCH_CLI_ROUNDS="${ROUNDS:-30}"
node node_modules/tsx/dist/cli.mjs scripts/bench/scenarios/cli_start.ts 2>&1 | tee -a "$out/cli_log.txt"
status=${PIPESTATUS[0]}
cp scripts/bench/cli_results.json "$out/" 2>/dev/null
exit "$status"
