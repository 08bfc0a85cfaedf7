"""python3 -m moec: the moec CLI that comes with the package.

    python3 -m moec --help
    python3 -m moec selftest --device emulated --small
    python3 -m moec compile --small -q TABLE -o OUT.moeb     (any moec command)

`selftest` without a bundle compiles the shipped flash_tp4 table at its
small shape into a temporary folder and runs `moec selftest` on it, after
checking that the package loads its runtime and opens the bundle. Every
other command goes to the CLI unchanged.
"""

import os
import subprocess
import sys
import tempfile

USAGE = """usage: python3 -m moec COMMAND [ARGS...]

The moec CLI of this package ({cli}), with the runtime {runtime}.
  selftest [--device emulated|N] [--small] [BUNDLE]
        BUNDLE defaults to the shipped flash_tp4 table ({tables}), compiled
        with `moec compile --small` into a temporary folder
  COMMAND ARGS...   any moec command (`python3 -m moec help` lists them)
"""


def _package_dir():
    return os.path.dirname(os.path.abspath(__file__))


def _runtime_dir():
    from ._capi import library_path
    path = library_path()
    return os.path.dirname(path) if path else None


def cli_path():
    """The moec CLI: the package's bin/moec (an installed wheel), else
    bin/moec next to the runtime's lib folder (a build or install tree)."""
    candidates = [os.path.join(_package_dir(), "bin", "moec")]
    runtime = _runtime_dir()
    if runtime:
        candidates.append(os.path.join(runtime, os.pardir, "bin", "moec"))
    for candidate in candidates:
        if os.access(candidate, os.X_OK):
            return os.path.normpath(candidate)
    return None


def tables_dir():
    """The shipped tables: the package's tables/ (a wheel), else
    tuning_tables/ of the checkout a build tree's runtime came from."""
    candidates = [os.path.join(_package_dir(), "tables")]
    runtime = _runtime_dir()
    if runtime:
        candidates.append(os.path.join(runtime, os.pardir, os.pardir, "tuning_tables"))
    for candidate in candidates:
        if os.path.isfile(os.path.join(candidate, "flash_tp4.table")):
            return os.path.normpath(candidate)
    return None


def _selftest(cli, args):
    # moec selftest's options that take a value (moec selftest --help)
    valued = {"--device", "--devices", "--network", "--activation", "--save", "--repeat",
              "--max-m", "--seed"}
    positional, i = [], 0
    while i < len(args):
        if args[i] in valued:
            i += 1
        elif not args[i].startswith("-"):
            positional.append(args[i])
        i += 1
    with tempfile.TemporaryDirectory(prefix="moec-selftest-") as tmp:
        if not positional:
            tables = tables_dir()
            if tables is None:
                print("moec: no shipped tables found next to the package", file=sys.stderr)
                return 2
            bundle = os.path.join(tmp, "flash_tp4.moeb")
            status = subprocess.call([cli, "compile", "--small", "-q",
                                      os.path.join(tables, "flash_tp4.table"), "-o", bundle])
            if status:
                return status
            args = list(args) + [bundle]
        else:
            bundle = positional[0]
        import moec
        with moec.Bundle(bundle) as opened:
            print("python3 -m moec: %s, runtime %s, bundle %s (%s, %d kernels)" %
                  (moec.__file__, moec.library_path(), bundle, opened.target_arch,
                   len(opened.kernel_names())))
        return subprocess.call([cli, "selftest"] + list(args))


def main(argv=None):
    args = list(sys.argv[1:] if argv is None else argv)
    cli = cli_path()
    if not args or args[0] in ("-h", "--help"):
        print(USAGE.format(cli=cli or "not found", runtime=_runtime_dir(),
                           tables=tables_dir() or "not found"), end="")
        return 0 if cli else 2
    if cli is None:
        print("moec: no moec CLI next to the package or its runtime", file=sys.stderr)
        return 2
    if args[0] == "selftest":
        return _selftest(cli, args[1:])
    return subprocess.call([cli] + args)


if __name__ == "__main__":
    sys.exit(main())
