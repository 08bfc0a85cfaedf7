"""ctypes bindings of the moec runtime's C API (runtime/include/moec/moec_runtime.h).

Loads libmoec_runtime.so once, declares every function's prototype and
turns a nonzero moec_status_t into MoecError. The standard library only.
"""

import ctypes
import os

__all__ = ["MoecError", "lib", "library_path", "check", "has", "status_name"]

# The loaded libmoec_runtime.so (set below, once _load() succeeds).
lib = None


def status_name(status):
    """moec_status_name(status): the C library names its own statuses, so a
    new one needs no copy here ("MOEC_STATUS_UNKNOWN" for a value it does
    not know; "MOEC_STATUS_<n>" while no library is loaded)."""
    status = int(status)
    if lib is None:
        return "MOEC_STATUS_%d" % status
    return lib.moec_status_name(status).decode("ascii")  # prototype: _PROTOTYPES


class MoecError(RuntimeError):
    """A failed moec call, or an argument moec refuses.

    status: the moec_status_t value (1 = MOEC_STATUS_INVALID_ARGUMENT for
    arguments the Python layer refuses); status_name: its name, from
    moec_status_name (or `name`, for the one error raised before the library
    is loaded); message: moec_last_error_message() (or the Python layer's
    message); what: the call or argument it concerns.
    """

    def __init__(self, status, message, what="", name=None):
        self.status = int(status)
        self.status_name = name or status_name(self.status)
        self.message = message
        self.what = what
        text = "%s: %s" % (self.status_name, message)
        if what:
            text = "%s: %s" % (what, text)
        super().__init__(text)


def invalid(what, message):
    """MoecError for an argument refused before any C call."""
    return MoecError(1, message, what)


# ---- Structures ---------------------------------------------------------
# Each mirrors the C struct moec_<snake_case class name>_t of moec_runtime.h
# (or the one a `_c_type_` attribute names), field for field;
# test/python/test_capi_layout.py checks every structure of the package
# against the header with the C compiler.

c_u32 = ctypes.c_uint32
c_u64 = ctypes.c_uint64
c_i64 = ctypes.c_int64
c_u8 = ctypes.c_uint8
vp = ctypes.c_void_p


class KernelResources(ctypes.Structure):
    _fields_ = [("vgpr", c_u32), ("agpr", c_u32), ("sgpr", c_u32),
                ("lds_bytes", c_u32), ("private_segment_bytes", c_u32),
                ("vgpr_spill", c_u32), ("sgpr_spill", c_u32),
                ("wavefront_size", c_u32), ("max_flat_workgroup_size", c_u32)]


class KernelInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("symbol", ctypes.c_char_p),
                ("stage", ctypes.c_char_p), ("content_hash", ctypes.c_char_p),
                ("code_object", c_u32), ("workgroup_size", c_u32 * 3),
                ("arg_count", c_u32), ("resources", KernelResources)]


class ConfigInfo(ctypes.Structure):
    _fields_ = [("id", ctypes.c_char_p), ("provenance", ctypes.c_char_p),
                ("kernel_count", c_u32), ("kernels", ctypes.POINTER(c_u32))]


class Table(ctypes.Structure):
    _fields_ = [("index", c_u32)]


class Selection(ctypes.Structure):
    _fields_ = [("config", c_u32), ("row", c_u32), ("row_m", c_u32),
                ("exact", c_u8), ("fallback", c_u8), ("kernel_count", c_u32),
                ("kernels", ctypes.POINTER(c_u32))]


class AiterColumn(ctypes.Structure):
    _fields_ = [("column", ctypes.c_char_p), ("value", ctypes.c_char_p)]


class AiterSelection(ctypes.Structure):
    _fields_ = [("kernel_name1", ctypes.c_char_p), ("kernel_name2", ctypes.c_char_p),
                ("block_m", c_u32), ("ksplit", c_u32), ("source_row", c_u32),
                ("file", ctypes.c_char_p), ("rule", ctypes.c_char_p), ("token", c_u32),
                ("row_token", c_u32), ("row", c_u32), ("config", c_u32),
                ("kernel_count", c_u32), ("kernels", ctypes.POINTER(c_u32))]


class LayerProblem(ctypes.Structure):
    _fields_ = [("hidden", c_u32), ("intermediate", c_u32), ("experts", c_u32),
                ("top_k", c_u32), ("ep_rank", c_u32), ("ep_size", c_u32),
                ("max_tokens", c_u32)]


class LayerMemory(ctypes.Structure):
    _fields_ = [("workspace_bytes", c_u64), ("peer_bytes", c_u64),
                ("peer_recv_a_offset", c_u64), ("peer_recv_scale_offset", c_u64),
                ("peer_recv_meta_offset", c_u64), ("peer_control_offset", c_u64),
                ("peer_control_bytes", c_u64), ("peer_combine_rows_offset", c_u64),
                ("max_tokens", c_u32), ("fused", c_u8), ("shared_expert", c_u8)]


class LayerWeights(ctypes.Structure):
    _fields_ = [("w13", vp), ("w13_scale", vp), ("w2", vp), ("w2_scale", vp),
                ("shared_w13", vp), ("shared_w13_scale", vp),
                ("shared_w2", vp), ("shared_w2_scale", vp)]


class ExpertRows(ctypes.Structure):
    _fields_ = [("rows", c_u32), ("hidden", vp), ("local_ids", vp), ("weights", vp),
                ("expert_counts", ctypes.POINTER(c_u32)), ("out", vp)]


class LayerStatus(ctypes.Structure):
    _fields_ = [("overflow_routes", c_u64), ("forwards", c_u64)]


class IpcHandle(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_char * 64)]


# Weight preparation (moec_runtime.h, "Weights").
class Tensor(ctypes.Structure):
    _fields_ = [("data", vp), ("ndim", c_u32), ("shape", c_i64 * 4),
                ("dtype", ctypes.c_char_p)]


WEIGHT_SOURCE_CHECKPOINT = 0
WEIGHT_SOURCE_AITER = 1


class WeightLayout(ctypes.Structure):
    _fields_ = [("hidden", c_u32), ("intermediate", c_u32), ("experts", c_u32),
                ("gate_up_interleave", c_u32), ("shared_expert", c_u8)]


class WeightSizes(ctypes.Structure):
    _fields_ = [("w13", c_u64), ("w13_scale", c_u64), ("w2", c_u64),
                ("w2_scale", c_u64), ("shared_w13", c_u64),
                ("shared_w13_scale", c_u64), ("shared_w2", c_u64),
                ("shared_w2_scale", c_u64)]


# ---- Loading ------------------------------------------------------------

def _candidate_paths():
    explicit = os.environ.get("MOEC_RUNTIME_LIBRARY")
    if explicit:
        return [explicit]
    here = os.path.dirname(os.path.abspath(__file__))
    dirs = []
    try:  # written by CMake into the build-tree and installed copies
        from ._location import RUNTIME_LIBRARY_DIRS
        dirs.extend(os.path.normpath(os.path.join(here, d)) for d in RUNTIME_LIBRARY_DIRS)
    except ImportError:
        pass
    # A source checkout (python/moec) with the default build folder.
    dirs.append(os.path.normpath(os.path.join(here, "..", "..", "build", "lib")))
    paths = [os.path.join(d, "libmoec_runtime.so") for d in dirs]
    return [p for p in paths if os.path.exists(p)] + ["libmoec_runtime.so.0",
                                                      "libmoec_runtime.so"]


def _load():
    errors = []
    for path in _candidate_paths():
        try:
            return ctypes.CDLL(path), path
        except OSError as error:
            errors.append("%s (%s)" % (path, error))
    # The library that names statuses is the one that did not load.
    raise MoecError(6, "cannot load libmoec_runtime.so; tried " + "; ".join(errors) +
                    " (set MOEC_RUNTIME_LIBRARY to its path)", "moec",
                    name="MOEC_STATUS_NO_HIP_RUNTIME")


lib, _loaded_path = _load()


def library_path():
    """Absolute path of the loaded libmoec_runtime.so (None: found by the loader)."""
    if os.path.sep in _loaded_path:
        return os.path.abspath(_loaded_path)
    return None


def has(name):
    """Whether the loaded runtime exports the C function `name`."""
    return hasattr(lib, name)


S = ctypes.c_int  # moec_status_t
P = ctypes.POINTER

_PROTOTYPES = {
    "moec_last_error_message": (ctypes.c_char_p, []),
    "moec_status_name": (ctypes.c_char_p, [S]),
    "moec_bundle_open": (S, [ctypes.c_char_p, P(vp)]),
    "moec_bundle_open_with_flags": (S, [ctypes.c_char_p, c_u32, P(vp)]),
    "moec_bundle_close": (None, [vp]),
    "moec_bundle_apply_overrides": (S, [vp, ctypes.c_char_p, P(c_u32)]),
    "moec_bundle_target_arch": (S, [vp, P(ctypes.c_char_p)]),
    "moec_bundle_target_compute_units": (S, [vp, P(c_u32)]),
    "moec_bundle_kernel_count": (S, [vp, P(c_u32)]),
    "moec_bundle_kernel_info": (S, [vp, c_u32, P(KernelInfo)]),
    "moec_bundle_find_kernel": (S, [vp, ctypes.c_char_p, P(c_u32)]),
    "moec_bundle_config_count": (S, [vp, P(c_u32)]),
    "moec_bundle_config_info": (S, [vp, c_u32, P(ConfigInfo)]),
    "moec_bundle_resolve_table": (S, [vp, ctypes.c_char_p, c_u32, c_u32, P(Table)]),
    "moec_bundle_select": (S, [vp, Table, c_u32, P(Selection)]),
    "moec_bundle_select_aiter": (S, [vp, c_u64, P(AiterColumn), c_u32, P(AiterSelection)]),
    "moec_device_create": (S, [ctypes.c_char_p, ctypes.c_int, P(vp)]),
    "moec_device_release": (None, [vp]),
    "moec_device_compute_units": (S, [vp, P(c_u32)]),
    "moec_executable_create": (S, [vp, vp, P(vp)]),
    "moec_executable_release": (None, [vp]),
    "moec_device_alloc": (S, [vp, ctypes.c_size_t, P(vp)]),
    "moec_device_free": (S, [vp, vp]),
    "moec_device_copy_to_device": (S, [vp, vp, vp, ctypes.c_size_t]),
    "moec_device_copy_to_host": (S, [vp, vp, vp, ctypes.c_size_t]),
    "moec_device_fill": (S, [vp, vp, ctypes.c_int, ctypes.c_size_t, vp]),
    "moec_device_make_current": (S, [vp]),
    "moec_device_synchronize": (S, [vp, vp]),
    "moec_device_ipc_handle": (S, [vp, vp, P(IpcHandle)]),
    "moec_device_ipc_open": (S, [vp, P(IpcHandle), P(vp)]),
    "moec_device_ipc_close": (S, [vp, vp]),
    # Streams and graph capture (bound when the runtime exports them).
    "moec_device_stream_create": (S, [vp, P(vp)]),
    "moec_device_stream_destroy": (S, [vp, vp]),
    "moec_device_begin_capture": (S, [vp, vp]),
    "moec_device_end_capture": (S, [vp, vp, P(vp)]),
    "moec_graph_launch": (S, [vp, vp]),
    "moec_graph_release": (None, [vp]),
    "moec_layer_create": (S, [vp, Table, P(LayerProblem), P(vp)]),
    "moec_layer_release": (None, [vp]),
    "moec_layer_memory": (S, [vp, P(LayerMemory)]),
    "moec_layer_bind_workspace": (S, [vp, vp, ctypes.c_size_t]),
    "moec_layer_bind_peers": (S, [vp, P(vp), c_u32]),
    "moec_layer_bind_weights": (S, [vp, P(LayerWeights)]),
    "moec_layer_bind_bias": (S, [vp, vp, vp]),
    "moec_layer_forward": (S, [vp, c_u32, vp, vp, vp, vp, vp]),
    "moec_layer_forward_experts": (S, [vp, P(ExpertRows), vp]),
    "moec_layer_last_forward": (S, [vp, P(c_u32), P(c_u32)]),
    "moec_layer_read_status": (S, [vp, P(LayerStatus)]),
    "moec_layer_clear_status": (S, [vp]),
    # Weight preparation: bound when the runtime exports them (has()).
    "moec_layer_weight_layout": (S, [vp, P(WeightLayout)]),
    "moec_weight_sizes": (S, [P(WeightLayout), P(WeightSizes)]),
    "moec_prepare_expert_weights": (S, [P(WeightLayout), ctypes.c_int, P(Tensor),
                                        P(Tensor), P(Tensor), P(Tensor),
                                        vp, vp, vp, vp, c_u32]),
    "moec_prepare_shared_expert": (S, [P(WeightLayout), P(Tensor), P(Tensor),
                                       P(Tensor), P(Tensor), vp, vp, vp, vp, c_u32]),
}

for _name, (_restype, _argtypes) in _PROTOTYPES.items():
    if hasattr(lib, _name):
        _function = getattr(lib, _name)
        _function.restype = _restype
        _function.argtypes = _argtypes


def last_error_message():
    message = lib.moec_last_error_message()
    return message.decode("utf-8", "replace") if message else ""


def check(status, what):
    """Raises MoecError(status, moec_last_error_message(), what) unless OK."""
    if status != 0:
        raise MoecError(status, last_error_message(), what)


def call(name, what, *args):
    """Calls C function `name`; MoecError naming `what` on failure, and a
    clear error when this runtime does not export the function."""
    if not hasattr(lib, name):
        raise MoecError(10, "this libmoec_runtime.so (%s) does not export %s; "
                        "rebuild or update the runtime" % (_loaded_path, name), what)
    check(getattr(lib, name)(*args), what)
