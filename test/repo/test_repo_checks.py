"""The repository checks find what they exist to find (run by CTest
repo-checks-detect): each is given a small tree with one planted fault."""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def run(script, *args):
    return subprocess.run([sys.executable, os.path.join(HERE, script), *args],
                          capture_output=True, text=True)


def write_tree(tmp_path, files):
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def git_tree(tmp_path, files):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    write_tree(tmp_path, files)
    subprocess.run(["git", "-C", str(tmp_path), "add", "."], check=True)
    return tmp_path


# The planted paths are assembled at run time, so this file does not name
# them itself (the checker reads it too).
SIBLING = "../" + "shared/data/aiter/x.csv"
WORK_AREA = "/" + "work/main"


def test_outside_paths_are_found(tmp_path):
    tree = git_tree(tmp_path, {
        "docs/a.md": f"moec compile {SIBLING}\n",
        "scripts/b.sh": f"cd {WORK_AREA}\n",
        "ok/c.h": '#include "../ok/d.h"\n',
        "ok/d.h": "\n",
        "e.test": "// RUN: cat %t/work/dir/x\n",
    })
    result = run("check_self_contained.py", str(tree))
    assert result.returncode == 1
    assert f"docs/a.md:1: {SIBLING}" in result.stdout
    assert f"scripts/b.sh:1: {WORK_AREA}" in result.stdout
    assert "ok/c.h" not in result.stdout  # stays inside the tree
    assert "e.test" not in result.stdout  # a test's own temporary folder


def test_clean_tree_passes(tmp_path):
    tree = git_tree(tmp_path, {"a.md": "see [x](docs/x.md)\n"})
    assert run("check_self_contained.py", str(tree)).returncode == 0


def test_provenance_mismatch_is_found(tmp_path):
    folder = tmp_path / "aiter"
    shutil.copytree(os.path.join(ROOT, "tuning_tables", "aiter"), folder)
    assert run("check_provenance.py", str(folder)).returncode == 0
    with open(folder / "tuned_fhmoe.csv", "a") as f:
        f.write("1,2,3\n")
    (folder / "new_table.csv").write_text("a,b\n1,2\n")
    result = run("check_provenance.py", str(folder))
    assert result.returncode == 1
    assert "tuned_fhmoe.csv: SHA-256" in result.stdout
    assert "tuned_fhmoe.csv: 13 rows, the table says 12" in result.stdout
    assert "no row for new_table.csv" in result.stdout


def test_layering_violations_are_found(tmp_path):
    files = {
        "runtime/include/moec/manifest.h": "\n",
        "abi/include/moec/abi/kernel_args.h": "#include <string>\n",
        "dialect/lib/Verifiers.cpp": '#include "moec/manifest.h"\n'
                                     '#include "moec/abi/peer_protocol.h"\n',
        "codegen/CMakeLists.txt": "target_link_libraries(MoeCodegen PUBLIC MoeDialect moec_runtime)\n",
        "emulator/lib/Run.cpp": '#include "moec/Compiler/TuningTable.h"\n'
                                '#include "mlir/IR/Operation.h"\n',
        "runtime/src/layer.cpp": '#include "llvm/ADT/StringRef.h"\n',
        "test/unit/x/CMakeLists.txt": "add_executable(t ${ROOT}/tools/moec/DeviceTimer.cpp)\n",
        "tools/moec/CommandSupport.h": "\n",
        "selftest/lib/Run.cpp": '#include "CommandSupport.h"\n'
                                '#include "Runner.h"\n'
                                '#include <CLI/CLI.hpp>\n',
        "selftest/CMakeLists.txt": "target_link_libraries(MoeSelftest PUBLIC MoeHarness moec_reference_cli)\n",
        "report/lib/Page.cpp": '#include "Commands.h"\n'
                               '#include "mlir/IR/Operation.h"\n',
        "tools/moec/Commands.h": "\n",
    }
    write_tree(tmp_path, files)
    result = run("check_layering.py", str(tmp_path))
    assert result.returncode == 1
    out = result.stdout
    assert "dialect/lib/Verifiers.cpp:1: includes moec/manifest.h" in out
    assert "peer_protocol" not in out  # the leaf is allowed
    assert "codegen/CMakeLists.txt:1: MoeCodegen links moec_runtime" in out
    assert "emulator/lib/Run.cpp:1: includes moec/Compiler/TuningTable.h" in out
    assert "mlir/IR/Operation.h" not in out  # the emulator decodes MLIR
    assert "runtime/src/layer.cpp:1: includes llvm/ADT/StringRef.h" in out
    assert "test/unit/x/CMakeLists.txt:1: compiles a tools/ source" in out
    assert "selftest/lib/Run.cpp:1: includes CommandSupport.h" in out
    assert "Runner.h" not in out  # its own headers are allowed
    assert "selftest/lib/Run.cpp:3: includes CLI/CLI.hpp" in out
    assert "selftest/CMakeLists.txt:1: MoeSelftest links moec_reference_cli" in out
    assert "report/lib/Page.cpp:1: includes Commands.h" in out
    assert "report/lib/Page.cpp:2" not in out  # the report reads MLIR attributes


def test_layering_of_this_repository():
    assert run("check_layering.py", ROOT).returncode == 0


# The chip names are assembled at run time, as the paths above are.
ARCH = "gfx" + "950"


def test_target_literals_are_found(tmp_path):
    files = {
        "compiler/lib/Tune.cpp": f'if (chip.arch == std::string("{ARCH}")) {{}}\n',
        "tools/moec/Run.cpp": "const auto &chip = target::default" + "Target();\n",
        "emulator/lib/Lanes.h": "constexpr int kLanes = target::kGfx" + "950.wavefrontSize;\n",
        "compiler/lib/Ok.cpp": f"// the default is {ARCH}\nuse(part.arch); // \"{ARCH}\"\n",
        "target/include/moec/target/target_info.h": f'const char *arch = "{ARCH}";\n',
        "dialect/lib/Default.cpp": "return target::default" + "Target();\n",
        "test/unit/x/XTest.cpp": f'CHECK(arch == "{ARCH}");\n',
    }
    write_tree(tmp_path, files)
    allow = tmp_path / "allow"
    allow.write_text("# FILE: why\ndialect/lib/Default.cpp: the intended default\n")
    result = run("check_target_literals.py", str(tmp_path), str(allow))
    assert result.returncode == 1
    out = result.stdout
    assert "compiler/lib/Tune.cpp:1: names an arch in a string literal" in out
    assert "tools/moec/Run.cpp:1: calls the default target" in out
    assert "emulator/lib/Lanes.h:1: names one chip's TargetInfo" in out
    assert "Ok.cpp" not in out  # comments only
    assert "target_info.h" not in out  # the chip facts live there
    assert "Default.cpp" not in out  # on the allow list
    assert "XTest.cpp" not in out  # tests name the chips they test


def test_stage_name_comparisons_are_found(tmp_path):
    files = {
        "compiler/lib/Tune.cpp": 'if (kernel.stage == "w13") {}\n',
        "harness/lib/Run.cpp": 'return "sort" != spec.stage;\n',
        "tools/moec/Show.cpp": 'if (name == std::string("combine")) {}\n',
        "report/lib/Page.cpp": 'if (stage.compare("w2") == 0) {}\n',
        "runtime/src/ok.cpp": 'out << "stage=" << stageName(s); // == "w2"\n'
                              'if (s == Stage::W2 && k == "dispatch") {}\n',
        "abi/include/moec/abi/stage.h": 'case Stage::W2: return "w2";\n',
        "codegen/lib/Old.cpp": 'if (stage == "quant") {}\n',
        "test/unit/x/XTest.cpp": 'CHECK(spec.stage == "w2");\n',
    }
    write_tree(tmp_path, files)
    allow = tmp_path / "allow"
    allow.write_text("# FILE: why\ncodegen/lib/Old.cpp: not yet typed\n")
    result = run("check_target_literals.py", "--stages", str(tmp_path),
                 str(allow))
    assert result.returncode == 1
    out = result.stdout
    assert "compiler/lib/Tune.cpp:1: compares with a stage name" in out
    assert "harness/lib/Run.cpp:1: compares with a stage name" in out
    assert "tools/moec/Show.cpp:1: compares with a stage name" in out
    assert "report/lib/Page.cpp:1: compares with a stage name" in out
    assert "ok.cpp" not in out  # printing, enum values, other words
    assert "stage.h" not in out  # the one place that spells the names
    assert "Old.cpp" not in out  # on the allow list
    assert "XTest.cpp" not in out  # tests may name what they test


def test_stage_literals_of_this_repository():
    assert run("check_target_literals.py", "--stages", ROOT).returncode == 0
