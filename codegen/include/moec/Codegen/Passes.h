//===- Passes.h - moec codegen passes ---------------------------*- C++ -*-===//

#ifndef MOEC_CODEGEN_PASSES_H
#define MOEC_CODEGEN_PASSES_H

#include "mlir/Pass/Pass.h"

namespace mlir {
class RewritePatternSet;
} // namespace mlir

namespace moec {

#define GEN_PASS_DECL
#include "moec/Codegen/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "moec/Codegen/Passes.h.inc"

} // namespace moec

#endif // MOEC_CODEGEN_PASSES_H
