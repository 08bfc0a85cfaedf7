#!/usr/bin/env python3
"""Writes a consistent .npy file of dtype |u1 and the given shape as a
sparse file: the header, then a hole of the data's size (no disk used).

  sparse_npy.py PATH DIM [DIM ...]
"""
import struct
import sys

path, dims = sys.argv[1], [int(d) for d in sys.argv[2:]]
header = "{'descr': '|u1', 'fortran_order': False, 'shape': (%s), }" % (
    ", ".join("%d" % d for d in dims) if len(dims) > 1 else "%d," % dims[0])
header += " " * (64 - (10 + len(header) + 1) % 64) + "\n"
size = 1
for d in dims:
    size *= d
with open(path, "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    f.truncate(10 + len(header) + size)
