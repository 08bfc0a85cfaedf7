#!/usr/bin/env python3
"""Rewrites one kernel's name in a bundle's manifest, as an attacker would:
the new name is PREFIX padded with 'x' to the old name's length, so the
layout stays, and every checksum the name touches (the manifest section's
XXH64 and the header's) is recomputed (docs/bundle-format.md). Standard
library only.

  rename_kernel.py IN.moeb OUT.moeb KERNEL_INDEX PREFIX
"""
import json
import struct
import sys

MASK = (1 << 64) - 1
P1, P2, P3, P4, P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                      0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5)


def rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & MASK


def round_(acc, lane):
    return (rotl((acc + lane * P2) & MASK, 31) * P1) & MASK


def merge(acc, v):
    return ((acc ^ round_(0, v)) * P1 + P4) & MASK


def xxh64(data, seed=0):
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + P1 + P2) & MASK, (seed + P2) & MASK, seed, (seed - P1) & MASK]
        while i + 32 <= n:
            for j in range(4):
                v[j] = round_(v[j], struct.unpack_from("<Q", data, i + 8 * j)[0])
            i += 32
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & MASK
        for lane in v:
            h = merge(h, lane)
    else:
        h = (seed + P5) & MASK
    h = (h + n) & MASK
    while i + 8 <= n:
        h = (rotl(h ^ round_(0, struct.unpack_from("<Q", data, i)[0]), 27) * P1 + P4) & MASK
        i += 8
    if i + 4 <= n:
        h = (rotl(h ^ (struct.unpack_from("<I", data, i)[0] * P1) & MASK, 23) * P2 + P3) & MASK
        i += 4
    while i < n:
        h = (rotl(h ^ (data[i] * P5) & MASK, 11) * P1) & MASK
        i += 1
    h ^= h >> 33
    h = (h * P2) & MASK
    h ^= h >> 29
    h = (h * P3) & MASK
    return h ^ (h >> 32)


def main():
    source, target, index, prefix = sys.argv[1:5]
    data = bytearray(open(source, "rb").read())
    offset, size = struct.unpack_from("<QQ", data, 48 + 8)
    manifest = bytes(data[offset:offset + size])
    old = json.loads(manifest)["kernels"][int(index)]["name"]
    assert len(prefix) <= len(old), "prefix longer than the name"
    new = prefix + "x" * (len(old) - len(prefix))
    key = b'"name":"%s"' % old.encode()
    assert manifest.count(key) == 1, "kernel name not found once"
    data[offset:offset + size] = manifest.replace(key, b'"name":"%s"' % new.encode())
    struct.pack_into("<Q", data, 48 + 24, xxh64(bytes(data[offset:offset + size])))
    struct.pack_into("<Q", data, 32, 0)
    struct.pack_into("<Q", data, 32, xxh64(bytes(data[:160])))
    open(target, "wb").write(data)


if __name__ == "__main__":
    main()
