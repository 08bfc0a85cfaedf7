//===- LowerMathToNative.cpp - f32 math.exp2 -> rocdl.exp2 ----------------===//

#include "moec/Codegen/Passes.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/ROCDLDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace moec {
#define GEN_PASS_DEF_MOELOWERMATHTONATIVE
#include "moec/Codegen/Passes.h.inc"
} // namespace moec

using namespace mlir;

namespace moec {
namespace {

struct Exp2ToNative final : OpRewritePattern<math::Exp2Op> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(math::Exp2Op op,
                                PatternRewriter &rewriter) const override {
    Type type = op.getType();
    if (getElementTypeOrSelf(type) != rewriter.getF32Type())
      return rewriter.notifyMatchFailure(op, "only f32 has a native exp2");
    Location loc = op.getLoc();
    auto vectorType = dyn_cast<VectorType>(type);
    if (!vectorType) {
      rewriter.replaceOpWithNewOp<ROCDL::ROCDLExp2>(op, type, op.getOperand());
      return success();
    }
    if (vectorType.getRank() != 1 || vectorType.isScalable())
      return rewriter.notifyMatchFailure(op, "only fixed 1-D vectors");
    SmallVector<Value> elements;
    for (int64_t i = 0; i < vectorType.getNumElements(); ++i) {
      Value element =
          vector::ExtractOp::create(rewriter, loc, op.getOperand(), i);
      elements.push_back(
          ROCDL::ROCDLExp2::create(rewriter, loc, rewriter.getF32Type(), element));
    }
    rewriter.replaceOpWithNewOp<vector::FromElementsOp>(op, vectorType,
                                                        elements);
    return success();
  }
};

struct MoeLowerMathToNativePass final
    : impl::MoeLowerMathToNativeBase<MoeLowerMathToNativePass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<Exp2ToNative>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace
} // namespace moec
