#!/usr/bin/env bash
# CTest install-tree: cmake --install into a temporary prefix, then the C
# example built against the installed tree with find_package and with
# pkg-config (test/install/CMakeLists.txt), each run on the installed
# emulated HIP device and checked by the oracle, and the installed Python
# package importing the installed runtime.
#   run_install_test.sh BUILD_DIR WORK_DIR MOEC SOURCE_DIR LIBDIR PYTHON_DIR
set -euo pipefail
build=$1 work=$2 moec=$3 source=$4 libdir=$5 pydir=$6
prefix=$work/prefix
rm -rf "$work" && mkdir -p "$work"
cmake --install "$build" --prefix "$prefix" > "$work/install.log"
for f in "$libdir/libmoec_runtime.so" "$libdir/libmoec_emulated_hip.so" \
         "$libdir/cmake/moec_runtime/moec_runtimeConfig.cmake" \
         "$libdir/pkgconfig/moec_runtime.pc" include/moec/moec_runtime.h \
         "$pydir/moec/__init__.py" "$pydir/moec/_location.py"; do
  [ -e "$prefix/$f" ] || { echo "install-tree: $f not installed" >&2; exit 1; }
done

generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
cmake -S "$source/test/install" -B "$work/build" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF > "$work/configure.log" ||
  { cat "$work/configure.log"; exit 1; }
PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig" cmake "$work/build" > /dev/null
cmake --build "$work/build" > "$work/build.log" || { cat "$work/build.log"; exit 1; }

# The TP4 table at a small shape and the oracle's inputs in checkpoint layout
# (gate rows then up rows; the example prepares them), as example-c-layer.
"$moec" compile --small -q "$source/tuning_tables/flash_tp4.table" -o "$work/tp4.moeb"
"$moec" reference --family tp --hidden 512 --intermediate 512 --experts 4 \
  --topk 4 --m 21 --interleave 0 --swiglu-limit 0 --invalid-fraction 0.1 \
  --seed 11 --write-inputs -o "$work/in" > /dev/null
for example in example_find_package example_pkg_config; do
  binary=$work/build/$example
  # It must load the installed runtime, not the build tree's.
  resolved=$(ldd "$binary" | awk '/libmoec_runtime/ {print $3}')
  case "$resolved" in
    "$prefix"/*) ;;
    *) echo "install-tree: $example loads libmoec_runtime from '$resolved'" >&2; exit 1 ;;
  esac
  mkdir -p "$work/out-$example"
  MOEC_HIP_LIBRARY="$prefix/$libdir/libmoec_emulated_hip.so" "$binary" \
    "$work/tp4.moeb" flash-tp4 "$work/in" "$work/out-$example"
  # 1/16: the FP8 unit roundoff bounds the layer against the oracle.
  "$moec" reference --family tp --interleave 0 --swiglu-limit 0 \
    --inputs "$work/in" --compare "$work/out-$example" --tolerance 0.0625 \
    -o "$work/oracle-$example" | grep -E "relative L2"
done

# The installed Python package loads the installed runtime and finds the
# installed emulated device next to it.
env -u MOEC_EMULATED_HIP_LIBRARY -u MOEC_RUNTIME_LIBRARY \
  PYTHONPATH="$prefix/$pydir" PYTHONDONTWRITEBYTECODE=1 python3 - "$prefix" "$work/tp4.moeb" <<'PY'
import os, sys
import moec
prefix = os.path.realpath(sys.argv[1])
assert os.path.realpath(moec.library_path()).startswith(prefix + "/"), moec.library_path()
assert os.path.realpath(moec.emulated_hip_library()).startswith(prefix + "/")
layer = moec.Layer(sys.argv[2], "emulated", "flash-tp4")
assert layer.hidden == 512 and layer.memory.workspace_bytes > 0
print("install-tree: python", moec.library_path(), layer)
PY
echo "install-tree: PASS ($prefix)"
