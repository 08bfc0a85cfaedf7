"""moec.MegaMoE: the fused MegaMoE networks as one object per EP rank.

The shape of AITER's MegaMoEV2 as vLLM's ROCm DeepSeek V4 path uses it
(docs/engines.md, "MegaMoE"): built collectively on every rank of the EP
group (it allocates this rank's symmetric buffer and exchanges every rank's
IPC handle), weights bound once with finalize_weights(), then
forward(hidden, topk_weights, topk_ids) per batch returns this rank's
tokens' full output; moec's fused kernels move the rows between ranks.
"""

import ctypes
import json
import threading

from . import _capi
from ._capi import MoecError, call, invalid
from .fused import _check_dtype, _cpu_tensor_over, _is_tensor, _numel, _shape
from .runtime import Bundle, Device, DeviceBuffer, Layer, pointer_of
from .weights import prepare_expert_weights

__all__ = ["MegaMoE", "ThreadGroup"]


def _torch_all_gather(group):
    """An all_gather of bytes over torch.distributed, or None when it is
    not initialised."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if not (dist.is_available() and dist.is_initialized()):
        return None

    def all_gather(payload):
        gathered = [None] * dist.get_world_size(group)
        dist.all_gather_object(gathered, payload, group=group)
        return gathered
    return all_gather


class ThreadGroup:
    """An all_gather of bytes between threads of one process, one call per
    rank (for ranks driven by threads, e.g. the emulated device's devices):
    group.all_gather(rank) is the callback rank `rank` passes to MegaMoE."""

    def __init__(self, world_size):
        self.world_size = int(world_size)
        self._barrier = threading.Barrier(self.world_size)
        self._slots = [None] * self.world_size

    def all_gather(self, rank):
        def gather(payload):
            self._slots[rank] = payload
            self._barrier.wait()
            gathered = list(self._slots)
            self._barrier.wait()  # everyone has read before the next round writes
            return gathered
        return gather

    def barrier(self):
        self._barrier.wait()


class MegaMoE:
    """One EP rank of a fused MegaMoE layer (a `flash-fused`-style table).

    MegaMoE(bundle, rank=, world_size=, model_dim=, inter_dim=, experts=,
    topk=, max_tok_per_rank=, network=None, device=None, all_gather=None,
    group=None, w1=None, ...)

    Collective: every rank of the EP group constructs its object with the
    same arguments except `rank`. bundle: a Bundle or a path; network: the
    fused network (default: the bundle's only fused network); device: a
    Device, "emulated", None (default HIP) or an ordinal. model_dim,
    inter_dim, experts, topk: checked against the table (None: the
    table's). max_tok_per_rank: the most tokens one rank passes to a
    forward; picks the table's smallest workspace class that holds it.
    all_gather: a callable taking this rank's bytes and returning every
    rank's bytes in rank order (e.g. over the engine's own process group);
    None: torch.distributed's all_gather_object on `group` when
    torch.distributed is initialised. w1, w1_scale, w2, w2_scale (with
    weight_source=): finalize_weights() at construction, as AITER's
    MegaMoEV2 takes them.
    """

    def __init__(self, bundle, *, rank, world_size, model_dim=None, inter_dim=None,
                 experts=None, topk=None, max_tok_per_rank, network=None, device=None,
                 all_gather=None, group=None, swiglu_limit=None, w1=None, w1_scale=None,
                 w2=None, w2_scale=None, weight_source=None):
        rank, world_size = int(rank), int(world_size)
        if not 0 <= rank < world_size:
            raise invalid("rank", "%d is not in [0, world_size=%d)" % (rank, world_size))
        if int(max_tok_per_rank) <= 0:
            raise invalid("max_tok_per_rank", "must be positive, got %r" % (max_tok_per_rank,))
        if not isinstance(bundle, Bundle):
            bundle = Bundle(bundle)
        if not isinstance(device, Device):
            device = Device(None, device) if isinstance(device, int) else Device(device)
        network = network or self._fused_network(bundle, world_size)
        self.rank, self.world_size = rank, world_size
        self.max_tok_per_rank = int(max_tok_per_rank)
        self.device = device
        device.make_current()
        self.layer = Layer(bundle, device, network, ep=world_size, ep_rank=rank,
                           workspace=self.max_tok_per_rank, hidden=model_dim,
                           intermediate=inter_dim, experts=experts, top_k=topk,
                           max_tokens=self.max_tok_per_rank)
        if not self.layer.fused:
            raise invalid("network", "%s at EP %d is not a fused MegaMoE table (use "
                          "moec.Layer / moec.fused_moe for it)" % (network, world_size))
        if swiglu_limit is not None and float(swiglu_limit) != self.layer.swiglu_limit:
            raise invalid("swiglu_limit", "%g, but the table's kernels clamp at %g" %
                          (float(swiglu_limit), self.layer.swiglu_limit))
        if all_gather is None:
            all_gather = _torch_all_gather(group)
        if all_gather is None:
            if world_size != 1:
                raise invalid("all_gather", "torch.distributed is not initialised: pass "
                              "all_gather=, a callable exchanging bytes between the ranks")
            all_gather = lambda payload: [payload]  # noqa: E731
        self._opened = []
        self._exchange_peers(all_gather)
        self._weights_bound = False
        if w1 is not None:
            self.finalize_weights(w1, w1_scale, w2, w2_scale, source=weight_source)

    # -- construction --
    @staticmethod
    def _fused_network(bundle, ep):
        networks = sorted({t[0] for t in bundle.tables()
                           if t[1] == ep and bundle.table_facts(t[0], ep, t[2]).fused})
        if len(networks) != 1:
            raise invalid("network", "the bundle has fused networks %s at EP %d; name one" %
                          (networks, ep))
        return networks[0]

    def _identity(self):
        layer = self.layer
        return [layer.network, layer.hidden, layer.intermediate, layer.experts, layer.top_k,
                self.world_size, layer.workspace_class, layer.max_tokens,
                int(layer.memory.peer_bytes)]

    def _exchange_peers(self, all_gather):
        """Allocates and zeroes this rank's symmetric buffer, then exchanges
        (rank, layer identity, IPC handle) with every rank and binds every
        rank's buffer in rank order."""
        memory = self.layer.memory
        self.symmetric = self.device.alloc(memory.peer_bytes)
        self.symmetric.fill(0)
        self.device.synchronize()  # zero before any peer can see the handle
        handle = _capi.IpcHandle()
        call("moec_device_ipc_handle", "ipc handle", self.device.handle,
             ctypes.c_void_p(self.symmetric.ptr), ctypes.byref(handle))
        payload = json.dumps({"rank": self.rank, "layer": self._identity(),
                              "handle": ctypes.string_at(ctypes.addressof(handle),
                                                         ctypes.sizeof(handle)).hex()}).encode()
        gathered = all_gather(payload)
        if len(gathered) != self.world_size:
            raise invalid("all_gather", "returned %d entries for %d ranks" %
                          (len(gathered), self.world_size))
        bases = []
        for index, entry in enumerate(gathered):
            peer = json.loads(bytes(entry).decode())
            if peer["rank"] != index:
                raise invalid("all_gather", "entry %d is rank %d's (entries must be in rank "
                              "order)" % (index, peer["rank"]))
            if peer["layer"] != self._identity():
                raise invalid("all_gather", "rank %d built %s, this rank (%d) %s: every rank "
                              "needs the same table and shapes" %
                              (index, peer["layer"], self.rank, self._identity()))
            if index == self.rank:
                bases.append(self.symmetric.ptr)
                continue
            # All 64 bytes: the c_char field would stop at the first zero byte.
            peer_handle = _capi.IpcHandle.from_buffer_copy(bytes.fromhex(peer["handle"]))
            pointer = ctypes.c_void_p()
            call("moec_device_ipc_open", "ipc open (rank %d's symmetric buffer)" % index,
                 self.device.handle, ctypes.byref(peer_handle), ctypes.byref(pointer))
            self._opened.append(pointer.value)
            bases.append(pointer.value)
        self.layer.bind_peers(bases)
        self.peer_buffers = bases  # every rank's symmetric buffer, as this process maps it

    # -- properties (AITER's names) --
    model_dim = property(lambda self: self.layer.hidden)
    inter_dim = property(lambda self: self.layer.intermediate)
    experts = property(lambda self: self.layer.experts)
    topk = property(lambda self: self.layer.top_k)
    local_experts = property(lambda self: self.layer.local_experts)
    swiglu_limit = property(lambda self: self.layer.swiglu_limit)
    network = property(lambda self: self.layer.network)

    def __repr__(self):
        return ("MegaMoE(%s rank %d/%d: H=%d I=%d E=%d top_k=%d, %d tokens per rank, "
                "%d symmetric bytes)" % (self.network, self.rank, self.world_size,
                                         self.model_dim, self.inter_dim, self.experts,
                                         self.topk, self.layer.max_tokens,
                                         self.layer.memory.peer_bytes))

    # -- weights --
    def finalize_weights(self, w1, w1_scale, w2, w2_scale, *, source=None):
        """Binds this rank's experts' weights (experts rank * local_experts
        onwards). source None: already in moec's layout on the device
        (tensors, DeviceBuffers or pointers: W13 [E, 2I, H/2] MXFP4 bytes,
        scales [E, 2I, H/32] E8M0, W2 [E, H, I/2], [E, H, I/32]), bound by
        pointer and kept by the caller. source "checkpoint", "aiter", ...
        (moec.prepare_expert_weights): host tensors in that layout, prepared
        and uploaded into memory the layer owns. Call it once after loading;
        calling it again rebinds (one object serves every MoE layer of its
        shape, as vLLM's shared MegaMoEV2 instance does)."""
        layer = self.layer
        if source is not None:
            prepared = prepare_expert_weights(layer, w1, w1_scale, w2, w2_scale, source=source)
            self.device.make_current()
            layer.load_weights(**prepared)
        else:
            E, I, H = layer.local_experts, layer.intermediate, layer.hidden
            packed = ("torch.uint8", "torch.float4_e2m1fn_x2")
            scales = ("torch.uint8", "torch.float8_e8m0fnu")
            for name, value, shape, dtypes in (
                    ("w1", w1, (E, 2 * I, H // 2), packed),
                    ("w1_scale", w1_scale, (E, 2 * I, H // 32), scales),
                    ("w2", w2, (E, H, I // 2), packed),
                    ("w2_scale", w2_scale, (E, H, I // 32), scales)):
                _check_dtype(value, name, dtypes)
                given = _shape(value)
                if given is not None and _numel(given) != _numel(shape):
                    raise invalid(name, "expected %s = %d elements for this rank's %d experts, "
                                  "got shape %s" % (shape, _numel(shape), E, given))
            layer.bind_weights(w13=pointer_of(w1, "w1"), w13_scale=pointer_of(w1_scale, "w1_scale"),
                               w2=pointer_of(w2, "w2"), w2_scale=pointer_of(w2_scale, "w2_scale"))
        self._weights_bound = True

    # -- forward --
    def forward(self, hidden, topk_weights, topk_ids, *, out=None, stream=None, m=None):
        """This rank's tokens through the whole layer: hidden BF16 [m, H],
        topk_weights FP32 [m, top_k], topk_ids int32 [m, top_k] (global
        expert ids; -1 adds zero). Every rank of the group calls forward the
        same number of times with the same m (pad with ids -1, as engines pad
        data-parallel batches). Returns this rank's output BF16 [m, H] (out=,
        else a new tensor like hidden, or a DeviceBuffer for pointers),
        complete once the stream is synchronised; check() then reports
        routes that found no receive row. Asynchronous like a kernel launch:
        on a deferred emulated device the ranks run at the next synchronise."""
        if not self._weights_bound:
            raise invalid("weights", "finalize_weights() has not been called")
        layer, H, K = self.layer, self.layer.hidden, self.layer.top_k
        shape = _shape(hidden)
        if shape is not None:
            _check_dtype(hidden, "hidden", ("torch.bfloat16",))
            if len(shape) != 2 or shape[1] != H:
                raise invalid("hidden", "expected [m, %d], got shape %s" % (H, shape))
            if m is not None and int(m) != shape[0]:
                raise invalid("m", "%d differs from hidden.shape[0] = %d" % (m, shape[0]))
            m = shape[0]
        elif m is None:
            raise invalid("m", "required with raw pointers: the token count")
        m = int(m)
        if m > layer.max_tokens:
            raise invalid("hidden", "%d tokens, more than max_tok_per_rank (the layer holds "
                          "%d)" % (m, layer.max_tokens))
        for name, value, dtype in (("topk_weights", topk_weights, "torch.float32"),
                                   ("topk_ids", topk_ids, "torch.int32")):
            _check_dtype(value, name, (dtype,))
            given = _shape(value)
            if given is not None and given != (m, K):
                raise invalid(name, "expected [%d, %d], got shape %s" % (m, K, given))
        if out is None:
            out = self._new_output(hidden, m, H)
        elif _is_tensor(out) and _shape(out) != (m, H):
            raise invalid("out", "expected [%d, %d], got shape %s" % (m, H, _shape(out)))
        if stream is None and getattr(hidden, "is_cuda", False):
            import torch
            stream = torch.cuda.current_stream(hidden.device).cuda_stream
        self.device.make_current()
        layer.forward(m, hidden, topk_ids, topk_weights, out, stream)
        return out

    __call__ = forward

    def _new_output(self, hidden, m, H):
        if _is_tensor(hidden):
            import torch
            if getattr(hidden, "is_cuda", False):
                return torch.empty((m, H), dtype=torch.bfloat16, device=hidden.device)
            return _cpu_tensor_over(DeviceBuffer(self.device, m * H * 2), (m, H), torch.bfloat16)
        return DeviceBuffer(self.device, m * H * 2)

    def synchronize(self, stream=None):
        self.device.make_current()
        self.device.synchronize(stream)

    def check(self, stream=None):
        """Synchronises, then raises MoecError (what "overflow") when some
        route of the forwards so far found its expert's receive rows full:
        those outputs are incomplete. The count is sticky until cleared, so
        check() clears it after reporting. Returns the forwards launched."""
        self.synchronize(stream)
        overflow, forwards = self.layer.read_status()
        if overflow:
            self.layer.clear_status()
            raise MoecError(1, "%d route(s) found no receive row on rank %d (max_tok_per_rank "
                            "%d too small for this routing): the outputs since the last "
                            "check are incomplete" % (overflow, self.rank,
                                                      self.max_tok_per_rank), "overflow")
        return forwards

    def release(self):
        for pointer in getattr(self, "_opened", []):
            _capi.lib.moec_device_ipc_close(self.device.handle, ctypes.c_void_p(pointer))
        self._opened = []
        if getattr(self, "layer", None) is not None:
            self.layer.release()
        if getattr(self, "symmetric", None) is not None:
            self.symmetric.free()

    def __del__(self):
        try:
            self.release()
        except MoecError:
            pass
