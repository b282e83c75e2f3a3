#!/usr/bin/env bash
# The `cores` scenario on a lent many-core machine without Node (`scripts/device/make_kit.sh` here first,
# then the device tool's run with carry [".kit"]; [".kit", "dist"] without .kit/dist): unpacks Node and
# node_modules, prints the machine's facts, checks the GPU as server/gpus/ reads it (gpu_check.sh), and runs
# `npm run bench -- --scenario cores` on the built server, unjailed (no bubblewrap there), the load
# generator pinned to the last two cores with two threads and everything else to the others. Results and the
# log go to $OUT (cores_results.json, cores_log.txt). COUNTS (default 1,4,8,14), SECONDS_PER_ROUND (6).
set -uo pipefail
out="${OUT:-/tmp/cores-out}"
mkdir -p "$out" /tmp/kit/bin
xz -dc .kit/node.xz > /tmp/kit/bin/node && chmod +x /tmp/kit/bin/node
tar -C . -xJf .kit/node_modules.tar.xz
peer="$(command -v python3)"
export PATH="/tmp/kit/bin:$PATH"
cores="$(nproc)"
{
  echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo), $(free -g | awk '/Mem:/{print $2}') GiB"
  echo "node $(node --version), peer python $peer: $("$peer" -c 'import aiohttp, sys; print(sys.version.split()[0], "aiohttp", aiohttp.__version__)' 2>&1)"
  echo "kernel $(uname -r); cgroup: $(stat -fc %T /sys/fs/cgroup 2>&1); taskset: $(command -v taskset)"
  scripts/device/gpu_check.sh 2>&1 | tail -n 20
} 2>&1 | tee "$out/cores_log.txt"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
# .kit/dist: a build of the commit measured, made apart from a checkout where work goes on (else dist/).
[ -d .kit/dist ] && export BENCH_DIST="$PWD/.kit/dist"
export BENCH_SKIP_BUILD=1 BENCH_PEER_PYTHON="$peer" BENCH_CORES_COUNTS="${COUNTS:-1,4,8,14}" \
  BENCH_SECONDS="${SECONDS_PER_ROUND:-6}" RUNPLANE_SANDBOX=off
pin=()
if ((cores >= 8)); then # the generator's two cores apart; a small machine (a dry run here) shares them
  export BENCH_LOAD_CPUS="$((cores - 2))-$((cores - 1))" BENCH_LOAD_WORKERS=2
  pin=(taskset -c "0-$((cores - 3))")
fi
"${pin[@]}" node node_modules/tsx/dist/cli.mjs scripts/bench/mod.ts --scenario cores \
  2>&1 | tee -a "$out/cores_log.txt"
status=${PIPESTATUS[0]}
cp scripts/bench/cores_results.json "$out/" 2>/dev/null
exit "$status"
