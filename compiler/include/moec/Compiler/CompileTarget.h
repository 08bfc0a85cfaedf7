//===- CompileTarget.h - what the backend compiles for ----------*- C++ -*-===//
///
/// \file
/// The code-generation view of a target: the chip facts (moec/target,
/// shared with the dialect, the codegen and the runtime) plus the LLVM
/// triple and subtarget features.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_COMPILETARGET_H
#define MOEC_COMPILER_COMPILETARGET_H

#include "moec/target/target_info.h"

#include <string_view>
#include <vector>

namespace moec {

struct CompileTarget {
  const target::TargetInfo &chip;
  const char *triple;
  /// Pinned so the code object runs whatever the device's XNACK mode and
  /// reports ECC-protected LDS the same way the HIP loader expects.
  const char *features;

  /// The compile target of a chip moec has facts for (moec/target), or
  /// nullptr.
  static const CompileTarget *lookup(std::string_view arch) {
    static const std::vector<CompileTarget> all = [] {
      std::vector<CompileTarget> targets;
      for (const target::TargetInfo *chip : target::kKnownTargets)
        targets.push_back(forChip(*chip));
      return targets;
    }();
    const target::TargetInfo *chip = target::lookupTargetInfo(arch);
    for (const CompileTarget &compileTarget : all)
      if (&compileTarget.chip == chip)
        return &compileTarget;
    return nullptr;
  }

  /// gfx950 (MI355X / MI350X), the default chip.
  static const CompileTarget &gfx950() { return *lookup(target::kGfx950.arch); }

private:
  /// Every chip goes through the amdhsa ABI with the same pinned features.
  static CompileTarget forChip(const target::TargetInfo &chip) {
    return {chip, "amdgcn-amd-amdhsa", "+sramecc,-xnack"};
  }
};

} // namespace moec

#endif // MOEC_COMPILER_COMPILETARGET_H
