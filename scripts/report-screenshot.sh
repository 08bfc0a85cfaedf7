#!/usr/bin/env bash
# Writes `moec report` for a bundle and renders it with headless Chromium,
# to look at the page as a user would (docs/report.md).
#   scripts/report-screenshot.sh BUNDLE OUT.png [WIDTH HEIGHT]
# Needs chromium (scripts/install-deps.sh --optional). The HTML is kept next
# to the PNG (OUT.html).
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 BUNDLE OUT.png [WIDTH HEIGHT]" >&2
  exit 2
fi
bundle=$1 png=$2 width=${3:-1400} height=${4:-2400}
root=$(cd "$(dirname "$0")/.." && pwd)
moec=${MOEC:-$root/build/bin/moec}
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "$0: chromium not found (scripts/install-deps.sh --optional)" >&2
  exit 3
fi
html=${png%.png}.html
"$moec" report "$bundle" -o "$html"
# --no-sandbox: Chromium refuses to run its sandbox as root (containers).
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars \
  --window-size="$width,$height" --screenshot="$png" \
  "file://$(cd "$(dirname "$html")" && pwd)/$(basename "$html")" \
  > /dev/null 2>&1
test -s "$png"
echo "$png ($html)"
