//===- Repair.h - wait states added where a hazard rule fired ----*- C++ -*-===//
///
/// \file
/// The ISA gate's repair of hazards in moec's own output: the kernel's
/// assembly, as LLVM printed it for the code object, gets `s_nop`s before
/// each instruction that lacks wait states, and is assembled again through
/// MC in process. The repaired code must be the original but for the
/// `s_nop`s (checkOnlyNopsAdded), and the gate verifies it again.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_ISA_REPAIR_H
#define MOEC_ISA_REPAIR_H

#include "moec/Isa/Decoder.h"
#include "moec/Isa/Finding.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moec::isacheck {

/// The repairs that cover `findings`: per instruction, the largest shortfall
/// of its hazard findings. Fails, naming the first, where a finding is not a
/// hazard (a missing wait, the ABI, resources): no `s_nop` fixes those.
llvm::Expected<std::vector<NopRepair>> planNopRepairs(const Findings &findings);

/// `asmText` (LLVM's assembly for the code object `kernel` was decoded
/// from) with the `s_nop`s of `repairs` before their instructions. The
/// text's instructions are matched in order with the decoded ones by
/// mnemonic; decoded `s_nop`s the text lacks are code-alignment padding.
llvm::Expected<std::string> insertNops(llvm::StringRef asmText,
                                       const DecodedKernel &kernel,
                                       llvm::ArrayRef<NopRepair> repairs);

/// Assembles AMDGPU assembly into a relocatable ELF object for `mcpu` with
/// the subtarget `features` the code was compiled with ("+xnack,...").
llvm::Expected<std::vector<uint8_t>> assembleObject(llvm::StringRef asmText,
                                                    llvm::StringRef mcpu,
                                                    llvm::StringRef features);

/// Succeeds when `repaired` holds `original`'s instructions in order, equal
/// as printed (a branch's target offset aside), with only `s_nop`s added.
llvm::Error checkOnlyNopsAdded(const DecodedKernel &original,
                               const DecodedKernel &repaired);

/// A kernel's code object after its hazards were repaired, and what was
/// inserted, at the addresses of the unrepaired code.
struct HazardRepair {
  std::vector<uint8_t> object;
  std::vector<NopRepair> repairs;
};

/// Builds a code object from assembly text (assembles it; the compiler
/// also links it).
using BuildObject =
    llvm::function_ref<llvm::Expected<std::vector<uint8_t>>(llvm::StringRef)>;
/// Runs the ISA checks on one kernel of a code object.
using CheckObject =
    llvm::function_ref<llvm::Expected<Findings>(llvm::ArrayRef<uint8_t>)>;

/// Repairs kernel `symbol` of `object`, whose code `asmText` assembles to
/// and whose checks gave `findings` (not empty): the s_nops planned for
/// them go into the text, `build` makes an object of it, the kernel must be
/// the original but for s_nops, and `check` runs again; up to three rounds
/// (a second covers a loop's alignment padding moving). Fails where a
/// finding is not a hazard, or where findings remain; the message starts
/// with the number of findings and the first of them.
llvm::Expected<HazardRepair> repairHazards(llvm::ArrayRef<uint8_t> object,
                                           llvm::StringRef symbol,
                                           llvm::StringRef mcpu,
                                           llvm::StringRef asmText,
                                           Findings findings, BuildObject build,
                                           CheckObject check);

} // namespace moec::isacheck

#endif // MOEC_ISA_REPAIR_H
