"""Bundles, devices, device memory and layers over the C API."""

import ctypes
import json
import os
import re
import struct

from . import _capi
from ._buffers import host_buffer
from ._capi import MoecError, call, invalid
from ._weight_layout import WeightLayout

__all__ = ["Bundle", "Device", "DeviceBuffer", "Layer", "TableFacts", "AiterSelection",
           "select_aiter", "emulated_hip_library", "pointer_of", "host_buffer"]


# ---- Argument conversion --------------------------------------------------

def pointer_of(value, what, allow_none=False):
    """A device pointer (int) from an int, a DeviceBuffer, a torch tensor
    (data_ptr()) or an object with __cuda_array_interface__."""
    if value is None:
        if allow_none:
            return None
        raise invalid(what, "a device pointer is required (got None)")
    if isinstance(value, bool):
        raise invalid(what, "expected a device pointer, got a bool")
    if isinstance(value, int):
        if value == 0 and not allow_none:
            raise invalid(what, "null device pointer")
        return value or None
    if isinstance(value, DeviceBuffer):
        return value.ptr
    if hasattr(value, "data_ptr") and callable(value.data_ptr):
        if hasattr(value, "is_contiguous") and not value.is_contiguous():
            raise invalid(what, "the tensor is not contiguous")
        return int(value.data_ptr())
    interface = getattr(value, "__cuda_array_interface__", None)
    if interface is not None:
        return int(interface["data"][0])
    raise invalid(what, "expected a device pointer (int), a moec.DeviceBuffer or a "
                  "torch tensor, got %s" % type(value).__name__)


def _stream(stream):
    if stream is None:
        return None
    if isinstance(stream, int):
        return stream or None
    handle = getattr(stream, "cuda_stream", None)  # torch.cuda.Stream (HIP too)
    if handle is not None:
        return int(handle) or None
    raise invalid("stream", "expected a hipStream_t (int), a torch stream or None")


# ---- Bundles ----------------------------------------------------------------

_ATTR_RE = re.compile(r"(\w+)\s*=\s*([^,>]+)")


# The W13 problem's activation element type -> the layer's activation
# format: the tokens' format after the layer's quant kernel (AITER's
# q_dtype_a: torch.float8_e4m3fn, torch.float4_e2m1fn_x2, torch.bfloat16).
_ACTIVATION_FORMATS = {"f8E4M3FN": "fp8", "f4E2M1FN": "fp4", "bf16": "bf16"}


def _parse_attr(text):
    """'#moe.problem<hidden = 512, ...>' -> {'hidden': '512', ...}."""
    inner = text[text.find("<") + 1:text.rfind(">")]
    return {k: v.strip() for k, v in _ATTR_RE.findall(inner)}


def _attr_number(text):
    """'16 : i64' -> 16; '1.000000e+01 : f32' -> 10.0."""
    value = text.split(":")[0].strip()
    try:
        return int(value)
    except ValueError:
        return float(value)


class TableFacts:
    """What a selection table's kernels were compiled for, read from the
    bundle's manifest: hidden, intermediate, experts (routed, all EP ranks),
    top_k (routed), ep, workspace, family, gate_up_interleave,
    swiglu_limit, shared_expert (FHMoE), fused (MegaMoE peer kernels),
    activation (over every W13 kernel of the table: "silu",
    "gpt-oss-swiglu" for AITER's ActivationType.Swiglu, "situ-v2" for its
    ActivationType.Situv2, or "mixed" when its rows disagree), a_format
    (the tokens' format after the quant kernel, from the first W13 kernel's
    problem: "fp8" for A8W4, "fp4" for A4W4, "bf16" for A16W4), mid_format
    (the intermediate's format, which the first W2 kernel reads), w13_bias
    and w2_bias (the kernels take AITER's bias1 / bias2), situ_beta and
    situ_linear_beta (SiTUv2's betas as compiled into the first W13
    kernel; None for other activations)."""

    def __init__(self, **values):
        self.__dict__.update(values)

    def __repr__(self):
        return "TableFacts(%s)" % ", ".join("%s=%r" % kv for kv in sorted(self.__dict__.items()))


class Bundle:
    """An open .moeb bundle (moec_bundle_open)."""

    def __init__(self, path, verify_code_objects_on_first_use=False):
        self.path = os.fspath(path)
        handle = ctypes.c_void_p()
        flags = 1 if verify_code_objects_on_first_use else 0
        call("moec_bundle_open_with_flags", self.path, self.path.encode(), flags,
             ctypes.byref(handle))
        self._handle = handle
        self._manifest = None

    @property
    def handle(self):
        if not self._handle:
            raise invalid("bundle", "the bundle is closed")
        return self._handle

    def close(self):
        if getattr(self, "_handle", None):
            _capi.lib.moec_bundle_close(self._handle)
            self._handle = None

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def target_arch(self):
        arch = ctypes.c_char_p()
        call("moec_bundle_target_arch", "bundle", self.handle, ctypes.byref(arch))
        return arch.value.decode()

    def kernel_names(self):
        count = ctypes.c_uint32()
        call("moec_bundle_kernel_count", "bundle", self.handle, ctypes.byref(count))
        names = []
        for i in range(count.value):
            info = _capi.KernelInfo()
            call("moec_bundle_kernel_info", "bundle", self.handle, i, ctypes.byref(info))
            names.append(info.name.decode())
        return names

    def config_id(self, index):
        info = _capi.ConfigInfo()
        call("moec_bundle_config_info", "config %d" % index, self.handle, index,
             ctypes.byref(info))
        return info.id.decode()

    def resolve_table(self, network, ep=1, workspace=0):
        table = _capi.Table()
        call("moec_bundle_resolve_table", "table %s ep%d ws%d" % (network, ep, workspace),
             self.handle, network.encode(), ep, workspace, ctypes.byref(table))
        return table

    def select(self, network, ep, workspace, m):
        """(config id, row m) the table of (network, ep, workspace) selects for m."""
        selection = _capi.Selection()
        call("moec_bundle_select", "select m=%d" % m, self.handle,
             self.resolve_table(network, ep, workspace), m, ctypes.byref(selection))
        return self.config_id(selection.config), selection.row_m

    def selection(self, network, ep, workspace, m):
        """The full moec_bundle_select result for m tokens per rank in the
        table of (network, ep, smallest workspace class >= workspace): a
        Selection with config (index), config_id, row, row_m, exact and
        fallback (m above the largest row under above_max=largest). A miss
        (above_max=error, or m above a fused table's capacity) raises
        MoecError MOEC_STATUS_SELECTION_MISS with the runtime's one-line
        reason; no table of workspace class >= workspace raises
        MOEC_STATUS_NOT_FOUND."""
        if isinstance(m, bool) or not isinstance(m, int) or m < 0:
            raise invalid("selection", "m must be an integer >= 0, not %r" % (m,))
        out = _capi.Selection()
        call("moec_bundle_select", "select %s ep%d ws%d m=%d" % (network, ep, workspace, m),
             self.handle, self.resolve_table(network, ep, workspace), m, ctypes.byref(out))
        return Selection(out, self.config_id(out.config))

    def select_aiter(self, m, **key):
        """AITER's lookup (docs/aiter-tables.md) for m tokens; key: every key
        column of AITER's CSV by its name, with the CSV's value or anything
        whose str() is that spelling (aiter.ActivationType.Silu,
        torch.bfloat16, 256, ...). Nothing is defaulted or adjusted. A miss
        raises MoecError MOEC_STATUS_SELECTION_MISS, a row the bundle did not
        compile MOEC_STATUS_ROW_NOT_COMPILED, both naming the key or row."""
        if isinstance(m, bool) or not isinstance(m, int) or m < 0:
            raise invalid("select_aiter", "m must be an integer >= 0, not %r" % (m,))
        encoded = [(str(column).encode(), str(value).encode())
                   for column, value in key.items()]
        columns = (_capi.AiterColumn * max(1, len(encoded)))(*encoded)
        out = _capi.AiterSelection()
        call("moec_bundle_select_aiter", "select_aiter m=%d" % m, self.handle, m,
             columns, len(encoded), ctypes.byref(out))
        return AiterSelection(out, self.config_id(out.config))

    def manifest(self):
        """The manifest JSON (read from the file; the C API verified it at open)."""
        if self._manifest is None:
            with open(self.path, "rb") as f:
                header = f.read(160)
                offset, size = struct.unpack_from("<QQ", header, 56)
                f.seek(offset)
                self._manifest = json.loads(f.read(size).decode("utf-8"))
        return self._manifest

    def tables(self):
        """[(network, ep, workspace, family)] of the bundle's selection tables."""
        return [(t["network"], t["ep"], t["workspace"], t["family"])
                for t in self.manifest()["selection"]]

    def table_facts(self, network, ep=1, workspace=0):
        """TableFacts of the table moec_bundle_resolve_table picks."""
        table = self.resolve_table(network, ep, workspace)
        manifest = self.manifest()
        entry = manifest["selection"][table.index]
        stages = {"w13": [], "w2": []}
        for row in entry["rows"]:
            for k in manifest["configs"][row["config"]]["kernels"]:
                kernel = manifest["kernels"][k]
                if kernel["stage"] in stages:
                    stages[kernel["stage"]].append(kernel["attributes"])
        if not stages["w13"]:
            raise invalid("network", "table %s ep%d ws%d has no W13 kernel" %
                          (network, ep, workspace))
        attrs = stages["w13"][0]
        problem = _parse_attr(attrs["problem"])
        w2_problem = _parse_attr(stages["w2"][0]["problem"]) if stages["w2"] else {}
        shared = "shared_fp8_expert" in attrs
        activations = {"gpt-oss-swiglu" if "gpt_oss_swiglu" in a else
                       "situ-v2" if "situ_v2" in a else "silu"
                       for a in stages["w13"]}
        return TableFacts(
            network=entry["network"], ep=entry["ep"], workspace=entry["workspace"],
            family=entry["family"], hidden=int(problem["hidden"]),
            intermediate=int(problem["intermediate"]),
            experts=int(problem["experts"]) - (1 if shared else 0),
            top_k=int(problem["top_k"]) - (1 if shared else 0),
            gate_up_interleave=_attr_number(attrs.get("gate_up_interleave", "0")),
            swiglu_limit=float(_attr_number(attrs.get("swiglu_limit", "0"))),
            shared_expert=shared, fused="peer" in attrs,
            activation=activations.pop() if len(activations) == 1 else "mixed",
            a_format=_ACTIVATION_FORMATS.get(problem.get("activation"),
                                             problem.get("activation")),
            mid_format=_ACTIVATION_FORMATS.get(w2_problem.get("activation"),
                                               w2_problem.get("activation")),
            w13_bias=any("bias" in a for a in stages["w13"]),
            w2_bias=any("bias" in a for a in stages["w2"]),
            situ_beta=(float(_attr_number(attrs["situ_beta"]))
                       if "situ_v2" in attrs else None),
            situ_linear_beta=(float(_attr_number(attrs["situ_linear_beta"]))
                              if "situ_v2" in attrs else None))


# ---- Devices ------------------------------------------------------------------

class Selection:
    """The row moec_bundle_select picks: config (index into the bundle's
    configurations), config_id, row (index in the table), row_m, exact
    (row_m == m) and fallback (m above the table's largest row, served by it
    under above_max=largest)."""

    def __init__(self, raw, config_id):
        self.config = raw.config
        self.config_id = config_id
        self.row = raw.row
        self.row_m = raw.row_m
        self.exact = bool(raw.exact)
        self.fallback = bool(raw.fallback)

    def __repr__(self):
        return ("Selection(config_id=%r, row=%d, row_m=%d, exact=%s, fallback=%s)" %
                (self.config_id, self.row, self.row_m, self.exact, self.fallback))


class AiterSelection:
    """The row AITER's lookup picks (moec_aiter_selection_t): kernelName1,
    kernelName2, block_m, ksplit, source_row (its CSV line, header = 1),
    file, rule ("exact", "act_type_fallback", "tier_fallback"), token (the
    bucket of m), row_token, row (index into aiter_rows), config (the moec
    configuration id) and config_index."""

    def __init__(self, c, config_id):
        self.kernelName1 = c.kernel_name1.decode()
        self.kernelName2 = c.kernel_name2.decode()
        self.block_m = c.block_m
        self.ksplit = c.ksplit
        self.source_row = c.source_row
        self.file = c.file.decode()
        self.rule = c.rule.decode()
        self.token = c.token
        self.row_token = c.row_token
        self.row = c.row
        self.config_index = c.config
        self.config = config_id

    def __repr__(self):
        return "AiterSelection(%s:%d %s %s %s block_m=%d)" % (
            self.file, self.source_row, self.rule, self.kernelName1, self.kernelName2,
            self.block_m)


def select_aiter(bundle, m, **key):
    """moec.select_aiter(bundle, m, gfx=..., cu_num=..., ...): Bundle.select_aiter
    on a Bundle or a bundle path."""
    if isinstance(bundle, Bundle):
        return bundle.select_aiter(m, **key)
    with Bundle(bundle) as opened:
        return opened.select_aiter(m, **key)


def emulated_hip_library():
    """$MOEC_EMULATED_HIP_LIBRARY, or libmoec_emulated_hip.so next to the
    loaded libmoec_runtime.so."""
    explicit = os.environ.get("MOEC_EMULATED_HIP_LIBRARY")
    if explicit:
        return explicit
    runtime = _capi.library_path()
    if runtime:
        candidate = os.path.join(os.path.dirname(runtime), "libmoec_emulated_hip.so")
        if os.path.exists(candidate):
            return candidate
    raise MoecError(6, "libmoec_emulated_hip.so not found next to %s; set "
                    "MOEC_EMULATED_HIP_LIBRARY" % (runtime or "libmoec_runtime.so"),
                    "device")


class Device:
    """One HIP device (moec_device_create).

    hip_library: None (the C API's search: $MOEC_HIP_LIBRARY, then the
    system's libamdhip64), "emulated" (the emulated HIP device) or a path.
    """

    def __init__(self, hip_library=None, ordinal=0):
        if hip_library == "emulated":
            hip_library = emulated_hip_library()
        self.hip_library = hip_library
        self.ordinal = ordinal
        handle = ctypes.c_void_p()
        call("moec_device_create", "device %s" % (hip_library or "(default HIP)"),
             hip_library.encode() if hip_library else None, ordinal, ctypes.byref(handle))
        self._handle = handle
        #: The stream of the capture under way on this device
        #: (moec.graph_capture), which calls given stream=None use; None
        #: when no capture is open.
        self.capture_stream = None

    @property
    def handle(self):
        if not self._handle:
            raise invalid("device", "the device is released")
        return self._handle

    def default_stream(self, stream):
        """`stream` as a hipStream_t (None: the null stream), or the open
        capture's stream when `stream` is None."""
        stream = _stream(stream)
        return self.capture_stream if stream is None else stream

    def create_stream(self):
        """A new hipStream_t of this device (moec_device_stream_create), as
        an int; destroy it with destroy_stream."""
        stream = ctypes.c_void_p()
        call("moec_device_stream_create", "stream", self.handle, ctypes.byref(stream))
        return stream.value

    def destroy_stream(self, stream):
        call("moec_device_stream_destroy", "stream", self.handle, _stream(stream))

    def release(self):
        if getattr(self, "_handle", None):
            _capi.lib.moec_device_release(self._handle)
            self._handle = None

    def __del__(self):
        self.release()

    @property
    def compute_units(self):
        count = ctypes.c_uint32()
        call("moec_device_compute_units", "device", self.handle, ctypes.byref(count))
        return count.value

    def make_current(self):
        call("moec_device_make_current", "device", self.handle)

    def synchronize(self, stream=None):
        call("moec_device_synchronize", "synchronize", self.handle, _stream(stream))

    def alloc(self, nbytes):
        """A DeviceBuffer of nbytes (freed when it is garbage or .free())."""
        return DeviceBuffer(self, nbytes)

    def upload(self, data, what="upload"):
        """A new DeviceBuffer holding a copy of host data."""
        view = host_buffer(data, what)
        buffer = DeviceBuffer(self, max(view.nbytes, 1))
        if view.nbytes:
            call("moec_device_copy_to_device", what, self.handle, buffer.ptr,
                 view.address, view.nbytes)
        buffer.nbytes = view.nbytes
        return buffer

    def copy_to_device(self, dst, data, what="copy to device"):
        view = host_buffer(data, what)
        call("moec_device_copy_to_device", what, self.handle, pointer_of(dst, what),
             view.address, view.nbytes)

    def copy_to_host(self, src, nbytes, out=None, what="copy to host"):
        """Copies nbytes from device pointer src into out (writable host
        memory) or a new bytearray, which it returns."""
        if out is None:
            out = bytearray(nbytes)
        view = host_buffer(out, what, writable=True)
        if view.nbytes < nbytes:
            raise invalid(what, "the host buffer holds %d bytes, %d needed" % (view.nbytes, nbytes))
        call("moec_device_copy_to_host", what, self.handle, view.address,
             pointer_of(src, what), nbytes)
        return out

    def fill(self, dst, value, nbytes, stream=None):
        """Stream-ordered fill (stream None: the null stream, or the open
        capture's stream, where it is recorded)."""
        call("moec_device_fill", "fill", self.handle, pointer_of(dst, "fill"), value, nbytes,
             self.default_stream(stream))


class DeviceBuffer:
    """Device memory from moec_device_alloc; int(buffer) is its address."""

    def __init__(self, device, nbytes):
        self.device = device
        self.nbytes = int(nbytes)
        pointer = ctypes.c_void_p()
        call("moec_device_alloc", "alloc %d bytes" % nbytes, device.handle, max(self.nbytes, 1),
             ctypes.byref(pointer))
        self.ptr = pointer.value

    def __int__(self):
        return self.ptr

    __index__ = __int__

    def free(self):
        if getattr(self, "ptr", None) and self.device._handle:
            _capi.lib.moec_device_free(self.device._handle, self.ptr)
        self.ptr = None

    def __del__(self):
        self.free()

    def upload(self, data):
        self.device.copy_to_device(self.ptr, data)

    def download(self, nbytes=None, out=None):
        return self.device.copy_to_host(self.ptr, self.nbytes if nbytes is None else nbytes, out)

    def fill(self, value, stream=None):
        self.device.fill(self.ptr, value, self.nbytes, stream)

    def __repr__(self):
        return "DeviceBuffer(0x%x, %d bytes)" % (self.ptr or 0, self.nbytes)


class _Executable:
    def __init__(self, device, bundle):
        self.device, self.bundle = device, bundle
        handle = ctypes.c_void_p()
        call("moec_executable_create", "executable", device.handle, bundle.handle,
             ctypes.byref(handle))
        self._handle = handle

    def release(self):
        if getattr(self, "_handle", None):
            _capi.lib.moec_executable_release(self._handle)
            self._handle = None

    def __del__(self):
        self.release()


# ---- Layers -----------------------------------------------------------------------

_WEIGHT_NAMES = ("w13", "w13_scale", "w2", "w2_scale", "shared_w13", "shared_w13_scale",
                 "shared_w2", "shared_w2_scale")
# The torch dtypes a bound weight tensor may have: its bytes are in moec's
# layout either way, so uint8 always passes; the typed ones are what
# AITER's and vLLM's MXFP4 paths hold (packed FP4, E8M0 scales) and the
# FHMoE shared expert's FP8 E4M3FN.
_PACKED_FP4 = ("torch.uint8", "torch.float4_e2m1fn_x2")
_E8M0 = ("torch.uint8", "torch.float8_e8m0fnu")
_FP8 = ("torch.uint8", "torch.float8_e4m3fn")
WEIGHT_DTYPES = {"w13": _PACKED_FP4, "w13_scale": _E8M0, "w2": _PACKED_FP4, "w2_scale": _E8M0,
                 "shared_w13": _FP8, "shared_w13_scale": _E8M0, "shared_w2": _FP8,
                 "shared_w2_scale": _E8M0}


def check_weight_dtype(value, name, what=None):
    """MoecError naming `what` (default the weight's name) when `value` is
    a tensor whose dtype the weight `name` cannot have."""
    dtype = getattr(value, "dtype", None)
    if dtype is None or not hasattr(value, "data_ptr"):
        return
    allowed = WEIGHT_DTYPES[name]
    if str(dtype) not in allowed:
        raise invalid(what or name, "dtype %s is not supported (expected %s)" %
                      (dtype, " or ".join(allowed)))


class Layer:
    """A whole MoE layer over one selection table (moec_layer_create).

    Layer(bundle, device, network, ep=1, workspace=0, ep_rank=0, ...):
    bundle is a Bundle or a path; device a Device, None (default HIP),
    "emulated" or a HIP library path; (network, ep, workspace) the table key.
    The problem (hidden, intermediate, experts, top_k) defaults to what the
    table was compiled for (Bundle.table_facts); pass them to check an
    engine's shapes. max_tokens: the largest M (0: the table's class).
    workspace_buffer: a device pointer of >= memory.workspace_bytes (default:
    the layer allocates one on its device).
    """

    def __init__(self, bundle, device=None, network=None, ep=1, workspace=0, *, ep_rank=0,
                 hidden=None, intermediate=None, experts=None, top_k=None, max_tokens=0,
                 workspace_buffer=None):
        if not isinstance(bundle, Bundle):
            bundle = Bundle(bundle)
        if not isinstance(device, Device):
            device = Device(device) if not isinstance(device, int) else Device(None, device)
        if network is None:
            networks = sorted({t[0] for t in bundle.tables()})
            if len(networks) != 1:
                raise invalid("network", "the bundle has networks %s; name one" % networks)
            network = networks[0]
        self.bundle, self.device = bundle, device
        self.network, self.ep, self.ep_rank = network, int(ep), int(ep_rank)
        self.facts = bundle.table_facts(network, ep, workspace)
        self.workspace_class = self.facts.workspace
        given = {"hidden": hidden, "intermediate": intermediate, "experts": experts,
                 "top_k": top_k}
        problem = _capi.LayerProblem()
        for name, value in given.items():
            setattr(problem, name, int(value) if value is not None else getattr(self.facts, name))
        problem.ep_rank, problem.ep_size = self.ep_rank, self.ep
        problem.max_tokens = int(max_tokens)
        self.problem = problem
        self._table = bundle.resolve_table(network, ep, workspace)
        self._executable = _Executable(device, bundle)
        handle = ctypes.c_void_p()
        device.make_current()
        call("moec_layer_create", "layer %s ep%d rank %d" % (network, ep, ep_rank),
             self._executable._handle, self._table, ctypes.byref(problem), ctypes.byref(handle))
        self._handle = handle
        memory = _capi.LayerMemory()
        call("moec_layer_memory", "layer memory", handle, ctypes.byref(memory))
        self.memory = memory
        self._owned = {}
        self._weights = dict.fromkeys(_WEIGHT_NAMES)
        if workspace_buffer is None:
            workspace_buffer = self._owned["workspace"] = device.alloc(memory.workspace_bytes)
            size = memory.workspace_bytes
        else:
            size = getattr(workspace_buffer, "nbytes", memory.workspace_bytes)
        self.bind_workspace(workspace_buffer, size)

    # -- properties --
    hidden = property(lambda self: self.problem.hidden)
    intermediate = property(lambda self: self.problem.intermediate)
    experts = property(lambda self: self.problem.experts)
    top_k = property(lambda self: self.problem.top_k)
    max_tokens = property(lambda self: self.memory.max_tokens)
    fused = property(lambda self: bool(self.memory.fused))
    shared_expert = property(lambda self: bool(self.memory.shared_expert))
    gate_up_interleave = property(lambda self: self.facts.gate_up_interleave)
    swiglu_limit = property(lambda self: self.facts.swiglu_limit)
    activation = property(lambda self: self.facts.activation)
    a_format = property(lambda self: self.facts.a_format)

    @property
    def local_experts(self):
        """Experts whose weights this rank binds (routed, this rank's slice)."""
        return self.experts // self.ep if self.ep > 1 else self.experts

    @property
    def handle(self):
        if not getattr(self, "_handle", None):
            raise invalid("layer", "the layer is released")
        return self._handle

    def release(self):
        if getattr(self, "_handle", None):
            _capi.lib.moec_layer_release(self._handle)
            self._handle = None
        for buffer in getattr(self, "_owned", {}).values():
            buffer.free()
        if getattr(self, "_executable", None):
            self._executable.release()

    def __del__(self):
        self.release()

    def __repr__(self):
        return ("Layer(%s ep%d rank %d ws%d: H=%d I=%d E=%d top_k=%d%s%s)" %
                (self.network, self.ep, self.ep_rank, self.workspace_class, self.hidden,
                 self.intermediate, self.experts, self.top_k,
                 " fused" if self.fused else "", " +shared expert" if self.shared_expert else ""))

    # -- memory --
    def bind_workspace(self, pointer, nbytes):
        call("moec_layer_bind_workspace", "workspace", self.handle,
             pointer_of(pointer, "workspace_buffer"), int(nbytes))

    def bind_peers(self, buffers):
        """Fused tables: the symmetric buffers of ranks 0..ep-1."""
        array = (ctypes.c_void_p * len(buffers))(*[pointer_of(b, "peers[%d]" % i)
                                                  for i, b in enumerate(buffers)])
        call("moec_layer_bind_peers", "peers", self.handle, array, len(buffers))

    def bind_weights(self, w13=None, w13_scale=None, w2=None, w2_scale=None, *,
                     shared_w13=None, shared_w13_scale=None, shared_w2=None,
                     shared_w2_scale=None):
        """Binds device pointers of prepared weights (docs/families.md,
        "Weight layouts"); arguments left None keep their last binding (so
        the shared expert can be bound once and the routed experts per call)."""
        given = {"w13": w13, "w13_scale": w13_scale, "w2": w2, "w2_scale": w2_scale,
                 "shared_w13": shared_w13, "shared_w13_scale": shared_w13_scale,
                 "shared_w2": shared_w2, "shared_w2_scale": shared_w2_scale}
        weights = dict(self._weights)
        for name, value in given.items():
            if value is not None:
                check_weight_dtype(value, name)
                weights[name] = pointer_of(value, name)
        for name in _WEIGHT_NAMES[:4]:
            if weights[name] is None:
                raise invalid(name, "not bound: the layer needs w13, w13_scale, w2 and w2_scale")
        if self.shared_expert:
            for name in _WEIGHT_NAMES[4:]:
                if weights[name] is None:
                    raise invalid(name, "not bound: this FHMoE layer needs its shared "
                                  "expert (Layer.bind_weights(shared_w13=..., ...))")
        struct_ = _capi.LayerWeights(*[weights[n] for n in _WEIGHT_NAMES])
        call("moec_layer_bind_weights", "weights", self.handle, ctypes.byref(struct_))
        self._weights = weights

    def bind_bias(self, w13_bias=None, w2_bias=None):
        """Binds device pointers of the per-expert FP32 biases of a table
        whose kernels take them (AITER's bias1 and bias2: w13_bias
        [local experts, 2I] in logical order, gate then up, whatever the
        gate/up interleave; w2_bias [local experts, H]; FHMoE's shared
        expert last). Bind them before bind_weights, which refuses such a
        table without them; None: none."""
        call("moec_layer_bind_bias", "bias", self.handle,
             pointer_of(w13_bias, "w13_bias") if w13_bias is not None else None,
             pointer_of(w2_bias, "w2_bias") if w2_bias is not None else None)

    def load_weights(self, **host_arrays):
        """Uploads host weights (w13=..., w13_scale=..., shared_w13=... as
        HostArray, NumPy arrays, bytes) into device memory the layer owns,
        and binds them."""
        unknown = set(host_arrays) - set(_WEIGHT_NAMES)
        if unknown:
            raise invalid(sorted(unknown)[0], "not a weight name (%s)" % ", ".join(_WEIGHT_NAMES))
        buffers = {}
        for name, data in host_arrays.items():
            if data is not None:
                buffers[name] = self.device.upload(data, what=name)
        self.bind_weights(**buffers)
        self._owned.update({"weight:" + k: v for k, v in buffers.items()})

    # -- forward --
    def forward(self, m, hidden, topk_ids, topk_weights, out, stream=None):
        """moec_layer_forward: device pointers (ints, DeviceBuffers, tensors).
        stream None: the null stream, or inside moec.graph_capture the
        capture's stream (the forward is recorded, not run)."""
        call("moec_layer_forward", "forward m=%d" % m, self.handle, int(m),
             pointer_of(hidden, "hidden_states"), pointer_of(topk_ids, "topk_ids"),
             pointer_of(topk_weights, "topk_weight"), pointer_of(out, "out"),
             self.device.default_stream(stream))

    def forward_experts(self, rows, hidden, local_ids, weights, out, expert_counts=None,
                        stream=None):
        """moec_layer_forward_experts: the rows a dispatcher delivered (device
        pointers: BF16 [rows, H], int32 local ids [rows, top_k], FP32
        weights [rows, top_k], out BF16 [rows, H]); expert_counts: None or
        the routes per local expert as host ints (moec.experts_forward
        takes tensors and arrays)."""
        counts = None
        if expert_counts is not None:
            values = [int(c) for c in expert_counts]
            if len(values) != self.local_experts or min(values, default=0) < 0:
                raise invalid("expert_counts", "%d counts %s, expected one non-negative "
                              "count per local expert (%d)" %
                              (len(values), values[:8], self.local_experts))
            counts = (ctypes.c_uint32 * len(values))(*values)
        struct_ = _capi.ExpertRows(int(rows), pointer_of(hidden, "hidden_states", rows == 0),
                                   pointer_of(local_ids, "topk_ids", rows == 0),
                                   pointer_of(weights, "topk_weights", rows == 0), counts,
                                   pointer_of(out, "out", rows == 0))
        call("moec_layer_forward_experts", "forward_experts rows=%d" % rows, self.handle,
             ctypes.byref(struct_), self.device.default_stream(stream))

    def last_forward(self):
        """(config id, launches) of the last forward."""
        config, launches = ctypes.c_uint32(), ctypes.c_uint32()
        call("moec_layer_last_forward", "last forward", self.handle, ctypes.byref(config),
             ctypes.byref(launches))
        return self.bundle.config_id(config.value), launches.value

    def read_status(self):
        """(overflow_routes, forwards); sync the stream first."""
        status = _capi.LayerStatus()
        call("moec_layer_read_status", "status", self.handle, ctypes.byref(status))
        return status.overflow_routes, status.forwards

    def clear_status(self):
        call("moec_layer_clear_status", "status", self.handle)

    # -- weight preparation (moec.weights) --
    def weight_layout(self):
        """The WeightLayout this layer's kernels read (moec_layer_weight_layout)."""
        layout = _capi.WeightLayout()
        call("moec_layer_weight_layout", "weight layout", self.handle, ctypes.byref(layout))
        return WeightLayout._from_c(layout)
