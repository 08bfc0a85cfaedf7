"""The package's modules import each other without a cycle, counting
imports inside functions too (runtime.py and weights.py once imported each
other: weights needed host_buffer at import, Layer.weight_layout needed
WeightLayout at call time)."""

import ast
import os

import moec

PACKAGE_DIR = os.path.dirname(moec.__file__)


def package_modules():
    return sorted(name[:-3] for name in os.listdir(PACKAGE_DIR)
                  if name.endswith(".py") and name != "__init__.py")


def imports_of(module, modules):
    """Package modules `module` imports anywhere in its source (module
    level or inside functions), by relative or absolute import."""
    with open(os.path.join(PACKAGE_DIR, module + ".py")) as f:
        tree = ast.parse(f.read(), module)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 or (node.level == 0 and (node.module or "").startswith("moec")):
                base = node.module or ""
                if node.level == 0:
                    base = base[len("moec"):].lstrip(".")
                if base:
                    found.add(base.split(".")[0])
                else:  # from . import a, b
                    found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("moec."):
                    found.add(alias.name.split(".")[1])
    return sorted(found & set(modules))


def find_cycle(graph):
    """One import cycle as a list of modules, or None."""
    state = {}

    def visit(node, path):
        state[node] = "open"
        for target in graph[node]:
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state:
                cycle = visit(target, path + [target])
                if cycle:
                    return cycle
        state[node] = "done"
        return None

    for node in graph:
        if node not in state:
            cycle = visit(node, [node])
            if cycle:
                return cycle
    return None


def test_the_import_graph_sees_function_level_imports():
    modules = package_modules()
    assert {"_capi", "runtime", "weights", "fused", "npy"} <= set(modules)
    # fused.py imports runtime at module level; the shared helpers come from
    # modules of their own.
    assert "runtime" in imports_of("fused", modules)
    assert "_buffers" in imports_of("weights", modules)
    assert "_buffers" in imports_of("runtime", modules)
    assert find_cycle({"a": ["b"], "b": ["c"], "c": ["a"]}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": ["b"], "b": []}) is None


def test_no_module_of_the_package_imports_itself_back():
    modules = package_modules()
    graph = {module: imports_of(module, modules) for module in modules}
    assert "weights" not in graph["runtime"]
    assert "runtime" not in graph["weights"]
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))
