#!/usr/bin/env bash
# Packs what `scripts/device/cores_bench.sh` needs on a lent machine that has no Node (the `device` tool's
# many-core machine): this machine's Node binary and node_modules without the build-time tools (TypeScript,
# TypeSpec, the linters, Playwright, the SQLite sources), both xz-compressed, into .kit/ (ignored: name
# `.kit` and `dist` in the run's carry). `npm ci && npm run build` first. About 45 MiB.
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.kit/' .git/info/exclude 2>/dev/null || echo '/.kit/' >> .git/info/exclude
[ -f dist/server/main.js ] || { echo "npm run build first"; exit 1; }
rm -rf .kit && mkdir .kit
xz -T0 -6 -c "$(readlink -f "$(command -v node)")" > .kit/node.xz
tar -C . -cf - \
  --exclude='node_modules/@redocly' --exclude='node_modules/@stoplight' \
  --exclude='node_modules/playwright-core' --exclude='node_modules/@typespec' --exclude='node_modules/es-abstract' \
  --exclude='node_modules/@scalar' --exclude='node_modules/prettier' --exclude='node_modules/@asyncapi' \
  --exclude='node_modules/rollup' --exclude='node_modules/@dprint' --exclude='node_modules/@types' \
  --exclude='node_modules/better-sqlite3/deps' --exclude='node_modules/better-sqlite3/src' \
  --exclude='node_modules/better-sqlite3/build/Release/obj*' --exclude='node_modules/better-sqlite3/build/Release/*.a' \
  --exclude='node_modules/.cache' --exclude='node_modules/@hey-api' \
  node_modules | xz -T0 -6 > .kit/node_modules.tar.xz
du -sh .kit/*
