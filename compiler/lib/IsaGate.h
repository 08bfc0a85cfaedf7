//===- IsaGate.h - the compiler's ISA gate, with hazard repair ---*- C++ -*-===//
///
/// \file
/// Every kernel moec compiles goes through the gfx950 ISA checks
/// (moec/Isa/Verify.h) before it enters a bundle. Where only hazard rules
/// fire, the gate repairs them: s_nops inserted into LLVM's assembly of the
/// kernel, assembled again through MC and linked, checked to be the
/// original code but for the s_nops, and verified again.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_ISAGATE_H
#define MOEC_COMPILER_ISAGATE_H

#include "moec/Isa/Verify.h"
#include "moec/manifest.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <vector>

namespace moec {

struct CompileTarget;

/// Runs the ISA gate on `hsaco`, the code object of kernel `symbol` of
/// `kernelIR`. On success `hsaco` passes every check, replaced by its
/// repaired form where hazards fired, and `repairs` lists what the repair
/// inserted (addresses of the unrepaired code). Fails with the first
/// finding that no s_nop fixes, or when the repair does not pass.
llvm::Error applyIsaGate(mlir::ModuleOp kernelIR, llvm::StringRef symbol,
                         const CompileTarget &target,
                         const isacheck::KernelExpectation &expected,
                         std::vector<uint8_t> &hsaco,
                         std::vector<rt::IsaRepairInfo> &repairs);

} // namespace moec

#endif // MOEC_COMPILER_ISAGATE_H
