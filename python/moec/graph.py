"""moec.graph_capture: a layer's forward captured once as a HIP graph and
replayed (moec_device_begin_capture / end_capture, moec_graph_launch).

    with moec.graph_capture(layer) as graph:
        layer.forward(m, hidden, ids, weights, out)     # recorded, not run
    graph.replay()                                      # runs it
    graph.synchronize()

The forward is recorded with its pointers: a replay reads the buffers as
they are then (write new inputs into the same buffers) and writes the same
output. docs/python.md, "Graph capture".
"""

import ctypes

from . import _capi
from ._capi import MoecError, call, invalid
from .runtime import Device, Layer, _stream

__all__ = ["Graph", "graph_capture"]


def _device_of(target):
    if isinstance(target, Device):
        return target
    if isinstance(target, Layer):
        return target.device
    device = getattr(target, "device", None)  # moec.MegaMoE, ModularExperts.layer, ...
    if isinstance(device, Device):
        return device
    layer = getattr(target, "layer", None)
    if isinstance(layer, Layer):
        return layer.device
    raise invalid("graph_capture", "expected a moec.Layer, moec.MegaMoE or moec.Device, "
                  "got %s" % type(target).__name__)


class Graph:
    """The work one capture recorded (moec_graph_t), after the `with` block
    of moec.graph_capture ends. replay(stream=None) launches it on `stream`
    (default: the stream it was captured on); synchronize() waits for that
    stream; release() frees the graph and the stream moec created."""

    def __init__(self, device, stream, owns_stream):
        self.device, self.stream = device, stream
        self._owns_stream = owns_stream
        self._handle = None
        self.replays = 0

    @property
    def handle(self):
        if not self._handle:
            raise invalid("graph", "no graph: the capture has not ended, failed, or the "
                          "graph is released")
        return self._handle

    def replay(self, stream=None):
        """Launches the recorded work (stream-ordered; the emulated device
        runs it now, or at the next synchronise when its launches are
        deferred). Returns self."""
        target = self.stream if stream is None else _stream(stream)
        self.device.make_current()
        call("moec_graph_launch", "graph replay", self.handle, target)
        self.replays += 1
        return self

    def synchronize(self, stream=None):
        self.device.synchronize(self.stream if stream is None else stream)

    def release(self):
        if getattr(self, "_handle", None):
            _capi.lib.moec_graph_release(self._handle)
            self._handle = None
        if getattr(self, "_owns_stream", False) and self.stream and self.device._handle:
            try:
                self.device.destroy_stream(self.stream)
            except MoecError:
                pass
            self._owns_stream = False
            self.stream = None

    def __del__(self):
        self.release()

    def __repr__(self):
        return "Graph(stream 0x%x, %s, %d replays)" % (
            self.stream or 0, "captured" if self._handle else "no graph", self.replays)


class graph_capture:
    """Captures what the `with` block launches on a device as one graph.

    graph_capture(target, stream=None): target a moec.Layer (its device), a
    moec.MegaMoE or a moec.Device; stream a hipStream_t of that device to
    capture on (default: a new one, moec_device_stream_create; the null
    stream cannot be captured). Inside the block, calls given stream=None
    on that device (Layer.forward and forward_experts, moec.fused_moe and
    moec.experts_forward with pointers or CPU tensors, MegaMoE.forward,
    Device.fill) use the capture's stream and are recorded, not run.
    HIP's capture rules hold: an allocation (e.g. fused_moe without out=)
    or a synchronous copy (an upload, Device.synchronize) fails with HIP's
    error text and invalidates the capture. At the end of the block the
    capture ends (moec_device_end_capture); an invalidated capture raises
    MoecError with HIP's text (hipErrorStreamCaptureInvalidated), unless
    the block itself raised, whose error then propagates. `as` gives the
    Graph.
    """

    def __init__(self, target, stream=None):
        self.device = _device_of(target)
        given = _stream(stream)
        self.graph = Graph(self.device, given, owns_stream=False)
        self._given = given

    def __enter__(self):
        device = self.device
        if device.capture_stream is not None:
            raise invalid("graph_capture", "a capture is already open on this device")
        device.make_current()
        if self._given is None:
            self.graph.stream = device.create_stream()
            self.graph._owns_stream = True
        try:
            call("moec_device_begin_capture", "graph capture", device.handle,
                 self.graph.stream)
        except MoecError:
            self.graph.release()
            raise
        device.capture_stream = self.graph.stream
        return self.graph

    def __exit__(self, exc_type, exc, tb):
        device = self.device
        device.capture_stream = None
        handle = ctypes.c_void_p()
        try:
            call("moec_device_end_capture", "graph capture", device.handle, self.graph.stream,
                 ctypes.byref(handle))
        except MoecError:
            if exc_type is None:
                raise
            return False  # the block's own error says more
        self.graph._handle = handle
        return False
