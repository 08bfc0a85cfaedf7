"""moec.graph_capture on the emulated device: a layer's forward captured
once as a HIP graph (moec_device_begin_capture / end_capture), replayed
with new inputs written into the captured buffers, against the eager
forward (bit for bit) and the oracle; captures that break HIP's rules fail
with HIP's error text. docs/python.md, "Graph capture"."""

import numpy as np
import pytest

import moec
from conftest import reference_oracle
from test_fused_moe import POISON, check_zero_rows, prepare_checkpoint

NAMES = ("hidden_states", "topk_ids", "topk_weights")
WEIGHTS = ("w13", "w13_scale", "w2", "w2_scale")


def oracle_case(workdir, tag, layer, m, seed):
    """A flash-tp4 oracle case in its own folder (the oracle fixture keeps
    one folder per test, and a test here needs two cases)."""
    import os
    directory = os.path.join(workdir, "graph-capture-%s-seed%d" % (tag, seed))
    flags = ["--interleave", 0, "--swiglu-limit", layer.swiglu_limit, "--activation", "silu"]
    return reference_oracle(directory, "tp", layer.hidden, layer.intermediate, layer.experts,
                            layer.top_k, m, seed, flags)


def needs_capture():
    if not all(moec._capi.has(n) for n in ("moec_device_begin_capture",
                                           "moec_device_end_capture", "moec_graph_launch")):
        pytest.fail("the runtime does not export the graph capture functions")


class Buffers:
    """One layer's device buffers; `load` writes a case's data into them
    (the same pointers, as a captured graph needs)."""

    def __init__(self, device, layer, m):
        self.device, self.m, self.H = device, m, layer.hidden
        sizes = moec.weight_sizes(layer.weight_layout())
        K = layer.top_k
        nbytes = {"hidden_states": m * self.H * 2, "topk_ids": m * K * 4,
                  "topk_weights": m * K * 4}
        nbytes.update({name: sizes[name] for name in WEIGHTS})
        self.buffers = {name: device.alloc(n) for name, n in nbytes.items()}
        self.out = device.alloc(m * self.H * 2)

    def load(self, layer, arrays):
        prepared = prepare_checkpoint(layer, *[arrays[n] for n in WEIGHTS])
        for name in WEIGHTS:
            self.device.copy_to_device(self.buffers[name], prepared[name], name)
        for name in NAMES:
            self.device.copy_to_device(self.buffers[name], np.ascontiguousarray(arrays[name]),
                                       name)
        self.out.fill(POISON)
        self.device.synchronize()

    def bind(self, layer):
        layer.bind_weights(*[self.buffers[n] for n in WEIGHTS])

    def forward(self, layer, stream=None):
        layer.forward(self.m, self.buffers["hidden_states"], self.buffers["topk_ids"],
                      self.buffers["topk_weights"], self.out, stream)

    def output(self):
        return np.frombuffer(self.out.download(), np.uint16).reshape(self.m, self.H).copy()


def test_captured_forward_replays_like_eager(bundle_path, device, workdir):
    """flash-tp4: the forward captured once, nothing run by the capture
    (the output stays poisoned), then replayed for two inputs (weights,
    tokens, routing all new, written into the captured buffers) and the
    first again: each replay equals the eager forward of the same data bit
    for bit and is within the oracle's bound (1/128 relative L2,
    conftest.TOLERANCE, and every element within the oracle's own)."""
    needs_capture()
    layer = moec.Layer(moec.Bundle(bundle_path("flash_tp4")), device, "flash-tp4")
    H, I, E, K, m = layer.hidden, layer.intermediate, layer.experts, layer.top_k, 21
    cases = [oracle_case(workdir, "layer", layer, m, seed) for seed in (31, 32)]
    buffers = Buffers(device, layer, m)
    buffers.bind(layer)

    eager = []
    for case in cases:
        buffers.load(layer, case.arrays)
        buffers.forward(layer)
        device.synchronize()
        eager.append(buffers.output())
        check_zero_rows(eager[-1], case.arrays["topk_ids"], E)
    assert not np.array_equal(eager[0], eager[1])

    buffers.load(layer, cases[0].arrays)  # poisons the output
    launches_before = layer.read_status()[1]
    with moec.graph_capture(layer) as graph:
        assert device.capture_stream == graph.stream and graph.stream
        buffers.forward(layer)  # stream None: the capture's stream
    assert device.capture_stream is None
    device.synchronize(graph.stream)
    assert np.all(buffers.output() == 0xFFFF), "the capture ran the forward"
    assert layer.last_forward()[1] == 5  # the recorded launches: quant, sort, W13, W2, combine

    for index in (1, 0, 1):
        buffers.load(layer, cases[index].arrays)
        graph.replay()
        graph.synchronize()
        replayed = buffers.output()
        assert np.array_equal(replayed, eager[index]), "replay %d differs from eager" % index
        cases[index].compare(replayed, tag="replay%d" % index)
    assert graph.replays == 3
    # The eager path still works after the capture, on the null stream.
    buffers.load(layer, cases[1].arrays)
    buffers.forward(layer)
    device.synchronize()
    assert np.array_equal(buffers.output(), eager[1])
    assert layer.read_status()[1] >= launches_before
    graph.release()
    with pytest.raises(moec.MoecError) as error:
        graph.replay()
    assert error.value.what == "graph"


def test_captured_fused_moe_with_torch_tensors(bundle_path, device, workdir, torch):
    """moec.fused_moe with torch tensors (CPU tensors over emulated device
    memory) inside a capture: recorded on the capture's stream, replayed
    after new tokens are copied into the same tensors, bit-identical to
    the eager call."""
    needs_capture()
    from conftest import torch_on_device
    layer = moec.Layer(moec.Bundle(bundle_path("flash_tp4")), device, "flash-tp4")
    H, I, E, K, m = layer.hidden, layer.intermediate, layer.experts, layer.top_k, 9
    first = oracle_case(workdir, "torch", layer, m, 41)
    second = oracle_case(workdir, "torch", layer, m, 42)
    a = first.arrays
    prepared = prepare_checkpoint(layer, *[a[n] for n in WEIGHTS])
    shapes = {"w13": (E, 2 * I, H // 2), "w13_scale": (-1,), "w2": (E, H, I // 2),
              "w2_scale": (-1,)}
    w = {n: torch_on_device(device, np.frombuffer(bytes(getattr(v, "data", v)), np.uint8)
                            .reshape(shapes[n]), torch.uint8) for n, v in prepared.items()}
    tensors = {"hidden_states": torch_on_device(device, a["hidden_states"], torch.bfloat16),
               "topk_ids": torch_on_device(device, a["topk_ids"], torch.int32),
               "topk_weights": torch_on_device(device, a["topk_weights"], torch.float32)}
    out = torch_on_device(device, np.full((m, H), 0xFFFF, np.uint16), torch.bfloat16)

    def call():
        return moec.fused_moe(tensors["hidden_states"], w["w13"], w["w2"],
                              tensors["topk_weights"], tensors["topk_ids"],
                              w1_scale=w["w13_scale"], w2_scale=w["w2_scale"], out=out,
                              layer=layer)

    def bits():
        return np.frombuffer(out._moec_buffer.download(), np.uint16).reshape(m, H).copy()

    def load(arrays):  # tokens and routing only: the weights stay the first case's
        device.synchronize()
        for name in NAMES:
            device.copy_to_device(tensors[name], np.ascontiguousarray(arrays[name]), name)
        device.fill(out, POISON, m * H * 2)
        device.synchronize()

    load(second.arrays)
    call()
    device.synchronize()
    eager_second = bits()
    load(a)
    with moec.graph_capture(layer) as graph:
        assert call() is out
    device.synchronize(graph.stream)
    assert np.all(bits() == 0xFFFF)
    graph.replay().synchronize()
    first.compare(bits())
    load(second.arrays)
    graph.replay().synchronize()
    assert np.array_equal(bits(), eager_second)
    graph.release()


def test_capture_that_allocates_fails_with_hip_error(bundle_path, device):
    """HIP refuses an allocation during a capture: fused_moe without out=
    allocates its output, which fails with hipMalloc's error text
    (hipErrorStreamCaptureUnsupported) and invalidates the capture; the
    block's error propagates and no graph is left. Caught inside the
    block, the end of the capture then fails with
    hipErrorStreamCaptureInvalidated. The device works eagerly afterwards."""
    needs_capture()
    layer = moec.Layer(moec.Bundle(bundle_path("flash_tp4")), device, "flash-tp4")
    m, H, K = 4, layer.hidden, layer.top_k
    sizes = moec.weight_sizes(layer.weight_layout())
    weights = {n: device.upload(bytes(sizes[n])) for n in WEIGHTS}
    hidden = device.upload(bytes(m * H * 2))
    ids = device.upload(np.full((m, K), -1, np.int32))
    routing = device.upload(bytes(m * K * 4))

    def allocating_call():
        return moec.fused_moe(hidden, weights["w13"], weights["w2"], routing, ids,
                              w1_scale=weights["w13_scale"], w2_scale=weights["w2_scale"],
                              m=m, layer=layer)  # no out=: allocates a DeviceBuffer

    with pytest.raises(moec.MoecError) as error:
        with moec.graph_capture(layer) as graph:
            allocating_call()
    assert error.value.status_name == "MOEC_STATUS_HIP_ERROR"
    assert "hipMalloc failed: hipErrorStreamCaptureUnsupported" in error.value.message
    assert error.value.message.endswith("(900)")
    assert device.capture_stream is None
    with pytest.raises(moec.MoecError):
        graph.replay()

    with pytest.raises(moec.MoecError) as error:
        with moec.graph_capture(layer) as graph:
            with pytest.raises(moec.MoecError):
                allocating_call()
    assert error.value.what == "graph capture"
    assert "hipStreamEndCapture failed: hipErrorStreamCaptureInvalidated" in error.value.message
    assert error.value.message.endswith("(901)")

    # A synchronous copy (an upload) is refused during a capture too.
    with pytest.raises(moec.MoecError) as error:
        with moec.graph_capture(device):
            device.copy_to_device(hidden, bytes(16))
    assert "hipErrorStreamCaptureImplicit" in error.value.message
    assert error.value.message.endswith("(906)")

    out = allocating_call()  # eagerly: allocates, runs, every id -1 -> zeros
    device.synchronize()
    assert not any(out.download())


def test_capture_arguments(bundle_path, device):
    """The C API refuses capturing the null stream; a capture on a stream
    the caller made records there and leaves the stream to the caller; a
    second capture on the same device while one is open is refused."""
    needs_capture()
    with pytest.raises(moec.MoecError) as error:
        moec._capi.call("moec_device_begin_capture", "capture", device.handle, None)
    assert error.value.status_name == "MOEC_STATUS_INVALID_ARGUMENT"
    assert "null stream cannot be captured" in error.value.message
    buffer = device.alloc(64)
    buffer.fill(0x11)
    device.synchronize()
    stream = device.create_stream()
    try:
        with moec.graph_capture(device, stream=stream) as graph:
            assert graph.stream == stream == device.capture_stream
            buffer.fill(0x22)  # recorded on the capture's stream
            with pytest.raises(moec.MoecError) as error:
                with moec.graph_capture(device):
                    pass
            assert error.value.what == "graph_capture"
        device.synchronize(stream)
        assert set(buffer.download()) == {0x11}  # recorded, not run
        graph.replay().synchronize()
        assert set(buffer.download()) == {0x22}
        graph.release()
        assert graph.stream == stream  # the caller's stream is not destroyed
    finally:
        device.destroy_stream(stream)


def test_hip_library_without_capture():
    """A HIP library without the stream and graph entry points (the null
    HIP of moec-layer-bench, bench/null_hip.c: every layer call, no
    streams) loads as a device, and the capture calls refuse it with
    MOEC_STATUS_NO_HIP_RUNTIME naming the missing symbol."""
    import os
    path = os.path.join(os.path.dirname(moec.library_path() or ""), "libmoec_null_hip.so")
    if not os.path.exists(path):
        pytest.skip("no libmoec_null_hip.so next to the runtime (a build tree has it)")
    device = moec.Device(path)
    with pytest.raises(moec.MoecError) as error:
        device.create_stream()
    assert error.value.status_name == "MOEC_STATUS_NO_HIP_RUNTIME"
    assert "no stream capture in this HIP library" in error.value.message
    assert "hipStreamCreate" in error.value.message  # named among the missing symbols
    with pytest.raises(moec.MoecError) as error:
        with moec.graph_capture(device, stream=1 << 12):
            pass
    assert error.value.status_name == "MOEC_STATUS_NO_HIP_RUNTIME"
    assert device.capture_stream is None
