#!/usr/bin/env python3
"""Replaces one piece of a bundle's manifest text with another of the same
length (so the layout stays) and reseals the checksums, so that the bundle
opens as far as its checksums go and what the runtime then makes of the
changed manifest is what a test sees.

  patch_manifest.py IN.moeb OUT.moeb OLD NEW

OLD must occur exactly once in the manifest.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bundle_sums import reseal, section  # noqa: E402


def main():
    source, target, old, new = sys.argv[1:5]
    old, new = old.encode(), new.encode()
    if len(old) != len(new):
        sys.exit("patch_manifest.py: OLD and NEW differ in length")
    data = bytearray(open(source, "rb").read())
    offset, size = section(data, 0)
    manifest = bytes(data[offset:offset + size])
    if manifest.count(old) != 1:
        sys.exit("patch_manifest.py: %r occurs %d times" % (old, manifest.count(old)))
    data[offset:offset + size] = manifest.replace(old, new)
    reseal(data)
    open(target, "wb").write(data)


if __name__ == "__main__":
    main()
