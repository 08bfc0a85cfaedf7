//===- Verify.h - the ISA verifier of one code object ------------*- C++ -*-===//
///
/// \file
/// `moec verify --isa` and the compiler's ISA gate: decodes a kernel of a
/// code object and runs every check on it (waits, hazards, resources, and
/// the kernel ABI against what the runtime writes). docs/isa-verification.md
/// lists the rules, their sources and what is not checked.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_ISA_VERIFY_H
#define MOEC_ISA_VERIFY_H

#include "moec/Isa/Finding.h"
#include "moec/Isa/KernelMetadata.h"
#include "moec/abi/kernel_args.h"
#include "moec/target/target_info.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace moec::isacheck {

/// What the runtime does with a kernel: the arguments it packs (kinds in
/// order, abi::kernargOffset's layout) and the workgroup size it launches.
struct KernelExpectation {
  std::vector<abi::ArgKind> args;
  unsigned workgroupSize = 0;
};

/// The kernel-ABI check: the code object's `.args` are the runtime's
/// arguments at the runtime's offsets, followed only by hidden arguments;
/// the kernarg segment holds them; the launch fits
/// `.max_flat_workgroup_size`; the wave size is the chip's.
Findings checkKernelAbi(const KernelAbiMetadata &metadata,
                        const KernelExpectation &expected,
                        const target::TargetInfo &chip);

/// What verifying one kernel found, with the size of what was checked.
struct KernelVerification {
  Findings findings;
  size_t instructions = 0;
  size_t blocks = 0;
  /// False where the chip has no hazard table.
  bool hazardsChecked = false;
};

/// Every check on kernel `symbol` of `elf`; with `expected`, the kernel ABI
/// too. Fails only when the code object cannot be read.
llvm::Expected<KernelVerification>
verifyKernel(llvm::ArrayRef<uint8_t> elf, llvm::StringRef symbol,
             const target::TargetInfo &chip,
             const std::optional<KernelExpectation> &expected);

/// "kernel: 0x1a4: rule: message" lines, one per finding.
std::string formatFindings(llvm::StringRef kernel, const Findings &findings);

} // namespace moec::isacheck

#endif // MOEC_ISA_VERIFY_H
