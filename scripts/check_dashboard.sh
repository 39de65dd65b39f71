#!/usr/bin/env bash
# Checks configs/observe/grafana_dashboard.json (or FILE) against Grafana's dashboard schema:
# the TypeScript types Grafana generates from its schema (@grafana/schema, raw/dashboard/x:
# the classic dashboard JSON), by type-checking the file as an object literal of type Dashboard
# (unknown keys and wrong types are errors). Needs npm and the npm registry; not part of
# scripts/test.sh (a fresh CI machine has no npm).
#
#   scripts/check_dashboard.sh [FILE]     env: GRAFANA_SCHEMA=13.2.3 TYPESCRIPT=5
set -euo pipefail
HS_ROOT=$(cd "$(dirname "$0")/.." && pwd)
FILE=$(realpath "${1:-$HS_ROOT/configs/observe/grafana_dashboard.json}")
command -v npm > /dev/null || { echo "check_dashboard.sh: needs npm (apt-get install npm)"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
npm pack --silent "@grafana/schema@${GRAFANA_SCHEMA:-13.2.3}" > /dev/null
tar xzf grafana-schema-*.tgz
npm install --silent --no-audit --no-fund "typescript@${TYPESCRIPT:-5}" > /dev/null
{
  echo "import type { Dashboard } from './package/dist/types/raw/dashboard/x/types.gen';"
  echo -n "export const dashboard: Dashboard = "
  cat "$FILE"
  echo ";"
} > check.ts
if ./node_modules/.bin/tsc --noEmit --strict --target es2020 --moduleResolution node check.ts; then
  echo "$FILE: a Grafana dashboard (@grafana/schema ${GRAFANA_SCHEMA:-13.2.3}, raw/dashboard/x Dashboard)"
else
  echo "$FILE: not a Grafana dashboard (line numbers above are the file's + 1)"
  exit 1
fi
