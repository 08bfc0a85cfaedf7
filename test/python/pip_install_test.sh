#!/usr/bin/env bash
# CTest python-pip-install: `pip install .` (pyproject.toml, the in-tree
# backend python/packaging/moec_build_backend.py) into a fresh virtual
# environment without a package index, packing the CTest build tree as it
# is (MOEC_WHEEL_PREBUILT=1: no second build), then the installed package's
# `python3 -m moec --help` and `python3 -m moec selftest --device emulated
# --small`, run from outside the checkout with no PYTHONPATH.
#   pip_install_test.sh PYTHON SOURCE_DIR BUILD_DIR WORK_DIR
set -euo pipefail
python=$1 root=$2 build=$3 work=$4
unset PYTHONPATH MOEC_RUNTIME_LIBRARY MOEC_EMULATED_HIP_LIBRARY
rm -rf "$work"
mkdir -p "$work"
"$python" -m venv "$work/venv"
MOEC_BUILD_DIR="$build" MOEC_WHEEL_PREBUILT=1 \
  "$work/venv/bin/pip" install --no-index --no-cache-dir -q "$root"
cd "$work"
site=$("$work/venv/bin/python" -c "import moec, os; print(os.path.dirname(moec.__file__))")
case "$site" in "$work/venv/"*) ;; *) echo "moec imported from $site, not the venv"; exit 1;; esac
"$work/venv/bin/python" -m moec --help > help.txt
cat help.txt
grep -qF "CLI of this package ($site/bin/moec), with the runtime $site/lib." help.txt
"$work/venv/bin/python" -m moec selftest --device emulated --small > selftest.txt 2>&1 ||
  { cat selftest.txt; echo "python-pip-install: selftest failed"; exit 1; }
cat selftest.txt
grep -qF "python3 -m moec: $site/__init__.py, runtime $site/lib/libmoec_runtime.so" selftest.txt
echo "python-pip-install: ok"
