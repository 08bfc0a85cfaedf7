"""Every ctypes structure of the package against the C header.

A tiny C program compiled with the system C compiler (cc, or $CC) against
runtime/include/moec/moec_runtime.h prints sizeof and offsetof of each C
struct the package mirrors; every ctypes.Structure (and Union) subclass in
every module of the package is found by walking the package, so a new
structure is checked without being listed here. A structure without a C
counterpart, a missing, extra, renamed or reordered field, or a field of
the wrong size fails.
"""

import ctypes
import importlib
import os
import pkgutil
import re
import shutil
import subprocess

import pytest

import moec
from moec import _capi

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
INCLUDE = os.path.join(ROOT, "runtime", "include")
HEADER = os.path.join(INCLUDE, "moec", "moec_runtime.h")


def package_structures():
    """Every ctypes.Structure / ctypes.Union subclass defined in the moec
    package, by walking all of its modules."""
    found, seen = {}, set()

    def visit(namespace):
        for value in list(vars(namespace).values()):
            if (not isinstance(value, type) or not value.__module__.startswith("moec")
                    or value in seen):
                continue
            seen.add(value)
            if issubclass(value, (ctypes.Structure, ctypes.Union)):
                found[value.__module__ + "." + value.__qualname__] = value
            elif value.__module__ == namespace.__name__ or hasattr(namespace, "__qualname__"):
                visit(value)  # classes nested in the package's own classes

    for info in pkgutil.walk_packages(moec.__path__, "moec."):
        visit(importlib.import_module(info.name))
    return found


def c_name(structure):
    """The C struct a structure mirrors: _c_type_ if it names one, else
    moec_<snake_case class name>_t (KernelInfo -> moec_kernel_info_t)."""
    explicit = getattr(structure, "_c_type_", None)
    if explicit:
        return explicit
    snake = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", structure.__name__).lower()
    return "moec_%s_t" % snake


def header_structs(text):
    """{name: [member, ...]} of every `typedef struct name { ... } name;` in
    the header, members in declaration order; None for a struct with nested
    braces (a union), which this parser does not take apart."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    structs = {}
    for match in re.finditer(r"typedef\s+struct\s+(\w+)\s*\{", text):
        name, depth, position = match.group(1), 1, match.end()
        nested = False
        while depth:
            char = text[position]
            if char == "{":
                depth, nested = depth + 1, True
            elif char == "}":
                depth -= 1
            position += 1
        body = text[match.end():position - 1]
        if nested:
            structs[name] = None
            continue
        members = []
        for declaration in body.split(";"):
            if not declaration.strip():
                continue
            for part in declaration.split(","):
                declarator = re.search(r"(\w+)\s*(\[[^\]]*\]\s*)*$", part.strip())
                assert declarator, "cannot parse %r in %s" % (part, name)
                members.append(declarator.group(1))
        structs[name] = members
    return structs


def compile_and_measure(structs, tmp_path):
    """{struct: (sizeof, {member: (offsetof, sizeof)})} from a C program."""
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "moec/moec_runtime.h"',
             "int main(void) {"]
    for name, members in sorted(structs.items()):
        lines.append('  printf("S %s %%zu\\n", sizeof(%s));' % (name, name))
        for member in members:
            lines.append('  printf("F %s %s %%zu %%zu\\n", offsetof(%s, %s), sizeof(((%s *)0)->%s));'
                         % (name, member, name, member, name, member))
    lines += ["  return 0;", "}"]
    source = tmp_path / "layout.c"
    source.write_text("\n".join(lines) + "\n")
    compiler = os.environ.get("CC", "cc")
    if not shutil.which(compiler):
        pytest.fail("no C compiler %r to measure moec_runtime.h with (set CC)" % compiler)
    program = tmp_path / "layout"
    build = subprocess.run([compiler, "-std=c99", "-Wall", "-Werror", "-I", INCLUDE,
                            str(source), "-o", str(program)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True)
    assert build.returncode == 0, build.stdout
    run = subprocess.run([str(program)], stdout=subprocess.PIPE, universal_newlines=True,
                         check=True)
    measured = {}
    for line in run.stdout.splitlines():
        fields = line.split()
        if fields[0] == "S":
            measured[fields[1]] = (int(fields[2]), {})
        else:
            measured[fields[1]][1][fields[2]] = (int(fields[3]), int(fields[4]))
    return measured


def test_package_structures_are_found():
    structures = package_structures()
    # The ones _capi.py declared when this test was written; more is fine.
    for name in ("KernelResources", "KernelInfo", "ConfigInfo", "Table", "Selection",
                 "AiterColumn", "AiterSelection", "LayerProblem", "LayerMemory",
                 "LayerWeights", "LayerStatus", "IpcHandle", "Tensor", "WeightLayout",
                 "WeightSizes"):
        assert "moec._capi." + name in structures
    assert all(issubclass(s, (ctypes.Structure, ctypes.Union)) for s in structures.values())


def test_ctypes_structures_match_the_c_header(tmp_path):
    with open(HEADER) as f:
        structs = header_structs(f.read())
    assert "moec_kernel_info_t" in structs and "moec_layer_memory_t" in structs
    structures = package_structures()
    mirrored = {}
    problems = []
    for qualname, structure in sorted(structures.items()):
        name = c_name(structure)
        if name not in structs:
            problems.append("%s has no C counterpart (no struct %s in moec_runtime.h; "
                            "name the class after it or set _c_type_)" % (qualname, name))
            continue
        if structs[name] is None:
            problems.append("%s mirrors %s, whose nested union this test cannot parse"
                            % (qualname, name))
            continue
        fields = [field[0] for field in structure._fields_]
        if fields != structs[name]:
            problems.append("%s fields %s, C %s has %s" % (qualname, fields, name,
                                                          structs[name]))
            continue
        mirrored[qualname] = (structure, name)
    assert not problems, "\n".join(problems)

    measured = compile_and_measure({name: structs[name] for _, name in mirrored.values()},
                                   tmp_path)
    for qualname, (structure, name) in sorted(mirrored.items()):
        size, members = measured[name]
        assert ctypes.sizeof(structure) == size, "%s: sizeof %d, C %s %d" % (
            qualname, ctypes.sizeof(structure), name, size)
        for field in structure._fields_:
            descriptor = getattr(structure, field[0])
            offset, field_size = members[field[0]]
            assert (descriptor.offset, descriptor.size) == (offset, field_size), (
                "%s.%s: offset %d size %d, C %s.%s offset %d size %d"
                % (qualname, field[0], descriptor.offset, descriptor.size, name, field[0],
                   offset, field_size))


def test_the_header_parser_sees_every_member():
    # Guards the parser itself: a comma list, pointers, arrays, nested types.
    structs = header_structs("""
        typedef struct moec_x_t {
          const void *a, *b;   /* two pointers */
          uint32_t c[3];       // an array
          uint32_t d, e;
          moec_y_t f;
        } moec_x_t;
        typedef struct moec_u_t { int kind; union { int i; } value; } moec_u_t;
    """)
    assert structs == {"moec_x_t": ["a", "b", "c", "d", "e", "f"], "moec_u_t": None}


def test_status_names_come_from_the_c_library():
    with open(HEADER) as f:
        header = f.read()
    values = dict((name, int(value)) for name, value in
                  re.findall(r"\b(MOEC_STATUS_\w+)\s*=\s*(\d+)", header))
    assert values["MOEC_STATUS_OK"] == 0 and len(values) >= 12
    for name, value in values.items():
        assert moec.MoecError(value, "m").status_name == name
        assert _capi.status_name(value) == _capi.lib.moec_status_name(value).decode()
    assert moec.MoecError(max(values.values()) + 1, "m").status_name == "MOEC_STATUS_UNKNOWN"
    # No hand-kept copy of the table is left in the package.
    assert not hasattr(_capi, "_STATUS_NAMES")
