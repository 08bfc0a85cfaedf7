#!/usr/bin/env python3
"""Fails when a library includes or links what its layer must not see.

The layers (docs/architecture.md, "Folders"):

  abi/, target/      leaves: the C++ standard library only
  runtime/, reference/  plain C++17: never MLIR, LLVM, HIP headers or the
                     compiler side of moec
  dialect/, codegen/ the compiler side: of the runtime only the leaf
                     (moec/abi/), never a runtime header, never linking it
  emulator/, device/ run the IR they are given: never the compiler,
                     codegen, dialect or harness headers
  isa/               reads machine code: LLVM (MC, Object), target, abi;
                     never MLIR, the runtime or the compiler side
  selftest/          a library under the CLI: never a tools/ or CLI11
                     header, MLIR or LLVM, never moec_reference_cli
  report/            a library under the CLI: never a tools/ or CLI11
                     header
  test/              links libraries; never compiles a tools/ source file

usage: check_layering.py REPO_ROOT      exit 0 clean, 1 violations, 2 usage
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')
LINK = re.compile(r"target_link_libraries\(\s*(\S+)([^)]*)\)", re.S)
SOURCE_SUFFIXES = (".h", ".hpp", ".cpp", ".c", ".inc")

COMPILER_SIDE = ("moec/Compiler/", "moec/Codegen/", "moec/Dialect/",
                 "moec/Harness/", "moec/Emulator/")


def runtime_headers(root):
    """Top-level headers of the runtime: moec/<name>.h."""
    folder = os.path.join(root, "runtime", "include", "moec")
    return {"moec/" + n for n in os.listdir(folder) if n.endswith((".h", ".hpp"))}


def tools_headers(root):
    """The CLI's own headers: tools/moec/<name>.h, included as "<name>.h"."""
    folder = os.path.join(root, "tools", "moec")
    if not os.path.isdir(folder):
        return set()
    return {n for n in os.listdir(folder) if n.endswith((".h", ".hpp"))}


def rules(root):
    """(folder, why, predicate on an include path) per layer."""
    runtime = runtime_headers(root)
    tools = tools_headers(root)
    return [
        ("abi", "a leaf includes only the standard library and itself",
         lambda inc: "/" in inc and not inc.startswith("moec/abi/")),
        ("target", "a leaf includes only the standard library and itself",
         lambda inc: "/" in inc and not inc.startswith("moec/target/")),
        ("runtime", "the runtime is plain C++17 with no compiler dependency",
         lambda inc: inc.startswith(("mlir/", "llvm/", "hip/") + COMPILER_SIDE)),
        ("reference", "the oracle is plain C++17 with no compiler dependency",
         lambda inc: inc.startswith(("mlir/", "llvm/", "hip/") + COMPILER_SIDE)),
        ("dialect", "the dialect sees the runtime only through moec/abi/",
         lambda inc: inc in runtime or inc.startswith(
             ("moec/Compiler/", "moec/Codegen/", "moec/Emulator/", "moec/Harness/"))),
        ("codegen", "the codegen sees the runtime only through moec/abi/",
         lambda inc: inc in runtime or inc.startswith(
             ("moec/Compiler/", "moec/Emulator/", "moec/Harness/"))),
        ("emulator", "the emulator runs the IR it is given: no compiler side",
         lambda inc: inc.startswith(COMPILER_SIDE[:4])),
        ("device", "the emulated device runs the IR it is given: no compiler side",
         lambda inc: inc.startswith(COMPILER_SIDE[:4])),
        ("isa", "the ISA verifier reads machine code: LLVM, target and abi "
         "only",
         lambda inc: inc.startswith("mlir/") or inc in runtime or
         inc.startswith(COMPILER_SIDE + ("moec/Report/", "moec/Selftest/"))),
        ("selftest", "the self-test is a library under the CLI: no tools/, "
         "CLI11, MLIR or LLVM header",
         lambda inc: inc in tools or inc.startswith(("CLI/", "mlir/", "llvm/"))),
        ("report", "the report is a library under the CLI: no tools/ or CLI11 "
         "header",
         lambda inc: inc in tools or inc.startswith("CLI/")),
    ]


# Libraries a folder's CMake file must not link.
FORBIDDEN_LINKS = {
    "dialect": {"moec_runtime", "moec_runtime_shared", "MoeCodegen", "MoeCompiler"},
    "codegen": {"moec_runtime", "moec_runtime_shared", "MoeCompiler"},
    "emulator": {"MoeCompiler", "MoeCodegen", "MoeDialect", "MoeHarness"},
    "device": {"MoeCompiler", "MoeCodegen", "MoeDialect", "MoeHarness"},
    "runtime": {"MLIR", "LLVM", "MoeCompiler", "MoeCodegen", "MoeDialect"},
    "selftest": {"moec_reference_cli"},
    "isa": {"MLIR", "moec_runtime", "moec_runtime_shared", "MoeCompiler",
            "MoeCodegen", "MoeDialect"},
}


def sources(folder):
    for base, _, names in os.walk(folder):
        for name in names:
            if name.endswith(SOURCE_SUFFIXES):
                yield os.path.join(base, name)


def check(root):
    problems = []
    for folder, why, forbidden in rules(root):
        path = os.path.join(root, folder)
        for source in sorted(sources(path)):
            rel = os.path.relpath(source, root)
            with open(source, errors="replace") as f:
                for number, line in enumerate(f, 1):
                    match = INCLUDE.match(line)
                    if match and forbidden(match.group(1)):
                        problems.append(f"{rel}:{number}: includes "
                                        f"{match.group(1)}: {why}")
    for folder, forbidden in FORBIDDEN_LINKS.items():
        cmake = os.path.join(root, folder, "CMakeLists.txt")
        if not os.path.exists(cmake):
            continue
        text = open(cmake).read()
        for match in LINK.finditer(text):
            for library in match.group(2).split():
                if library in forbidden:
                    number = text.count("\n", 0, match.start()) + 1
                    problems.append(f"{folder}/CMakeLists.txt:{number}: "
                                    f"{match.group(1)} links {library}")
    tools = re.compile(r"tools/moec/\S+\.(?:cpp|c|cc)\b")
    for base, _, names in os.walk(os.path.join(root, "test")):
        for name in names:
            if name == "CMakeLists.txt" or name.endswith(".cmake"):
                path = os.path.join(base, name)
                rel = os.path.relpath(path, root)
                with open(path) as f:
                    for number, line in enumerate(f, 1):
                        if not line.lstrip().startswith("#") and tools.search(line):
                            problems.append(f"{rel}:{number}: compiles a tools/ "
                                            "source (tests link libraries)")
    return problems


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        print("usage: check_layering.py REPO_ROOT", file=sys.stderr)
        return 2
    problems = check(sys.argv[1])
    for p in problems:
        print(p)
    if problems:
        print(f"check_layering: {len(problems)} violation(s)", file=sys.stderr)
        return 1
    print("check_layering: every layer includes and links only what it may")
    return 0


if __name__ == "__main__":
    sys.exit(main())
