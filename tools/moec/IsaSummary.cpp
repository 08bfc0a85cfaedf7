//===- IsaSummary.cpp - a kernel's main loop from its disassembly ---------===//

#include "IsaSummary.h"

#include "moec/Isa/Decoder.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"

using namespace llvm;

namespace moec::cli {

namespace {

/// Bytes one lane moves in a memory instruction, from its mnemonic's
/// width token ("dwordx4", "ubyte", "b128", "u16"); 0 when none is found.
/// ds_read2/ds_write2 move two elements.
unsigned memoryWidth(StringRef mnemonic) {
  SmallVector<StringRef> parts;
  mnemonic.split(parts, '_');
  unsigned factor = 1;
  if (parts.size() > 1 && parts[0] == "ds" &&
      (parts[1].starts_with("read2") || parts[1].starts_with("write2")))
    factor = 2;
  static const std::pair<const char *, unsigned> kWidths[] = {
      {"byte", 1},    {"ubyte", 1},   {"sbyte", 1},  {"b8", 1},  {"u8", 1},
      {"i8", 1},      {"short", 2},   {"ushort", 2}, {"sshort", 2},
      {"b16", 2},     {"u16", 2},     {"i16", 2},    {"dword", 4},
      {"b32", 4},     {"dwordx2", 8}, {"b64", 8},    {"dwordx3", 12},
      {"b96", 12},    {"dwordx4", 16}, {"b128", 16}};
  for (StringRef part : ArrayRef(parts).drop_front(2 <= parts.size() ? 2 : 0))
    for (const auto &[name, bytes] : kWidths)
      if (part == name)
        return factor * bytes;
  return 0;
}

/// The buffer resource operand ("s[8:11]") of a buffer instruction.
std::string bufferResource(StringRef operands) {
  SmallVector<StringRef> parts;
  operands.split(parts, ',');
  for (StringRef part : parts) {
    part = part.trim();
    if (part.starts_with("s[") || part.starts_with("ttmp["))
      return part.str();
  }
  return "?";
}

void countInstruction(const isacheck::Instruction &inst, LoopCounts &counts) {
  StringRef m = inst.mnemonic;
  ++counts.instructions;
  if (m.starts_with("v_mfma_scale_")) {
    ++counts.scaledMfma;
    if (counts.mfmaMnemonic.empty())
      counts.mfmaMnemonic = m.str();
  } else if (m.starts_with("v_mfma_") || m.starts_with("v_smfmac_")) {
    ++counts.otherMfma;
  } else if (m.starts_with("buffer_load_") || m.starts_with("global_load_") ||
             m.starts_with("flat_load_")) {
    unsigned width = memoryWidth(m);
    // gfx950 spells the LDS DMA as a buffer load with an `lds` modifier.
    if (StringRef(inst.operands).ends_with(" lds") ||
        StringRef(inst.operands).contains(" lds ")) {
      ++counts.ldsDmaLoads[width];
    } else {
      ++counts.globalLoads[width];
      ++counts.globalLoadsByResource[m.starts_with("buffer_")
                                         ? bufferResource(inst.operands)
                                         : "global"][width];
    }
  } else if (m.starts_with("buffer_store_") || m.starts_with("global_store_") ||
             m.starts_with("flat_store_")) {
    ++counts.globalStores[memoryWidth(m)];
  } else if (m.starts_with("ds_read") || m.starts_with("ds_load")) {
    ++counts.ldsReads[memoryWidth(m)];
  } else if (m.starts_with("ds_write") || m.starts_with("ds_store")) {
    ++counts.ldsWrites[memoryWidth(m)];
  } else if (m.starts_with("s_load_") || m.starts_with("s_buffer_load_")) {
    ++counts.scalarLoads;
  } else if (m.starts_with("s_waitcnt")) {
    ++counts.waits;
  } else if (m == "s_barrier") {
    ++counts.barriers;
  } else if (m.starts_with("v_")) {
    ++counts.valu;
  } else if (m.starts_with("s_")) {
    ++counts.salu;
  }
}

} // namespace

uint64_t LoopCounts::tileBytesPerWave(unsigned waveSize) const {
  uint64_t bytes = 0;
  for (const auto *byWidth : {&globalLoads, &ldsDmaLoads})
    for (const auto &[width, count] : *byWidth)
      if (width >= 16)
        bytes += uint64_t(width) * count * waveSize;
  return bytes;
}

uint64_t LoopCounts::narrowBytesPerWave(unsigned waveSize) const {
  uint64_t bytes = 0;
  for (const auto &[width, count] : globalLoads)
    if (width < 16)
      bytes += uint64_t(width) * count * waveSize;
  return bytes;
}

std::string formatWidths(const std::map<unsigned, unsigned> &byWidth) {
  std::string out;
  for (auto it = byWidth.rbegin(); it != byWidth.rend(); ++it) {
    if (!out.empty())
      out += ' ';
    out += std::to_string(it->second) + "x" +
           (it->first ? std::to_string(it->first) + "B" : std::string("?B"));
  }
  return out.empty() ? "-" : out;
}

Expected<IsaSummary> summarizeKernelIsa(ArrayRef<uint8_t> elf, StringRef symbol,
                                        StringRef mcpu) {
  Expected<isacheck::DecodedKernel> kernel = isacheck::decodeKernel(elf, symbol, mcpu);
  if (!kernel)
    return kernel.takeError();
  IsaSummary summary;
  summary.begin = kernel->begin;
  summary.end = kernel->end;
  summary.undecoded = kernel->undecoded;
  const std::vector<isacheck::Instruction> &insts = kernel->instructions;
  for (const isacheck::Instruction &inst : insts)
    if (inst.scaledMfma)
      ++summary.scaledMfma;
  summary.instructions = insts.size();

  // Loops: [target, end of the backward branch). The main loop is the one
  // with the most scaled MFMAs (then the most instructions) among those
  // with no nested loop that has scaled MFMAs too: a GEMM's K loop may
  // hold a small loop without MFMAs (a waterfall loop around a buffer load
  // whose resource is not uniform), which must not hide it. Kernels
  // without MFMAs get their largest innermost loop.
  struct Loop {
    uint64_t begin, end;
    LoopCounts counts;
  };
  std::vector<Loop> loops;
  for (const isacheck::Instruction &inst : insts)
    if (inst.kind == isacheck::InstClass::Branch && inst.hasTarget && inst.target <= inst.address &&
        inst.target >= summary.begin)
      loops.push_back({inst.target, inst.address + inst.size, {}});
  summary.loops = loops.size();
  for (Loop &loop : loops)
    for (const isacheck::Instruction &inst : insts)
      if (inst.address >= loop.begin && inst.address < loop.end)
        countInstruction(inst, loop.counts);
  for (size_t i = 0; i < loops.size(); ++i) {
    LoopCounts &counts = loops[i].counts;
    bool candidate = true;
    for (size_t j = 0; j < loops.size() && candidate; ++j) {
      const bool nested = j != i && loops[j].begin >= loops[i].begin &&
                          loops[j].end <= loops[i].end;
      candidate = !nested || (counts.scaledMfma && !loops[j].counts.scaledMfma);
    }
    if (!candidate)
      continue;
    if (counts.scaledMfma && counts.barriers >= 2 && counts.barriers % 2 == 0)
      counts.kSteps = counts.barriers / 2;
    if (!summary.hasLoop ||
        std::make_pair(counts.scaledMfma, counts.instructions) >
            std::make_pair(summary.loop.scaledMfma, summary.loop.instructions)) {
      summary.hasLoop = true;
      summary.loopBegin = loops[i].begin;
      summary.loopEnd = loops[i].end;
      summary.loop = counts;
    }
  }
  return summary;
}

} // namespace moec::cli
