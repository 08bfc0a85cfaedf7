#!/usr/bin/env bash
# Regenerates every shipped tuning table from its spec (tuning_tables/specs)
# with `moec tune`, and writes each table's candidate CSV (every candidate
# with its resources, rejection reason and predicted time) and predictions
# CSV (every surviving candidate's predicted time at every key) under
# build/tuning/. docs/tuning.md describes the spec, the search space and the
# figures. The same inputs give the same tables byte for byte.
#
#   scripts/regenerate-tables.sh [-j JOBS] [--no-cache]
#
# Needs build/bin/moec (scripts/build.sh moec). MOEC overrides the binary.
set -euo pipefail
cd "$(dirname "$0")/.."
moec=${MOEC:-build/bin/moec}
csvs=build/tuning
mkdir -p "$csvs"
for spec in tuning_tables/specs/*.spec; do
  name=$(basename "$spec" .spec)
  "$moec" tune "$spec" -o "tuning_tables/$name.table" \
    --csv "$csvs/$name.candidates.csv" \
    --predictions "$csvs/$name.predictions.csv" "$@"
done
