"""Host memory as (address, size) for the C API: the one helper that both
runtime.py (uploads, downloads) and weights.py (weight preparation) use, kept
here so neither of them imports the other."""

import ctypes

from ._capi import invalid
from .npy import HostArray

__all__ = ["host_buffer"]


class _HostView:
    """Address and size of host memory, keeping its owner alive."""

    def __init__(self, address, nbytes, owner):
        self.address, self.nbytes, self.owner = address, nbytes, owner


def host_buffer(value, what, writable=False):
    """Host memory of a HostArray, NumPy array, torch CPU tensor or
    bytes-like object."""
    if isinstance(value, HostArray):
        value = value.data
    if hasattr(value, "__array_interface__") and not isinstance(value, (bytes, bytearray)):
        interface = value.__array_interface__
        if interface.get("strides") is not None:
            raise invalid(what, "the array is not C-contiguous")
        address, readonly = interface["data"]
        if writable and readonly:
            raise invalid(what, "the array is read-only")
        return _HostView(address, int(value.nbytes), value)
    if hasattr(value, "data_ptr") and hasattr(value, "element_size"):
        if getattr(value, "is_cuda", False):
            raise invalid(what, "expected a host (CPU) tensor")
        if not value.is_contiguous():
            raise invalid(what, "the tensor is not contiguous")
        return _HostView(int(value.data_ptr()), int(value.numel() * value.element_size()), value)
    if isinstance(value, bytes):
        if writable:
            raise invalid(what, "bytes are read-only; pass a bytearray")
        holder = ctypes.c_char_p(value)
        return _HostView(ctypes.cast(holder, ctypes.c_void_p).value or 0, len(value),
                         (value, holder))
    try:
        view = memoryview(value)
    except TypeError:
        raise invalid(what, "expected host data (bytes, bytearray, NumPy array, "
                      "moec.HostArray, torch CPU tensor), got %s" % type(value).__name__)
    if not view.contiguous:
        raise invalid(what, "the buffer is not contiguous")
    if view.readonly:
        if writable:
            raise invalid(what, "the buffer is read-only")
        data = bytes(view)
        return host_buffer(data, what)
    view = view.cast("B")
    array = (ctypes.c_char * len(view)).from_buffer(view)
    return _HostView(ctypes.addressof(array), len(view), (value, view, array))
