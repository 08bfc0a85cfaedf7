//===- AiterCommands.h - moec compile/select on AITER CSVs ------*- C++ -*-===//
///
/// \file
/// The AITER paths of `moec compile` (tuned fused-MoE CSVs in, a bundle
/// out) and `moec select --where COLUMN=VALUE ...` (AITER's lookup with the
/// key spelled out); docs/aiter-tables.md.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_TOOLS_MOEC_AITERCOMMANDS_H
#define MOEC_TOOLS_MOEC_AITERCOMMANDS_H

#include "moec/Compiler/AiterCsv.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moec::cli {

/// Compiles the CSVs into `output`; prints the merge report and every
/// unsupported row. Returns the exit status.
int runAiterCompile(const std::vector<std::string> &paths,
                    const std::string &output, const CompileOptions &options,
                    const AiterCompileOptions &aiterOptions, bool quiet);

/// AITER's lookup for M tokens and the key given as COLUMN=VALUE pairs.
/// 0: a row serves it; 1: a miss, a skipped row or another activation's
/// row; 2: bad input.
int runAiterSelect(const std::string &bundlePath, uint64_t m,
                   const std::vector<std::string> &where, bool json);

} // namespace moec::cli

#endif // MOEC_TOOLS_MOEC_AITERCOMMANDS_H
