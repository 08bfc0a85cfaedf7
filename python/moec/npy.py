"""Minimal .npy reading and writing (format version 1, C order) with the
standard library only, and HostArray, a typed byte buffer on the host.

moec's files (`moec reference`, `moec run --save`) hold uint8, uint16
(BF16 bits), int32, float32 and float64 arrays; those are the dtypes here.
"""

import ast
import os
import struct

__all__ = ["HostArray", "load", "save", "DTYPES"]

# dtype name -> (.npy descr, item size)
DTYPES = {
    "uint8": ("|u1", 1),
    "int8": ("|i1", 1),
    "uint16": ("<u2", 2),
    "int32": ("<i4", 4),
    "uint32": ("<u4", 4),
    "float32": ("<f4", 4),
    "float64": ("<f8", 8),
}
_BY_DESCR = {descr: name for name, (descr, _) in DTYPES.items()}
_BY_DESCR.update({"<u1": "uint8", "<i1": "int8", "|b1": "uint8"})


def _count(shape):
    n = 1
    for d in shape:
        n *= int(d)
    return n


class HostArray:
    """A C-order array on the host: `data` (a bytearray), `shape`, `dtype`
    (a name of DTYPES). Converts to NumPy with .numpy() when NumPy is there."""

    def __init__(self, data, shape, dtype):
        if dtype not in DTYPES:
            raise ValueError("HostArray: unsupported dtype %r (one of %s)" %
                             (dtype, ", ".join(sorted(DTYPES))))
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtype
        self.data = data if isinstance(data, bytearray) else bytearray(data)
        expected = _count(self.shape) * DTYPES[dtype][1]
        if len(self.data) != expected:
            raise ValueError("HostArray: %d bytes for shape %s of %s (expected %d)" %
                             (len(self.data), self.shape, dtype, expected))

    @property
    def nbytes(self):
        return len(self.data)

    @property
    def itemsize(self):
        return DTYPES[self.dtype][1]

    def tolist(self):
        """Flat list of the values (slow for large arrays)."""
        fmt = {"uint8": "B", "int8": "b", "uint16": "H", "int32": "i", "uint32": "I",
               "float32": "f", "float64": "d"}[self.dtype]
        return list(struct.unpack("<%d%s" % (_count(self.shape), fmt), bytes(self.data)))

    def numpy(self):
        import numpy
        return numpy.frombuffer(self.data, dtype=DTYPES[self.dtype][0]).reshape(self.shape)

    @classmethod
    def from_numpy(cls, array):
        import numpy
        array = numpy.ascontiguousarray(array)
        name = _BY_DESCR.get(array.dtype.str)
        if name is None:
            raise ValueError("HostArray: unsupported NumPy dtype %s" % array.dtype)
        return cls(bytearray(array.tobytes()), array.shape, name)

    def __repr__(self):
        return "HostArray(shape=%s, dtype=%s)" % (self.shape, self.dtype)


def load(path):
    """Reads a .npy file into a HostArray."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:6] != b"\x93NUMPY":
        raise ValueError("%s: not a .npy file" % path)
    major = raw[6]
    if major == 1:
        length = struct.unpack_from("<H", raw, 8)[0]
        start = 10
    else:
        length = struct.unpack_from("<I", raw, 8)[0]
        start = 12
    header = ast.literal_eval(raw[start:start + length].decode("latin1"))
    if header.get("fortran_order"):
        raise ValueError("%s: Fortran order is not supported" % path)
    name = _BY_DESCR.get(header["descr"])
    if name is None:
        raise ValueError("%s: unsupported dtype %s" % (path, header["descr"]))
    return HostArray(bytearray(raw[start + length:]), header["shape"], name)


def save(path, array):
    """Writes a HostArray (or a NumPy array) as a version-1 .npy file."""
    if not isinstance(array, HostArray):
        array = HostArray.from_numpy(array)
    shape = array.shape
    shape_text = "(%s)" % (", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else ""))
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (
        DTYPES[array.dtype][0], shape_text)
    pad = 64 - (10 + len(header) + 1) % 64
    header = header + " " * (pad % 64) + "\n"
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
        f.write(array.data)
    os.replace(tmp, path)
