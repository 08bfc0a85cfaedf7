//===- QuantKernel.cpp - moe.quant -> gpu.func ----------------------------===//
///
/// \file
/// The layer's input quantisation: BF16 hidden states -> token rows with one
/// E8M0 scale per 1x32 block, the layout moe.w13 reads: FP8 E4M3 (A8W4) or
/// MXFP4 E2M1 pairs (A4W4, problem.output f4E2M1FN). One lane per block:
/// four 16-byte loads (the block's 64 bytes), widened to FP32 (exact), then
/// the block quantiser moe.w13 uses for its intermediate
/// (KernelEmitter::storeFp8Block: amax, scale, 32 codes in two 16-byte
/// stores, one scale byte; or storeFp4Block: AITER's MXFP4 rule, 16 packed
/// bytes in one store, one scale byte). Blocks are numbered over the whole
/// [num_tokens, H] tensor, so a workgroup may span tokens and the grid rule
/// needs only num_tokens * H; lanes past the last block write nothing.
///
//===----------------------------------------------------------------------===//

#include "KernelEmitter.h"
#include "moec/Codegen/KernelBuilders.h"
#include "moec/Dialect/Moe/MoeDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;

namespace moec {
namespace {

constexpr int64_t kTokenIndexedExtent = int64_t(1) << 28;

/// Elements per E8M0 block, and BF16 elements per 16-byte load.
constexpr int64_t kBlock = 32, kBf16PerLoad = 8;

enum QuantArg : unsigned { kX, kOut, kOutScale, kNumTokens, kQuantArgCount };

class QuantEmitter : KernelEmitter {
public:
  QuantEmitter(OpBuilder &builder, moe::QuantOp op)
      : KernelEmitter(builder, op), op(op) {}

  FailureOr<gpu::GPUModuleOp> emit() {
    SmallVector<Type> argTypes(kQuantArgCount);
    argTypes[kX] = globalBuffer(kTokenIndexedExtent, b.getI32Type());
    argTypes[kOut] = globalBuffer(kTokenIndexedExtent, b.getI32Type());
    argTypes[kOutScale] = globalBuffer(kTokenIndexedExtent, b.getI8Type());
    argTypes[kNumTokens] = b.getI32Type();
    OpBuilder::InsertionGuard guard(b);
    FailureOr<gpu::GPUFuncOp> func = createKernel(
        op.getSymName(), argTypes, getQuantKernelAbi(op), /*ldsDwords=*/0);
    if (failed(func))
      return failure();
    emitBody(*func);
    return (*func)->getParentOfType<gpu::GPUModuleOp>();
  }

private:
  void emitBody(gpu::GPUFuncOp func);

  moe::QuantOp op;
};

void QuantEmitter::emitBody(gpu::GPUFuncOp func) {
  const int64_t hidden = op.getProblem().getHidden();
  const int64_t lanes = chip.wavefrontSize * op.getWaves();
  auto arg = [&](QuantArg which) { return func.getArgument(which); };

  Value numTokensI32 = arg(kNumTokens);
  Value x = asBuffer(arg(kX), bytesOf(numTokensI32, hidden * 2));
  const bool fp4 =
      op.getProblem().getOutputFormat() == moe::ActivationFormat::fp4;
  Value out = asBuffer(arg(kOut), bytesOf(numTokensI32, fp4 ? hidden / 2
                                                            : hidden));
  Value outScale = asBuffer(arg(kOutScale), bytesOf(numTokensI32, hidden / kBlock));
  Value blocks = mul(toIndex(numTokensI32), hidden / kBlock);

  Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
  Value workgroup = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  Value block = add(mul(workgroup, lanes), tid);
  // The tail of the last workgroup (and every lane when num_tokens is 0).
  auto inRange = scf::IfOp::create(
      b, loc,
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, block, blocks),
      /*withElseRegion=*/false);
  b.setInsertionPointToStart(inRange.thenBlock());

  // 32 BF16 values = 16 dwords; each 16-byte load widens to two
  // vector<4xf32> in column order.
  auto bf16x8 = VectorType::get({kBf16PerLoad}, b.getBF16Type());
  auto f32x8 = VectorType::get({kBf16PerLoad}, b.getF32Type());
  Value firstDword = mul(block, kBlock / 2);
  SmallVector<Value> values;
  for (int64_t q = 0; q < kBlock / kBf16PerLoad; ++q) {
    Value raw = load16(x, add(firstDword, idx(4 * q)));
    Value bf16 = vector::BitCastOp::create(b, loc, bf16x8, raw);
    Value wide = arith::ExtFOp::create(b, loc, f32x8, bf16);
    for (int64_t half = 0; half < 2; ++half)
      values.push_back(vector::ShuffleOp::create(
          b, loc, wide, wide,
          ArrayRef<int64_t>{4 * half, 4 * half + 1, 4 * half + 2,
                            4 * half + 3}));
  }
  if (fp4)
    storeFp4Block(values, out, mul(block, kBlock / 8), outScale, block);
  else
    storeFp8Block(values, out, mul(block, kBlock / 4), outScale, block);
  b.setInsertionPointAfter(inRange);
  gpu::ReturnOp::create(b, loc);
}

} // namespace

KernelAbi getQuantKernelAbi(moe::QuantOp op) {
  using K = KernelArg::Kind;
  using A = KernelArg::Access;
  KernelAbi abi;
  const bool fp4 =
      op.getProblem().getOutputFormat() == moe::ActivationFormat::fp4;
  abi.args = {
      {"x", K::Buffer, "bf16", A::Read, "[num_tokens, H]"},
      fp4 ? KernelArg{"out", K::Buffer, "f4E2M1FN x2", A::Write,
                      "[num_tokens, H/2]"}
          : KernelArg{"out", K::Buffer, "f8E4M3FN", A::Write,
                      "[num_tokens, H]"},
      {"out_scale", K::Buffer, "f8E8M0FNU", A::Write, "[num_tokens, H/32]"},
      {"num_tokens", K::I32, "i32", A::Read, "scalar"},
  };
  const unsigned lanes = static_cast<unsigned>(
      moe::getVerifiedTarget(op).wavefrontSize * op.getWaves());
  // One lane per 1x32 block; at least one workgroup, so num_tokens = 0 is
  // a launch like any other (it writes nothing).
  abi.gridX = "max(1, ceil(num_tokens * H / " +
              std::to_string(kBlock * lanes) + "))";
  abi.gridY = "1";
  abi.gridZ = "1";
  abi.workgroupSize = lanes;
  return abi;
}

FailureOr<gpu::GPUModuleOp> buildQuantKernel(OpBuilder &builder,
                                             moe::QuantOp op) {
  std::optional<moe::ActivationFormat> format =
      op.getProblem().getOutputFormat();
  if (format != moe::ActivationFormat::fp8 &&
      format != moe::ActivationFormat::fp4)
    return op.emitOpError("problem.output must be f8E4M3FN or f4E2M1FN "
                          "(the quantised token rows)");
  return QuantEmitter(builder, op).emit();
}

} // namespace moec
