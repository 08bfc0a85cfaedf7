#!/usr/bin/env python3
"""Fails when code outside target/ picks a chip itself.

The chip or part a compile is for (docs/targets.md) flows as one parameter,
a CompileTarget or a target::TargetInfo, from where a user names it (moec
compile --target, a module's moe.target, $MOEC_EMULATED_TARGET, a bundle's
manifest) through compile, tune, the cost model, the AITER import, the
emulator and the emulated device. So in the sources of the libraries and
tools no line may

  - hold a string literal naming an arch ("gfx950", "gfx942:..."),
  - call target::defaultTarget(), or
  - name one chip's facts (kGfx950, CompileTarget::gfx950()).

target/ is where those live. The exceptions are listed, one per line as
FILE: why, in target-literals.allow next to this script (the dialect's
chip for a module without moe.target, which is intended). Comments are not
code and are skipped.

usage: check_target_literals.py REPO_ROOT [ALLOW_FILE]
       exit 0 clean, 1 findings, 2 usage
"""
import os
import re
import sys

# The folders whose sources must take the chip as a parameter.
FOLDERS = ("abi", "codegen", "compiler", "device", "dialect", "emulator",
           "harness", "reference", "runtime", "tools")
SUFFIXES = (".h", ".hpp", ".cpp", ".c", ".inc")

FINDINGS = [
    (re.compile(r'"gfx[0-9a-f]+[":]'), "names an arch in a string literal"),
    (re.compile(r"\bdefaultTarget\s*\("), "calls the default target"),
    (re.compile(r"\bkGfx[0-9a-f]+\b"), "names one chip's TargetInfo"),
    (re.compile(r"\bCompileTarget::gfx[0-9a-f]+\b"), "names one chip's CompileTarget"),
]
LINE_COMMENT = re.compile(r"^\s*(//|/\*|\*|#)")


def allowed_files(path):
    """The files of the allow list (FILE: why)."""
    allowed = set()
    if not os.path.exists(path):
        return allowed
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                allowed.add(line.split(":", 1)[0].strip())
    return allowed


def code_of(line):
    """The line without a trailing // comment (outside string literals)."""
    quoted = False
    for i, c in enumerate(line):
        if c == '"' and (i == 0 or line[i - 1] != "\\"):
            quoted = not quoted
        elif not quoted and line.startswith("//", i):
            return line[:i]
    return line


def findings(root, allowed):
    out = []
    for folder in FOLDERS:
        for base, _, names in os.walk(os.path.join(root, folder)):
            for name in sorted(names):
                if not name.endswith(SUFFIXES):
                    continue
                path = os.path.join(base, name)
                relative = os.path.relpath(path, root)
                if relative in allowed:
                    continue
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        if LINE_COMMENT.match(line):
                            continue
                        code = code_of(line)
                        for pattern, why in FINDINGS:
                            if pattern.search(code):
                                out.append(f"{relative}:{number}: {why}: "
                                           f"{line.strip()}")
    return out


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__.strip().splitlines()[-2].strip(), file=sys.stderr)
        return 2
    root = argv[1]
    allow = argv[2] if len(argv) == 3 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "target-literals.allow")
    found = findings(root, allowed_files(allow))
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} place(s) pick a chip outside target/; pass the "
              "CompileTarget or TargetInfo instead (docs/targets.md)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
