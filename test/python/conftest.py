"""Fixtures of the moec Python tests (CTest python-moec).

Environment (set by CTest): PYTHONPATH=build/python, MOEC_TEST_MOEC (the
moec CLI), MOEC_TEST_TABLES (tuning_tables/), MOEC_TEST_WORKDIR,
MOEC_REQUIRE_TORCH=1 (a test needing torch fails instead of skipping). The
tables are compiled with `moec compile --small` once per session; the
oracle is `moec reference` (--write-inputs, then --inputs/--compare).
"""

import ctypes
import os
import re
import subprocess

import numpy as np
import pytest

import moec
from moec import npy

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MOEC = os.environ.get("MOEC_TEST_MOEC", os.path.join(ROOT, "build", "bin", "moec"))
TABLES = os.environ.get("MOEC_TEST_TABLES", os.path.join(ROOT, "tuning_tables"))
WORKDIR = os.environ.get("MOEC_TEST_WORKDIR", os.path.join(ROOT, "build", "python", "pytest-work"))

# 2^-7, twice BF16's unit roundoff: the bound of a kernel's output against the
# quantisation-faithful oracle (docs/numerics.md, "The final output");
# `moec reference --compare` also checks every element against its own bound.
TOLERANCE = 2.0 ** -7


def run(*args):
    result = subprocess.run([MOEC] + [str(a) for a in args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, universal_newlines=True)
    return result.returncode, result.stdout


@pytest.fixture(scope="session")
def workdir():
    os.makedirs(WORKDIR, exist_ok=True)
    return WORKDIR


@pytest.fixture(scope="session")
def bundle_path(workdir):
    """bundle_path('flash_tp4') -> a .moeb compiled with moec compile --small."""
    cache = {}

    def compile_table(name):
        if name not in cache:
            out = os.path.join(workdir, name + ".moeb")
            status, text = run("compile", "--small", "--allow-spills", "-q",
                               os.path.join(TABLES, name + ".table"), "-o", out)
            assert status == 0, text
            cache[name] = out
        return cache[name]
    return compile_table


@pytest.fixture(scope="session")
def device():
    return moec.Device("emulated")


class Oracle:
    """One layer's inputs from `moec reference --write-inputs` and the
    comparison of an output with the oracle."""

    def __init__(self, directory, family, flags):
        self.directory, self.family, self.flags = directory, family, flags
        self.arrays = {}
        for name in os.listdir(os.path.join(directory, "in")):
            if name.endswith(".npy") and not name.startswith("output"):
                self.arrays[name[:-4]] = npy.load(os.path.join(directory, "in", name)).numpy()

    def compare(self, output, tag="out"):
        """output: BF16 bits uint16 [M, H] or float32 [M, H]; returns the
        relative L2 distance after asserting it is within TOLERANCE and every
        element within the oracle's own bound."""
        out_dir = os.path.join(self.directory, tag)
        os.makedirs(out_dir, exist_ok=True)
        npy.save(os.path.join(out_dir, "output.npy"), np.ascontiguousarray(output))
        status, text = run("reference", "--family", self.family, *self.flags, "--inputs",
                           os.path.join(self.directory, "in"), "--compare", out_dir,
                           "--tolerance", TOLERANCE, "-o", os.path.join(self.directory, "oracle-" + tag))
        match = re.search(r"relative L2 ([0-9.eE+-]+)", text)
        assert match, text
        rel = float(match.group(1))
        assert status == 0 and rel <= TOLERANCE, text
        return rel


@pytest.fixture
def oracle(workdir, request):
    """oracle(family, H, I, E, K, m, seed, interleave=0, swiglu=0.0,
    activation="silu")."""

    def make(family, hidden, intermediate, experts, top_k, m, seed, interleave=0, swiglu=0.0,
             activation="silu"):
        directory = os.path.join(workdir, re.sub(r"[^\w.-]", "_", request.node.name) +
                                 "-%s-e%d-k%d" % (family, experts, top_k))
        flags = ["--interleave", interleave, "--swiglu-limit", swiglu, "--activation",
                 activation]
        return reference_oracle(directory, family, hidden, intermediate, experts, top_k, m,
                                seed, flags)
    return make


def reference_oracle(directory, family, hidden, intermediate, experts, top_k, m, seed, flags):
    """One layer's seeded inputs (a tenth of the routes invalid) written by
    `moec reference --write-inputs` with FLAGS into DIRECTORY/in, and the
    Oracle that compares outputs with it under the same FLAGS."""
    status, text = run("reference", "--family", family, "--hidden", hidden,
                       "--intermediate", intermediate, "--experts", experts, "--topk", top_k,
                       "--m", m, "--seed", seed, "--invalid-fraction", 0.1, *flags,
                       "--write-inputs", "-o", os.path.join(directory, "in"))
    assert status == 0, text
    return Oracle(directory, family, flags)


def bf16_to_float(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def require_torch():
    """torch, or a skip; with MOEC_REQUIRE_TORCH=1 (CTest) a failure."""
    try:
        import torch
    except ImportError as error:
        if os.environ.get("MOEC_REQUIRE_TORCH") == "1":
            pytest.fail("torch is required (MOEC_REQUIRE_TORCH=1) but cannot be imported (%s): "
                        "run scripts/install-deps.sh (Debian's python3-torch)" % error)
        pytest.skip("torch is not installed")
    return torch


@pytest.fixture
def torch():
    return require_torch()


def torch_on_device(device, array, dtype):
    """A torch CPU tensor of `dtype` over emulated device memory holding
    `array`'s bytes (the emulated device's allocations are host memory);
    the tensor keeps its DeviceBuffer in ._moec_buffer."""
    import torch as torch_module
    array = np.ascontiguousarray(array)
    buffer = device.upload(array)
    raw = (ctypes.c_uint8 * buffer.nbytes).from_address(buffer.ptr)
    tensor = torch_module.frombuffer(raw, dtype=torch_module.uint8)
    tensor = tensor.view(dtype).reshape(array.shape)  # same element size as `array`
    tensor._moec_buffer = buffer
    return tensor
