//===- Finding.h - one problem an ISA check found ----------------*- C++ -*-===//

#ifndef MOEC_ISA_FINDING_H
#define MOEC_ISA_FINDING_H

#include <cstdint>
#include <string>
#include <vector>

namespace moec::isacheck {

/// The address of a finding about the whole kernel (its descriptor, say)
/// rather than one instruction. Not 0: a relocatable object's first
/// kernel starts at address 0.
inline constexpr uint64_t kWholeKernel = ~uint64_t(0);

/// One problem in one kernel: the rule that fired (its id, as
/// docs/isa-verification.md lists it), the instruction it fired at
/// (kWholeKernel for a whole-kernel fact) and a one-line message.
struct Finding {
  std::string rule;
  uint64_t address = kWholeKernel;
  std::string message;
  /// Hazards: the wait states missing before the instruction at `address`
  /// (what an s_nop there must add); 0 for other checks.
  unsigned missingWaitStates = 0;

  bool atInstruction() const { return address != kWholeKernel; }
};

using Findings = std::vector<Finding>;

/// Wait states inserted (as `s_nop`s) before the instruction at `address`
/// of the unrepaired code, because hazard rule `rule` fired there.
struct NopRepair {
  uint64_t address = 0;
  unsigned waitStates = 0;
  std::string rule;
};

} // namespace moec::isacheck

#endif // MOEC_ISA_FINDING_H
