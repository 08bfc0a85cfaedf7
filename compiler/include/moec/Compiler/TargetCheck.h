//===- TargetCheck.h - a tuning table against another chip ------*- C++ -*-===//
///
/// \file
/// Whether the kernels of a tuning table can be built for a chip: every
/// feature a kernel needs that the chip lacks and every chip limit it
/// exceeds, one line each (moe::verifyOnTarget, the moe-verify-target pass).
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_TARGETCHECK_H
#define MOEC_COMPILER_TARGETCHECK_H

#include "moec/Compiler/TableCompiler.h"
#include "moec/target/target_info.h"

#include <string>
#include <vector>

namespace moec {

/// Reads the tuning table at `tablePath`, builds the op of every kernel (as
/// the table compiler does, verified for the default chip the tables are
/// written for) and checks each against `chip`. Each problem is one line in
/// `problems`, in table order: "TABLE:LINE: kernel 'NAME': WHAT". Returns
/// BadInput with a one-line `error` when the table cannot be read or a
/// kernel cannot be built at all; Ok otherwise (with `problems` empty when
/// every kernel fits `chip`).
CompileStatus checkTableTarget(const std::string &tablePath,
                               const target::TargetInfo &chip,
                               std::vector<std::string> &problems,
                               std::string &error);

} // namespace moec

#endif // MOEC_COMPILER_TARGETCHECK_H
