#!/usr/bin/env python3
"""Rewrites one kernel's name in a bundle's manifest, as an attacker would:
the new name is PREFIX padded with 'x' to the old name's length, so the
layout stays, and every checksum the name touches (the manifest section's
XXH64 and the header's) is recomputed (docs/bundle-format.md). Standard
library only.

  rename_kernel.py IN.moeb OUT.moeb KERNEL_INDEX PREFIX
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bundle_sums import reseal, section  # noqa: E402


def main():
    source, target, index, prefix = sys.argv[1:5]
    data = bytearray(open(source, "rb").read())
    offset, size = section(data, 0)
    manifest = bytes(data[offset:offset + size])
    old = json.loads(manifest)["kernels"][int(index)]["name"]
    assert len(prefix) <= len(old), "prefix longer than the name"
    new = prefix + "x" * (len(old) - len(prefix))
    key = b'"name":"%s"' % old.encode()
    assert manifest.count(key) == 1, "kernel name not found once"
    data[offset:offset + size] = manifest.replace(key, b'"name":"%s"' % new.encode())
    reseal(data)
    open(target, "wb").write(data)


if __name__ == "__main__":
    main()
