//===- VerifyTarget.cpp - moe stage ops against a chip's facts ------------===//
///
/// \file
/// The moe-verify-target pass: every problem of every stage op on one chip,
/// each as its own error (moe::verifyOnTarget), where the verifiers stop at
/// the first.
///
//===----------------------------------------------------------------------===//

#include "moec/Codegen/Passes.h"
#include "moec/Dialect/Moe/MoeDialect.h"
#include "moec/Dialect/Moe/MoeTarget.h"

#include "mlir/IR/BuiltinOps.h"

namespace moec {
#define GEN_PASS_DEF_MOEVERIFYTARGET
#include "moec/Codegen/Passes.h.inc"
} // namespace moec

using namespace mlir;

namespace moec {
namespace {

struct MoeVerifyTargetPass final
    : impl::MoeVerifyTargetBase<MoeVerifyTargetPass> {
  using MoeVerifyTargetBase::MoeVerifyTargetBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    const target::TargetInfo *forced = nullptr;
    if (!chip.empty()) {
      forced = target::lookupTargetInfo(chip);
      if (!forced) {
        module.emitError() << "moe-verify-target: chip '" << chip
                           << "' is not a chip moec knows ("
                           << target::knownTargetNames() << ")";
        return signalPassFailure();
      }
    }
    bool failedAny = false;
    module.walk([&](moe::StageOpInterface op) {
      const target::TargetInfo *onChip = forced;
      if (!onChip) {
        FailureOr<const target::TargetInfo *> own = moe::getTarget(op);
        if (failed(own)) {
          failedAny = true;
          return;
        }
        onChip = *own;
      }
      failedAny |= failed(op.verifyOnTarget(*onChip));
    });
    if (failedAny)
      signalPassFailure();
  }
};

} // namespace
} // namespace moec
