# lit configuration for moec's IR and tool tests.
import os
import lit.formats

config.name = "moec"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.moec_obj_root, "test", "lit")
config.excludes = ["lit.cfg.py", "lit.site.cfg.py.in", "Inputs", "CMakeLists.txt"]

llvm_bin = config.llvm_tools_dir
config.environment["PATH"] = os.pathsep.join(
    [config.moec_tools_dir, llvm_bin, config.environment.get("PATH", os.environ["PATH"])])
config.substitutions.append(("%moec_src", config.moec_src_root))
config.substitutions.append(("%tables", os.path.join(config.moec_src_root, "tuning_tables")))
