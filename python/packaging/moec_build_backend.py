"""PEP 517 backend of `pip install .` (pyproject.toml); standard library only.

build_wheel builds the CMake targets the wheel carries (the moec CLI,
libmoec_runtime.so, libmoec_emulated_hip.so) in a build tree and packs a
platform wheel:
    moec/*.py                      python/moec
    moec/_location.py              RUNTIME_LIBRARY_DIRS = ["lib"]
    moec/lib/libmoec_runtime.so    and libmoec_emulated_hip.so
    moec/bin/moec                  the CLI (finds ../lib/libmoec_emulated_hip.so)
    moec/tables/                   tuning_tables/*.table and aiter/*.csv
The build tree: config setting build-dir, else $MOEC_BUILD_DIR, else
build-pip/ in the checkout (configured with CMake on first use: a full
build). MOEC_WHEEL_PREBUILT=1 packs the tree as it is, building nothing
(CTest python-pip-install, whose targets CTest's build made). The CLI
links the system's LLVM/MLIR 22 shared libraries, so the wheel runs where
those are installed.
"""

import base64
import hashlib
import os
import re
import stat
import subprocess
import zipfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))
TARGETS = ("moec", "moec_runtime_shared", "moec_emulated_hip")
TAG = "py3-none-linux_x86_64"


def _version():
    with open(os.path.join(ROOT, "python", "moec", "__init__.py")) as f:
        return re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)


def _build_tree(config_settings):
    build = (config_settings or {}).get("build-dir") or os.environ.get("MOEC_BUILD_DIR") or \
        os.path.join(ROOT, "build-pip")
    build = os.path.abspath(build)
    if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
        subprocess.check_call(["cmake", "-S", ROOT, "-B", build, "-G", "Ninja",
                               "-DCMAKE_BUILD_TYPE=Release"])
    if os.environ.get("MOEC_WHEEL_PREBUILT") != "1":
        command = ["cmake", "--build", build]
        for target in TARGETS:
            command += ["--target", target]
        subprocess.check_call(command)
    return build


def _files(build):
    """(path in the wheel, source file, executable) of every packed file."""
    files = []
    package = os.path.join(ROOT, "python", "moec")
    for name in sorted(os.listdir(package)):
        if name.endswith(".py") and name != "_location.py":
            files.append(("moec/" + name, os.path.join(package, name), False))
    for name in ("libmoec_runtime.so", "libmoec_emulated_hip.so"):
        files.append(("moec/lib/" + name, os.path.realpath(os.path.join(build, "lib", name)),
                      False))
    files.append(("moec/bin/moec", os.path.join(build, "bin", "moec"), True))
    tables = os.path.join(ROOT, "tuning_tables")
    for sub, suffix in (("", ".table"), ("aiter", ".csv"), ("aiter", ".md")):
        folder = os.path.join(tables, sub)
        for name in sorted(os.listdir(folder)):
            if name.endswith(suffix):
                files.append(("/".join(p for p in ("moec/tables", sub, name) if p),
                              os.path.join(folder, name), False))
    return files


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (path, digest, len(data))


def _write(archive, path, data, executable, record):
    info = zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_DEFLATED
    # S_IFREG too: pip makes a file executable only for a regular-file mode.
    info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
    archive.writestr(info, data)
    record.append(_record_line(path, data))


def _metadata():
    return ("Metadata-Version: 2.1\nName: moec\nVersion: %s\n"
            "Summary: moec: ahead-of-time compiled Mixture-of-Experts kernels for AMD "
            "gfx950, from Python\nRequires-Python: >=3.9\n" % _version())


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    name = "moec-%s.dist-info" % _version()
    os.makedirs(os.path.join(metadata_directory, name), exist_ok=True)
    with open(os.path.join(metadata_directory, name, "METADATA"), "w") as f:
        f.write(_metadata())
    return name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    build = _build_tree(config_settings)
    version = _version()
    dist_info = "moec-%s.dist-info" % version
    wheel_name = "moec-%s-%s.whl" % (version, TAG)
    record = []
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w") as archive:
        for path, source, executable in _files(build):
            with open(source, "rb") as f:
                _write(archive, path, f.read(), executable, record)
        _write(archive, "moec/_location.py",
               b"# Written by python/packaging/moec_build_backend.py: the runtime is in\n"
               b"# the package's lib/.\nRUNTIME_LIBRARY_DIRS = [\"lib\"]\n", False, record)
        _write(archive, dist_info + "/METADATA", _metadata().encode(), False, record)
        _write(archive, dist_info + "/WHEEL",
               ("Wheel-Version: 1.0\nGenerator: moec_build_backend\nRoot-Is-Purelib: false\n"
                "Tag: %s\n" % TAG).encode(), False, record)
        record.append(dist_info + "/RECORD,,")
        info = zipfile.ZipInfo(dist_info + "/RECORD", date_time=(2020, 1, 1, 0, 0, 0))
        archive.writestr(info, "\n".join(record) + "\n")
    return wheel_name
