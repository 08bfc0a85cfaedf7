//===- CompileTarget.h - what the backend compiles for ----------*- C++ -*-===//
///
/// \file
/// The code-generation view of a target: the chip facts (shared with the
/// runtime, moec/target_info.h) plus the LLVM triple and subtarget features.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_COMPILETARGET_H
#define MOEC_COMPILER_COMPILETARGET_H

#include "moec/target_info.h"

namespace moec {

struct CompileTarget {
  const rt::TargetInfo &chip;
  const char *triple;
  /// Pinned so the code object runs whatever the device's XNACK mode and
  /// reports ECC-protected LDS the same way the HIP loader expects.
  const char *features;

  /// gfx950 (MI355X / MI350X) through the amdhsa ABI.
  static const CompileTarget &gfx950() {
    static const CompileTarget target{rt::gfx950TargetInfo(),
                                      "amdgcn-amd-amdhsa", "+sramecc,-xnack"};
    return target;
  }
};

} // namespace moec

#endif // MOEC_COMPILER_COMPILETARGET_H
