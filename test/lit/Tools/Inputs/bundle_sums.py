"""A bundle's sections and checksums, for tests that patch bundles as an
attacker or a corrupted disk would and then need the runtime to open them
(docs/bundle-format.md: XXH64 over each section, then over the header).
Standard library only.
"""
import struct

MASK = (1 << 64) - 1
P1, P2, P3, P4, P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F,
                      0x165667B19E3779F9, 0x85EBCA77C2B2AE63,
                      0x27D4EB2F165667C5)
HEADER_BYTES = 160
SECTIONS_AT = 48  # three 32-byte entries: type, flags, offset, size, xxh64


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & MASK


def _round(acc, lane):
    return _rotl((acc + lane * P2) & MASK, 31) * P1 & MASK


def xxh64(data, seed=0):
    """XXH64 of `data` (the reference algorithm)."""
    size, pos = len(data), 0
    if size >= 32:
        acc = [(seed + P1 + P2) & MASK, (seed + P2) & MASK, seed,
               (seed - P1) & MASK]
        while pos + 32 <= size:
            lanes = struct.unpack_from("<4Q", data, pos)
            acc = [_round(a, w) for a, w in zip(acc, lanes)]
            pos += 32
        h = (_rotl(acc[0], 1) + _rotl(acc[1], 7) + _rotl(acc[2], 12) +
             _rotl(acc[3], 18)) & MASK
        for a in acc:
            h = ((h ^ _round(0, a)) * P1 + P4) & MASK
    else:
        h = (seed + P5) & MASK
    h = (h + size) & MASK
    while pos + 8 <= size:
        lane, = struct.unpack_from("<Q", data, pos)
        h = (_rotl(h ^ _round(0, lane), 27) * P1 + P4) & MASK
        pos += 8
    if pos + 4 <= size:
        word, = struct.unpack_from("<I", data, pos)
        h = (_rotl(h ^ (word * P1 & MASK), 23) * P2 + P3) & MASK
        pos += 4
    for byte in data[pos:]:
        h = _rotl(h ^ (byte * P5 & MASK), 11) * P1 & MASK
    h = (h ^ (h >> 33)) * P2 & MASK
    h = (h ^ (h >> 29)) * P3 & MASK
    return h ^ (h >> 32)


def section(data, index):
    """(offset, size) of section `index`: 0 manifest, 1 code-object table,
    2 code objects."""
    return struct.unpack_from("<QQ", data, SECTIONS_AT + 32 * index + 8)


def reseal(data):
    """Recomputes every section checksum, then the header's, in place."""
    for i in range(3):
        offset, size = section(data, i)
        struct.pack_into("<Q", data, SECTIONS_AT + 32 * i + 24,
                         xxh64(bytes(data[offset:offset + size])))
    struct.pack_into("<Q", data, 32, 0)
    struct.pack_into("<Q", data, 32, xxh64(bytes(data[:HEADER_BYTES])))
