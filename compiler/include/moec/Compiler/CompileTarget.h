//===- CompileTarget.h - what the backend compiles for ----------*- C++ -*-===//
///
/// \file
/// The code-generation view of a target: the chip facts (moec/target,
/// shared with the dialect, the codegen and the runtime) plus the LLVM
/// triple and subtarget features. Parts of one ISA (gfx950 and mi350p)
/// share the processor name the backend is given, `chip.arch`.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_COMPILETARGET_H
#define MOEC_COMPILER_COMPILETARGET_H

#include "moec/target/target_info.h"

#include <cassert>
#include <string_view>
#include <vector>

namespace moec {

struct CompileTarget {
  const target::TargetInfo &chip;
  const char *triple;
  /// Pinned so the code object runs whatever the device's XNACK mode and
  /// reports ECC-protected LDS the same way the HIP loader expects.
  const char *features;

  /// The compile target of a chip or part moec has facts for, by the name
  /// users pass (target::lookupTargetInfo: "gfx950", "mi350p"), or nullptr.
  static const CompileTarget *lookup(std::string_view name) {
    const target::TargetInfo *chip = target::lookupTargetInfo(name);
    return chip ? &of(*chip) : nullptr;
  }

  /// The compile target of `chip`, one of target::kKnownTargets.
  static const CompileTarget &of(const target::TargetInfo &chip) {
    static const std::vector<CompileTarget> all = [] {
      std::vector<CompileTarget> targets;
      for (const target::TargetInfo *known : target::kKnownTargets)
        targets.push_back(forChip(*known));
      return targets;
    }();
    for (const CompileTarget &compileTarget : all)
      if (&compileTarget.chip == &chip)
        return compileTarget;
    assert(false && "a TargetInfo that is not one of kKnownTargets");
    return all.front();
  }

private:
  /// Every chip goes through the amdhsa ABI with the same pinned features.
  static CompileTarget forChip(const target::TargetInfo &chip) {
    return {chip, "amdgcn-amd-amdhsa", "+sramecc,-xnack"};
  }
};

} // namespace moec

#endif // MOEC_COMPILER_COMPILETARGET_H
