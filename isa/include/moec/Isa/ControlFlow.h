//===- ControlFlow.h - basic blocks of a decoded kernel ----------*- C++ -*-===//
///
/// \file
/// The control-flow graph the ISA checks walk: basic blocks split at branch
/// targets and after branches, with successors (taken target, fall-through)
/// and predecessors. s_endpgm ends a path; a branch whose target is unknown
/// (s_setpc) is reported by the checks, never guessed.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_ISA_CONTROLFLOW_H
#define MOEC_ISA_CONTROLFLOW_H

#include "moec/Isa/Decoder.h"

#include <vector>

namespace moec::isacheck {

struct BasicBlock {
  /// Instructions [first, last] of DecodedKernel::instructions.
  size_t first = 0, last = 0;
  std::vector<size_t> successors, predecessors;
};

struct ControlFlowGraph {
  /// Blocks in address order; block 0 is the entry.
  std::vector<BasicBlock> blocks;
  /// The block of each instruction.
  std::vector<size_t> blockOf;
  /// Instructions whose branch target is not an instruction of the kernel.
  std::vector<size_t> unresolvedBranches;
};

ControlFlowGraph buildControlFlow(const DecodedKernel &kernel);

} // namespace moec::isacheck

#endif // MOEC_ISA_CONTROLFLOW_H
