//===- KnobSpelling.h - knob spellings moe no longer reads ------*- C++ -*-===//
///
/// \file
/// Old spellings of knob values, named with the spelling to write instead.
/// Plain C++ over the dialect's generated knob table (MoeKnobs.h), so the
/// table reader, which checks knob names before any MLIR is built, and its
/// fuzz target (fuzz/table_fuzzer.cpp) link without MLIR.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_KNOBSPELLING_H
#define MOEC_COMPILER_KNOBSPELLING_H

#include "moec/abi/stage.h"

#include <string>

namespace moec {

/// The message for a knob value written in a spelling moe no longer reads
/// (`mfma=16x16x128`, `b_prefetch=1`), naming the spelling to write instead;
/// empty when the value is not an old spelling.
std::string oldKnobSpelling(abi::Stage stage, const std::string &knob,
                            const std::string &value);

} // namespace moec

#endif // MOEC_COMPILER_KNOBSPELLING_H
