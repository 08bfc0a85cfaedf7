//===- IsaSummary.h - a kernel's main loop from its disassembly -*- C++ -*-===//
///
/// \file
/// `moec inspect --isa`: disassembles a kernel of an AMDGPU code object with
/// LLVM's MC disassembler and counts what one iteration of its main loop
/// (closed by a backward branch: the loop with the most scaled MFMAs that
/// has no nested loop with MFMAs, else the largest innermost loop) issues:
/// MFMAs, global and LDS memory operations by width, waits and barriers.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_TOOLS_MOEC_ISASUMMARY_H
#define MOEC_TOOLS_MOEC_ISASUMMARY_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <string>

namespace moec::cli {

/// Counts of one loop body: one execution of each instruction per wave.
struct LoopCounts {
  unsigned instructions = 0;
  unsigned scaledMfma = 0;
  unsigned otherMfma = 0;
  /// Mnemonic of the scaled MFMA (the first met), empty without one.
  std::string mfmaMnemonic;
  /// Per-lane global loads (buffer_/global_/flat_load, not LDS DMA) by
  /// width in bytes, and, per width, by buffer resource ("s[8:11]").
  std::map<unsigned, unsigned> globalLoads;
  std::map<std::string, std::map<unsigned, unsigned>> globalLoadsByResource;
  /// Global loads that write LDS (buffer_load_* ... lds), by width.
  std::map<unsigned, unsigned> ldsDmaLoads;
  std::map<unsigned, unsigned> ldsReads, ldsWrites, globalStores;
  unsigned scalarLoads = 0;
  unsigned waits = 0;
  unsigned barriers = 0;
  unsigned valu = 0, salu = 0;
  /// K steps in one loop body: moec's K loop has two barriers per K step,
  /// so a body LLVM unrolled shows 2 x steps of them; 1 for other loops.
  unsigned kSteps = 1;

  /// Bytes a wave (64 lanes) loads from global memory per iteration in
  /// 16-byte loads (tiles; LDS DMA included) and in narrower loads.
  uint64_t tileBytesPerWave(unsigned waveSize) const;
  uint64_t narrowBytesPerWave(unsigned waveSize) const;
};

/// The summary of one kernel.
struct IsaSummary {
  /// Address range of the kernel's code and its instruction count.
  uint64_t begin = 0, end = 0;
  unsigned instructions = 0;
  /// Instructions the disassembler could not decode (should be 0).
  unsigned undecoded = 0;
  /// Scaled MFMAs of the whole kernel.
  unsigned scaledMfma = 0;
  /// Backward branches (loops) found.
  unsigned loops = 0;
  /// The main loop: [loopBegin, loopEnd) including its backward branch.
  bool hasLoop = false;
  uint64_t loopBegin = 0, loopEnd = 0;
  LoopCounts loop;
};

/// Summarises kernel `symbol` (its STT_FUNC symbol or its descriptor,
/// "symbol.kd") of the ELF code object
/// `elf` for `mcpu` (e.g. "gfx950").
llvm::Expected<IsaSummary> summarizeKernelIsa(llvm::ArrayRef<uint8_t> elf,
                                              llvm::StringRef symbol,
                                              llvm::StringRef mcpu);

/// "4x16B 20x1B": counts by width, widest first; "-" when empty.
std::string formatWidths(const std::map<unsigned, unsigned> &byWidth);

} // namespace moec::cli

#endif // MOEC_TOOLS_MOEC_ISASUMMARY_H
