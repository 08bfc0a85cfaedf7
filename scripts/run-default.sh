#!/usr/bin/env bash
# The main job on the shipped default table: install what is missing, build,
# compile tuning_tables/flash_ep4.table into build/flash_ep4.moeb, then print
# the inspection table and what a decode-sized key selects.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh moec
./build/bin/moec compile tuning_tables/flash_ep4.table -o build/flash_ep4.moeb
./build/bin/moec inspect build/flash_ep4.moeb
./build/bin/moec select build/flash_ep4.moeb --network flash --ep 4 --workspace 1024 --m 6
./build/bin/moec select build/flash_ep4.moeb --network flash-fused --ep 4 --workspace 1024 --m 6
