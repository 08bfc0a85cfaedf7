#!/usr/bin/env python3
"""Fails when code picks a chip, or tells stages apart by name, itself.

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

With --stages it checks the stage instead: a stage is abi::Stage (the ODS
moe::Stage), whose text, the manifest's and the table's `stage=` value, is
printed and parsed only by abi::stageName / abi::parseStage
(abi/include/moec/abi/stage.h). So no library or tool source compares a
value with a stage name in a string literal (`stage == "w13"`,
`"sort" != s`, `== std::string("w2")`). Its allow list is
stage-literals.allow.

usage: check_target_literals.py [--stages] REPO_ROOT [ALLOW_FILE]
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
# The folders whose sources take the stage as abi::Stage.
STAGE_FOLDERS = ("codegen", "compiler", "device", "dialect", "emulator",
                 "harness", "report", "runtime", "selftest", "tools")
_STAGE_NAME = r'(?:std::string\s*\(\s*)?"(?:quant|sort|w13|w2|combine)"'
STAGE_FINDINGS = [
    (re.compile(r"(?:==|!=)\s*" + _STAGE_NAME + r"|" + _STAGE_NAME +
                r"\s*\)?\s*(?:==|!=)|\.compare\s*\(\s*" + _STAGE_NAME),
     "compares with a stage name; compare abi::Stage values"),
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


def findings(root, allowed, folders=FOLDERS, patterns=FINDINGS):
    out = []
    for folder in folders:
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
                        for pattern, why in patterns:
                            if pattern.search(code):
                                out.append(f"{relative}:{number}: {why}: "
                                           f"{line.strip()}")
    return out


def main(argv):
    args = argv[1:]
    stages = bool(args) and args[0] == "--stages"
    if stages:
        args = args[1:]
    if len(args) not in (1, 2):
        print(__doc__.strip().splitlines()[-2].strip(), file=sys.stderr)
        return 2
    root = args[0]
    allow = args[1] if len(args) == 2 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)),
        "stage-literals.allow" if stages else "target-literals.allow")
    if stages:
        found = findings(root, allowed_files(allow), STAGE_FOLDERS,
                         STAGE_FINDINGS)
    else:
        found = findings(root, allowed_files(allow))
    for line in found:
        print(line)
    if found and stages:
        print(f"{len(found)} place(s) compare with a stage name; parse the "
              "text once with abi::parseStage and compare abi::Stage values")
    elif found:
        print(f"{len(found)} place(s) pick a chip outside target/; pass the "
              "CompileTarget or TargetInfo instead (docs/targets.md)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
