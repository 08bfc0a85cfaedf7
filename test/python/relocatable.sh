#!/usr/bin/env bash
# The Python tests on a machine without LLVM 22 (docs/python.md, "Elsewhere").
#
#   test/python/relocatable.sh pack BUILD DIR
#     strips and xz-compresses BUILD/bin/moec-static and
#     BUILD/lib/static/libmoec_emulated_hip.so (cmake -DMOEC_STATIC=ON, targets
#     moec-static and moec_emulated_hip_static) into DIR, with a copy of
#     BUILD/lib/libmoec_runtime.so.
#   test/python/relocatable.sh run DIR [pytest arguments]
#     from the checkout's root on the other machine: unpacks DIR into a
#     temporary folder, prints the versions (python, torch, numpy, pytest,
#     glibc) and runs python3 -m pytest test/python with the environment CTest
#     python-moec sets (MOEC_REQUIRE_TORCH=1), the package from python/.
set -euo pipefail
mode="${1:?usage: relocatable.sh pack BUILD DIR | run DIR [pytest args]}"
case "$mode" in
pack)
  build="${2:?BUILD}" dir="${3:?DIR}"
  mkdir -p "$dir"
  strip -o "$dir/moec" "$build/bin/moec-static"
  strip --strip-unneeded -o "$dir/libmoec_emulated_hip.so" \
    "$build/lib/static/libmoec_emulated_hip.so"
  xz -9 -T 2 -f "$dir/moec" "$dir/libmoec_emulated_hip.so"
  cp -L "$build/lib/libmoec_runtime.so" "$dir/libmoec_runtime.so"
  ls -l "$dir"
  ;;
run)
  dir="$(cd "${2:?DIR}" && pwd)"
  shift 2
  work="$(mktemp -d)"
  for f in moec libmoec_emulated_hip.so; do
    python3 -c 'import lzma, shutil, sys
with lzma.open(sys.argv[1]) as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)' "$dir/$f.xz" "$work/$f"
  done
  chmod +x "$work/moec"
  cp "$dir/libmoec_runtime.so" "$work/"
  python3 - <<'EOF'
import platform, sys
import numpy, pytest, torch
print("python %s; torch %s; numpy %s; pytest %s; glibc %s" % (
    platform.python_version(), torch.__version__, numpy.__version__, pytest.__version__,
    platform.libc_ver()[1]))
print("torch dtypes: %s" % ", ".join(n for n in ("float8_e4m3fn", "float8_e8m0fnu",
                                                  "float4_e2m1fn_x2") if hasattr(torch, n)))
EOF
  ldd "$work/moec" "$work/libmoec_emulated_hip.so" "$work/libmoec_runtime.so"
  "$work/moec" --version 2>&1 | head -1 || true
  export PYTHONPATH="$PWD/python" PYTHONDONTWRITEBYTECODE=1 MOEC_REQUIRE_TORCH=1 \
    MOEC_TEST_MOEC="$work/moec" MOEC_TEST_TABLES="$PWD/tuning_tables" \
    MOEC_TEST_WORKDIR="$work/pytest-work" \
    MOEC_RUNTIME_LIBRARY="$work/libmoec_runtime.so" \
    MOEC_EMULATED_HIP_LIBRARY="$work/libmoec_emulated_hip.so"
  python3 -m pytest -p no:cacheprovider -rs test/python "$@"
  ;;
*)
  echo "relocatable.sh: unknown mode '$mode' (pack or run)" >&2
  exit 2
  ;;
esac
