#!/usr/bin/env python3
"""Plants one defect in a gfx950 kernel, for isa-planted.test: the ISA
verifier (`moec verify --isa`) must find each with its own rule.

  plant.py MODE IN OUT [--kernel SUBSTRING] [--arg INDEX]

IN is a code object (.hsaco) or a bundle (.moeb); a bundle's code object is
patched in place (same size) and every checksum over it is recomputed
(docs/bundle-format.md), so the runtime opens it. Prints one line saying
what changed and where ("0x1c7c: s_nop 3 -> s_nop 2").

Modes (the first match in the kernel's code, in address order):
  nop-after-mfma   the first s_nop N >= 1 after the last MFMA: N - 1
  nop-before-mfma  the first s_nop N >= 1 right before an MFMA: N - 1
  vmcnt-weaken     the first s_waitcnt with vmcnt in 1..62: vmcnt + 1
  lgkmcnt-weaken   the first s_waitcnt with lgkmcnt in 1..14: lgkmcnt + 1
  vmcnt-remove     the first s_waitcnt with vmcnt(0): s_nop 0 instead
  lgkmcnt-remove   the first s_waitcnt with lgkmcnt(0): s_nop 0 instead
  lds-dma          the s_waitcnts between the first LDS DMA and the next
                   s_barrier wait only for what was issued before the DMA
  kernarg          explicit argument --arg (default 1): .offset + 4 in the
                   NT_AMDGPU_METADATA msgpack
  vgpr-granule     kernel descriptor compute_pgm_rsrc1[5:0] lowered to the
                   largest granule that no longer holds the highest VGPR
                   the code names

Instruction boundaries come from llvm-objdump ($LLVM_OBJDUMP, else the one
on PATH, as lit sets it: LLVM 22, which knows gfx950); the ELF (section
headers, .symtab, notes, msgpack) is parsed here. Standard library only.
"""
import argparse
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

S_NOP = 0xBF800000
S_WAITCNT = 0xBF8C0000


def fail(message):
    sys.exit("plant.py: " + message)


# --- ELF64 -----------------------------------------------------------------

class Elf:
    def __init__(self, data):
        if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            fail("not a little-endian ELF64 file")
        self.data = data
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        self.sections = []
        for i in range(shnum):
            (name, kind, _flags, addr, offset, size, link, _info, align,
             _entsize) = struct.unpack_from("<IIQQQQIIQQ", data,
                                            shoff + i * shentsize)
            self.sections.append(dict(name=name, type=kind, addr=addr,
                                      offset=offset, size=size, link=link,
                                      align=align))
        names = self.sections[shstrndx]
        for s in self.sections:
            s["name"] = self.cstring(names["offset"] + s["name"])

    def cstring(self, at):
        return self.data[at:self.data.index(b"\0", at)].decode()

    def symbols(self):
        for s in self.sections:
            if s["type"] != 2:  # SHT_SYMTAB
                continue
            strtab = self.sections[s["link"]]["offset"]
            for at in range(s["offset"], s["offset"] + s["size"], 24):
                name, info, _other, shndx, value, size = struct.unpack_from(
                    "<IBBHQQ", self.data, at)
                yield self.cstring(strtab + name), info & 0xF, shndx, value, size

    def symbol(self, wanted):
        for name, kind, shndx, value, size in self.symbols():
            if name == wanted:
                section = self.sections[shndx]
                return section["offset"] + value - section["addr"], value, size
        fail("no symbol " + wanted)

    def kernels(self):
        return [n[:-3] for n, *_ in self.symbols() if n.endswith(".kd")]

    def metadata(self):
        """File offset and bytes of the NT_AMDGPU_METADATA descriptor."""
        for s in self.sections:
            if s["type"] != 7:  # SHT_NOTE
                continue
            at, end = s["offset"], s["offset"] + s["size"]
            while at + 12 <= end:
                namesz, descsz, kind = struct.unpack_from("<III", self.data, at)
                name = self.data[at + 12:at + 12 + namesz].rstrip(b"\0")
                desc = at + 12 + (namesz + 3) // 4 * 4
                if name == b"AMDGPU" and kind == 32:
                    return desc, self.data[desc:desc + descsz]
                at = desc + (descsz + 3) // 4 * 4
        fail("no NT_AMDGPU_METADATA note")


# --- msgpack (the subset code object metadata uses) ------------------------

class Int:
    """An integer with where its encoding lies, so it can be rewritten."""

    def __init__(self, value, start, end):
        self.value, self.start, self.end = value, start, end


def unpack(buf, at):
    b = buf[at]
    if b <= 0x7F:
        return Int(b, at, at + 1), at + 1
    if b >= 0xE0:
        return Int(b - 0x100, at, at + 1), at + 1
    if 0x80 <= b <= 0x8F:
        return unpack_map(buf, at + 1, b & 0xF)
    if 0x90 <= b <= 0x9F:
        return unpack_array(buf, at + 1, b & 0xF)
    if 0xA0 <= b <= 0xBF:
        n = b & 0x1F
        return buf[at + 1:at + 1 + n].decode(), at + 1 + n
    if b in (0xC0, 0xC2, 0xC3):
        return {0xC0: None, 0xC2: False, 0xC3: True}[b], at + 1
    widths = {0xCC: "<B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q",
              0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q"}
    if b in widths:
        size = struct.calcsize(widths[b])
        value, = struct.unpack_from(widths[b], buf, at + 1)
        return Int(value, at, at + 1 + size), at + 1 + size
    if b in (0xCA, 0xCB):
        size = 4 if b == 0xCA else 8
        return struct.unpack_from(">f" if size == 4 else ">d", buf, at + 1)[0], at + 1 + size
    if b in (0xD9, 0xDA, 0xDB, 0xC4, 0xC5, 0xC6):
        fmt = {0xD9: ">B", 0xDA: ">H", 0xDB: ">I",
               0xC4: ">B", 0xC5: ">H", 0xC6: ">I"}[b]
        size = struct.calcsize(fmt)
        n, = struct.unpack_from(fmt, buf, at + 1)
        raw = buf[at + 1 + size:at + 1 + size + n]
        return (raw.decode() if b >= 0xD9 else raw), at + 1 + size + n
    if b in (0xDC, 0xDD):
        fmt = ">H" if b == 0xDC else ">I"
        n, = struct.unpack_from(fmt, buf, at + 1)
        return unpack_array(buf, at + 1 + struct.calcsize(fmt), n)
    if b in (0xDE, 0xDF):
        fmt = ">H" if b == 0xDE else ">I"
        n, = struct.unpack_from(fmt, buf, at + 1)
        return unpack_map(buf, at + 1 + struct.calcsize(fmt), n)
    fail("msgpack byte 0x%02x at %d is not handled" % (b, at))


def unpack_array(buf, at, n):
    out = []
    for _ in range(n):
        value, at = unpack(buf, at)
        out.append(value)
    return out, at


def unpack_map(buf, at, n):
    out = {}
    for _ in range(n):
        key, at = unpack(buf, at)
        value, at = unpack(buf, at)
        out[key] = value
    return out, at


def repack_int(node, value):
    """The bytes of `value` in the encoding `node` had (same length)."""
    width = node.end - node.start
    if width == 1 and 0 <= value <= 0x7F:
        return bytes([value])
    fmt = {2: ">B", 3: ">H", 5: ">I", 9: ">Q"}.get(width)
    if fmt is None or not 0 <= value < 1 << (8 * (width - 1)):
        fail("%d does not fit the %d-byte encoding" % (value, width))
    return bytes([{2: 0xCC, 3: 0xCD, 5: 0xCE, 9: 0xCF}[width]]) + struct.pack(fmt, value)


# --- the bundle's checksums (bundle_sums.py) -----------------------------

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from bundle_sums import reseal, section, xxh64  # noqa: E402


# --- the kernel's instructions ---------------------------------------------

LINE = re.compile(r"^\s+(\S+)(.*?)\s*//\s*([0-9A-Fa-f]+):\s*((?:[0-9A-Fa-f]{8}\s*)+)")


def disassemble(elf_bytes, begin, end):
    with tempfile.NamedTemporaryFile(suffix=".hsaco", delete=False) as f:
        f.write(elf_bytes)
        path = f.name
    try:
        text = subprocess.run([os.environ.get("LLVM_OBJDUMP", "llvm-objdump"), "-d", "--mcpu=gfx950", path],
                              check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(path)
    out = []
    for line in text.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        address = int(m.group(3), 16)
        if begin <= address < end:
            out.append(dict(address=address, mnemonic=m.group(1),
                            operands=m.group(2).strip(),
                            word=int(m.group(4).split()[0], 16)))
    if not out:
        fail("no instructions in [0x%x, 0x%x)" % (begin, end))
    return out


def vmcnt(word):
    return (word & 0xF) | ((word >> 14) & 0x3) << 4


def with_vmcnt(word, n):
    return (word & ~0xC00F) | (n & 0xF) | ((n >> 4) & 0x3) << 14


def lgkmcnt(word):
    return (word >> 8) & 0xF


def with_lgkmcnt(word, n):
    return (word & ~0xF00) | (n & 0xF) << 8


def is_waitcnt(inst):
    return inst["mnemonic"] == "s_waitcnt" and inst["word"] >> 16 == 0xBF8C


def is_lds_dma(inst):
    return (inst["mnemonic"].startswith(("buffer_load", "global_load")) and
            re.search(r"\blds\b", inst["operands"]) is not None)


def plant_code(elf, kernel, mode):
    """Patches elf.data (a bytearray); returns the description."""
    code_at, begin, size = elf.symbol(kernel)
    insts = disassemble(bytes(elf.data), begin, begin + size)

    def word_at(inst):
        return code_at + inst["address"] - begin

    def put(inst, word):
        at = word_at(inst)
        old, = struct.unpack_from("<I", elf.data, at)
        if old != inst["word"]:
            fail("0x%x: the ELF holds %08x, the listing %08x" %
                 (inst["address"], old, inst["word"]))
        struct.pack_into("<I", elf.data, at, word)

    def nop(inst, n):
        put(inst, S_NOP | n)
        return "0x%x: s_nop %d -> s_nop %d" % (inst["address"],
                                              inst["word"] & 0xFFFF, n)

    if mode in ("nop-after-mfma", "nop-before-mfma"):
        mfmas = [i for i, x in enumerate(insts) if x["mnemonic"].startswith("v_mfma")]
        if not mfmas:
            fail("no MFMA")
        for i, x in enumerate(insts):
            if x["mnemonic"] != "s_nop" or x["word"] & 0xFFFF == 0:
                continue
            if mode == "nop-after-mfma" and i > mfmas[-1]:
                return nop(x, (x["word"] & 0xFFFF) - 1)
            if (mode == "nop-before-mfma" and i + 1 < len(insts) and
                    insts[i + 1]["mnemonic"].startswith("v_mfma")):
                return nop(x, (x["word"] & 0xFFFF) - 1)
        fail("no s_nop for " + mode)
    if mode in ("vmcnt-weaken", "lgkmcnt-weaken", "vmcnt-remove", "lgkmcnt-remove"):
        get, put_field, top = ((vmcnt, with_vmcnt, 63) if mode.startswith("vm")
                               else (lgkmcnt, with_lgkmcnt, 15))
        for x in insts:
            if not is_waitcnt(x):
                continue
            n = get(x["word"])
            if mode.endswith("remove") and n == 0:
                put(x, S_NOP)
                return "0x%x: %s -> s_nop 0" % (x["address"], x["operands"])
            if mode.endswith("weaken") and 0 < n < top - 1:
                put(x, put_field(x["word"], n + 1))
                counter = "vmcnt" if mode.startswith("vm") else "lgkmcnt"
                return "0x%x: %s(%d) -> %s(%d)" % (x["address"], counter, n,
                                                  counter, n + 1)
        fail("no s_waitcnt for " + mode)
    if mode == "lds-dma":
        first = next((i for i, x in enumerate(insts) if is_lds_dma(x)), None)
        if first is None:
            fail("no LDS DMA")
        issued, changed = 0, []
        for x in insts[first:]:
            if x["mnemonic"] == "s_barrier":
                break
            if x["mnemonic"].startswith(("buffer_", "global_")):
                issued += 1
            elif is_waitcnt(x) and vmcnt(x["word"]) < issued:
                put(x, with_vmcnt(x["word"], issued))
                changed.append("0x%x: vmcnt(%d) -> vmcnt(%d)" %
                               (x["address"], vmcnt(x["word"]), issued))
        if not changed:
            fail("no s_waitcnt retires the LDS DMA before the barrier")
        return "LDS DMA at 0x%x; %s" % (insts[first]["address"], "; ".join(changed))
    fail("unknown mode " + mode)


def plant_kernarg(elf, kernel, index):
    at, blob = elf.metadata()
    root, _ = unpack(blob, 0)
    for k in root["amdhsa.kernels"]:
        if k.get(".symbol") in (kernel + ".kd", kernel):
            explicit = [a for a in k[".args"]
                        if not a[".value_kind"].startswith("hidden_")]
            node = explicit[index][".offset"]
            new = repack_int(node, node.value + 4)
            elf.data[at + node.start:at + node.end] = new
            return "argument %d '%s': .offset %d -> %d" % (
                index, explicit[index].get(".name", ""), node.value, node.value + 4)
    fail("no metadata for " + kernel)


def plant_granule(elf, kernel):
    at, _, size = elf.symbol(kernel + ".kd")
    if size != 64:
        fail("the kernel descriptor has %d bytes" % size)
    _, begin, code_size = elf.symbol(kernel)
    highest = -1
    for x in disassemble(bytes(elf.data), begin, begin + code_size):
        for m in re.finditer(r"\bv(?:\[\d+:(\d+)\]|(\d+))", x["operands"]):
            highest = max(highest, int(m.group(1) or m.group(2)))
    rsrc1, = struct.unpack_from("<I", elf.data, at + 48)
    granule, lowered = rsrc1 & 0x3F, highest // 8 - 1
    if lowered < 0 or lowered >= granule:
        fail("v%d and granule %d: nothing to lower" % (highest, granule))
    struct.pack_into("<I", elf.data, at + 48, (rsrc1 & ~0x3F) | lowered)
    return "compute_pgm_rsrc1 VGPR granule %d -> %d (%d -> %d VGPRs; the code names v%d)" % (
        granule, lowered, (granule + 1) * 8, (lowered + 1) * 8, highest)


def plant(elf_bytes, kernel, args):
    elf = Elf(bytearray(elf_bytes))
    if kernel is None:
        names = elf.kernels()
        if len(names) != 1:
            fail("%d kernels: name one with --kernel" % len(names))
        kernel = names[0]
    if args.mode == "kernarg":
        what = plant_kernarg(elf, kernel, args.arg)
    elif args.mode == "vgpr-granule":
        what = plant_granule(elf, kernel)
    else:
        what = plant_code(elf, kernel, args.mode)
    return bytes(elf.data), what


# --- bundles ---------------------------------------------------------------

def plant_bundle(data, args):
    data = bytearray(data)
    if data[:8] != b"MOECBNDL":
        fail("not a bundle")
    start, length = section(data, 0)
    manifest = json.loads(bytes(data[start:start + length]))
    kernels = [k for k in manifest["kernels"]
               if args.kernel is None or args.kernel in k["name"]]
    if len(kernels) != 1:
        fail("%d kernels match: name one with --kernel" % len(kernels))
    table = section(data, 1)[0]
    entry = table + 16 + 32 * kernels[0]["code_object"]
    offset, size = struct.unpack_from("<QQ", data, entry)
    symbol = kernels[0]["symbol"]
    patched, what = plant(bytes(data[offset:offset + size]),
                          symbol[:-3] if symbol.endswith(".kd") else symbol, args)
    data[offset:offset + size] = patched
    # The object's entry, then the sections and the header.
    struct.pack_into("<Q", data, entry + 16, xxh64(patched))
    reseal(data)
    return bytes(data), kernels[0]["name"] + ": " + what


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode")
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("--kernel", help="kernel (bundle: a substring of its name)")
    parser.add_argument("--arg", type=int, default=1, help="kernarg: explicit argument")
    args = parser.parse_args()
    data = open(args.input, "rb").read()
    if data[:8] == b"MOECBNDL":
        out, what = plant_bundle(data, args)
    else:
        out, what = plant(data, args.kernel, args)
    open(args.output, "wb").write(out)
    print(what)


if __name__ == "__main__":
    main()
