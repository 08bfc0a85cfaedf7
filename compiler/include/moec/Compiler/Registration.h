//===- Registration.h - dialects and passes moec uses -----------*- C++ -*-===//

#ifndef MOEC_COMPILER_REGISTRATION_H
#define MOEC_COMPILER_REGISTRATION_H

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace moec {

/// Registers every dialect of the pipeline (moe, the kernel IR dialects and
/// the LLVM/ROCDL targets) and their LLVM translation interfaces.
void registerMoecDialects(mlir::DialectRegistry &registry);

/// Registers moec's own passes and the upstream passes its pipeline uses, so
/// moe-opt can run each step on its own.
void registerMoecPasses();

} // namespace moec

#endif // MOEC_COMPILER_REGISTRATION_H
