#!/usr/bin/env bash
# Installs everything moec needs to build and test on Debian 12 (bookworm).
# Idempotent: when every package is already present it only checks and exits.
#   --optional  also the packages of optional checks: chromium, for looking
#               at `moec report` pages (scripts/report-screenshot.sh). CI
#               does not pass it and no test needs it.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config python3
  llvm-22 llvm-22-dev llvm-22-tools lld-22 liblld-22-dev
  libmlir-22-dev mlir-22-tools
  nlohmann-json3-dev libcli11-dev catch2 zlib1g-dev libzstd-dev
  python3-pytest python3-numpy python3-torch python3-venv python3-pip
  clang-22 libclang-rt-22-dev
)
if [ "${1:-}" = "--optional" ]; then
  packages+=(chromium)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo_cmd=""
if [ "$(id -u)" -ne 0 ]; then sudo_cmd="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo_cmd apt-get update -qq
$sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
