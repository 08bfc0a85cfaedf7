//===- CombineKernel.cpp - moe.combine -> gpu.func ------------------------===//
///
/// \file
/// The weighted combine: each wave reduces one token at a time, each lane 8
/// consecutive BF16 columns per pass (one 16-byte load per route, one
/// 16-byte store). With fp8_peer_rows the fused stage 2's FP8 rows are
/// dequantised (8 code bytes and one scale byte per route) and summed in
/// FP32 in increasing k, rounded once to BF16. Routes with an invalid expert id are skipped with a
/// select on the accumulator, not multiplied by zero: 0 * NaN from a stale
/// slot would still poison the sum.
///
//===----------------------------------------------------------------------===//

#include "KernelEmitter.h"
#include "moec/Codegen/KernelBuilders.h"
#include "moec/Dialect/Moe/MoeDialect.h"
#include "PeerBuffer.h"
#include "moec/abi/peer_protocol.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;

namespace moec {
namespace {

constexpr int64_t kTokenIndexedExtent = int64_t(1) << 28;

/// With peer_rows, kRows is this rank's symmetric buffer instead: its
/// combine rows and control words (PeerBuffer.h).
enum CombineArg : unsigned {
  kRows, kTopkIds, kTopkWeights, kOut, kNumTokens, kCombineArgCount
};

class CombineEmitter : KernelEmitter {
public:
  CombineEmitter(OpBuilder &builder, moe::CombineOp op)
      : KernelEmitter(builder, op), op(op), problem(op.getProblem()),
        waves(op.getTile().getWaves()) {}

  FailureOr<gpu::GPUModuleOp> emit() {
    SmallVector<Type> argTypes(kCombineArgCount);
    argTypes[kRows] = globalBuffer(kTokenIndexedExtent, b.getI32Type());
    argTypes[kTopkIds] = globalBuffer(kTokenIndexedExtent, b.getI32Type());
    argTypes[kTopkWeights] = globalBuffer(kTokenIndexedExtent, b.getF32Type());
    argTypes[kOut] = globalBuffer(kTokenIndexedExtent, b.getI32Type());
    argTypes[kNumTokens] = b.getI32Type();
    if (op.getPeerRows())
      argTypes[kRows] = symmetricBufferType(b.getContext());
    OpBuilder::InsertionGuard guard(b);
    FailureOr<gpu::GPUFuncOp> func = createKernel(
        op.getSymName(), argTypes, getCombineKernelAbi(op), /*ldsDwords=*/0);
    if (failed(func))
      return failure();
    emitBody(*func);
    return (*func)->getParentOfType<gpu::GPUModuleOp>();
  }

private:
  void emitBody(gpu::GPUFuncOp func);
  /// 8 columns of a BF16 route row, widened to FP32.
  Value loadBf16Row(Value rows, Value route, Value column) {
    Value dword = divC(add(mul(route, problem.getHidden()), column), 2);
    Value row = vector::BitCastOp::create(
        b, loc, VectorType::get({8}, b.getBF16Type()), load16(rows, dword));
    return arith::ExtFOp::create(b, loc, VectorType::get({8}, b.getF32Type()),
                                 row);
  }
  /// 8 columns of a route's FP8 payload row (peer_protocol.h: row slots
  /// of fp8RowBytes, codes then E8M0 scales), dequantised exactly to FP32:
  /// code x 2^(scale - 127). The 8 columns lie in one 1x32 block.
  Value loadFp8Row(Value rows, Value route, Value column) {
    const int64_t hidden = problem.getHidden();
    Value rowByte = mul(route, peer::fp8RowBytes(hidden));
    Value bytes = vector::LoadOp::create(
        b, loc, VectorType::get({8}, b.getI8Type()), rows,
        ValueRange{add(rowByte, column)}, /*nontemporal=*/false,
        llvm::MaybeAlign(8));
    // Widened two at a time: a vector<2> extf is one packed FP8 -> FP32
    // conversion once lowered (wider ones leave vector ops behind that the
    // ROCDL lowering does not take).
    Value pairs[4];
    for (int64_t q = 0; q < 4; ++q) {
      Value two = vector::ShuffleOp::create(b, loc, bytes, bytes,
                                            ArrayRef<int64_t>{2 * q, 2 * q + 1});
      pairs[q] = arith::ExtFOp::create(
          b, loc, VectorType::get({2}, b.getF32Type()),
          Value(vector::BitCastOp::create(
              b, loc, VectorType::get({2}, b.getType<Float8E4M3FNType>()),
              two)));
    }
    auto f32x8 = VectorType::get({8}, b.getF32Type());
    Value low = vector::ShuffleOp::create(b, loc, pairs[0], pairs[1],
                                          ArrayRef<int64_t>{0, 1, 2, 3});
    Value high = vector::ShuffleOp::create(b, loc, pairs[2], pairs[3],
                                           ArrayRef<int64_t>{0, 1, 2, 3});
    Value values = vector::ShuffleOp::create(
        b, loc, low, high, ArrayRef<int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
    Value code = memref::LoadOp::create(
        b, loc, rows,
        ValueRange{add(add(rowByte, idx(hidden)), divC(column, 32))});
    // E8M0 code c is 2^(c - 127): FP32 bits c << 23 (codes 1..254).
    Value scale = arith::BitcastOp::create(
        b, loc, b.getF32Type(),
        arith::ShLIOp::create(
            b, loc, arith::ExtUIOp::create(b, loc, b.getI32Type(), code),
            i32(23)));
    return arith::MulFOp::create(
        b, loc, values, vector::BroadcastOp::create(b, loc, f32x8, scale));
  }
  /// 8 columns of a route summed over its split-K partials, in order.
  Value loadPartialSum(Value rows, Value route, Value column) {
    auto f32x4 = VectorType::get({4}, b.getF32Type());
    const int64_t splitK = op.getSplitK(), hidden = problem.getHidden();
    Value sum;
    for (int64_t z = 0; z < splitK; ++z) {
      Value dword =
          add(mul(add(mul(route, splitK), idx(z)), hidden), column);
      Value low = vector::BitCastOp::create(b, loc, f32x4, load16(rows, dword));
      Value high = vector::BitCastOp::create(b, loc, f32x4,
                                             load16(rows, add(dword, idx(4))));
      Value part = vector::ShuffleOp::create(
          b, loc, low, high, ArrayRef<int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
      sum = sum ? Value(arith::AddFOp::create(b, loc, sum, part)) : part;
    }
    return sum;
  }

  moe::CombineOp op;
  moe::ProblemAttr problem;
  int64_t waves;
};

void CombineEmitter::emitBody(gpu::GPUFuncOp func) {
  const int64_t hidden = problem.getHidden();
  const int64_t topK = problem.getTopK();
  const int64_t blocks = op.getTile().getBlocks();
  auto arg = [&](CombineArg which) { return func.getArgument(which); };

  Value numTokensI32 = arg(kNumTokens);
  Value numRoutesI32 = arith::MulIOp::create(b, loc, numTokensI32, i32(topK));
  const int64_t splitK = op.getSplitK();
  // BF16 rows [R, H], the FP32 split-K partials of W2 [R, S, H], or the
  // fused stage 2's FP8 payload rows (fp8_peer_rows).
  const bool fp8Rows = op.getFp8PeerRows();
  const int64_t rowBytes = fp8Rows      ? peer::fp8RowBytes(hidden)
                           : splitK > 1 ? splitK * hidden * 4
                                        : hidden * 2;
  const bool peerRows = op.getPeerRows();
  const int64_t localExperts = problem.getLocalExperts(), ep = problem.getEp();
  Value rowsArg = arg(kRows);
  // FP8 rows are bytes (codes and scales): their view reaches the end of
  // the symmetric buffer's 32-bit extent. The others are i32 words.
  const int64_t rowsOffset = peer::combineRowsOffset(localExperts, ep);
  if (peerRows)
    rowsArg = symmetricRegion(
        b, loc, arg(kRows), rowsOffset,
        fp8Rows ? kSymmetricExtent - rowsOffset : kTokenIndexedExtent,
        fp8Rows ? b.getI8Type() : b.getI32Type());
  Value rows = asBuffer(rowsArg, bytesOf(numRoutesI32, rowBytes));
  Value ids = asBuffer(arg(kTopkIds), bytesOf(numRoutesI32, 4));
  Value weights = asBuffer(arg(kTopkWeights), bytesOf(numRoutesI32, 4));
  Value out = asBuffer(arg(kOut), bytesOf(numTokensI32, hidden * 2));
  Value numTokens = toIndex(numTokensI32);

  Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
  Value wave = divC(tid, chip.wavefrontSize);
  Value lane = remC(tid, chip.wavefrontSize);
  Value block = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  // Peer rows are complete once every rank's stage 2 has signalled. This
  // launch's stage 1 ran before on the stream: its epoch word is final.
  if (peerRows) {
    Value control =
        symmetricRegion(b, loc, arg(kRows), /*byteOffset=*/0,
                        peer::controlWords(localExperts, ep), b.getI32Type());
    Value epoch =
        memref::LoadOp::create(b, loc, control, ValueRange{idx(peer::kEpoch)});
    emitWaitUntil(tid, control, idx(peer::kCombineReady),
                  arith::MulIOp::create(b, loc, epoch, i32(problem.getEp())));
  }
  // A fixed grid (blocks > 0) strides over the tokens; otherwise the grid
  // covers them and each wave handles at most one. (No gpu.grid_dim: its
  // ROCDL lowering ignores the 32-bit index width.)
  Value firstToken = add(mul(block, waves), wave);
  Operation *tokenScope;
  Value token;
  if (blocks > 0) {
    auto loop = scf::ForOp::create(b, loc, firstToken, numTokens,
                                   idx(blocks * waves));
    tokenScope = loop;
    b.setInsertionPointToStart(loop.getBody());
    token = loop.getInductionVar();
  } else {
    auto inRange = scf::IfOp::create(
        b, loc,
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, firstToken,
                              numTokens),
        /*withElseRegion=*/false);
    tokenScope = inRange;
    b.setInsertionPointToStart(inRange.thenBlock());
    token = firstToken;
  }

  // Each route's id and weight, read once per token (uniform per wave).
  SmallVector<Value> valid, weight;
  for (int64_t k = 0; k < topK; ++k) {
    Value route = add(mul(token, topK), idx(k));
    Value id = memref::LoadOp::create(b, loc, ids, ValueRange{route});
    Value isValid;
    if (op.getSharedLastRoute() && k == topK - 1) {
      // FHMoE: the last slot is the shared expert's, valid only with its id.
      isValid = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, id,
                                      i32(problem.getExperts() - 1));
    } else {
      // FHMoE's routed slots stop below the shared expert's id.
      const int64_t limit = problem.getExperts() -
                            (op.getSharedLastRoute() ? 1 : 0);
      isValid = arith::AndIOp::create(
          b, loc,
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, id, i32(0)),
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, id,
                                i32(limit)));
    }
    valid.push_back(isValid);
    weight.push_back(memref::LoadOp::create(b, loc, weights, ValueRange{route}));
  }

  auto f32x8 = VectorType::get({8}, b.getF32Type());
  auto bf16x8 = VectorType::get({8}, b.getBF16Type());
  const int64_t columnsPerPass = 64 * 8;
  for (int64_t first = 0; first < hidden; first += columnsPerPass) {
    Value column = add(idx(first), mul(lane, 8));
    std::optional<OpBuilder::InsertionGuard> tail;
    if (first + columnsPerPass > hidden) {
      Value inside = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult,
                                           column, idx(hidden));
      auto ifInside = scf::IfOp::create(b, loc, inside, false);
      tail.emplace(b);
      b.setInsertionPointToStart(ifInside.thenBlock());
    }
    Value acc = arith::ConstantOp::create(b, loc, f32x8,
                                          DenseElementsAttr::get(f32x8, 0.0f));
    for (int64_t k = 0; k < topK; ++k) {
      // Read the row only for a valid route: an invalid slot may hold
      // anything, including NaN.
      auto ifValid = scf::IfOp::create(b, loc, TypeRange{f32x8}, valid[k],
                                       /*withElseRegion=*/true);
      {
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPointToStart(ifValid.thenBlock());
        Value route = add(mul(token, topK), idx(k));
        Value rowF32 = fp8Rows      ? loadFp8Row(rows, route, column)
                       : splitK > 1 ? loadPartialSum(rows, route, column)
                                    : loadBf16Row(rows, route, column);
        // Peer rows already carry the routing weight.
        if (!peerRows)
          rowF32 = arith::MulFOp::create(
              b, loc, vector::BroadcastOp::create(b, loc, f32x8, weight[k]),
              rowF32);
        Value sum = arith::AddFOp::create(b, loc, acc, rowF32);
        scf::YieldOp::create(b, loc, sum);
        b.setInsertionPointToStart(ifValid.elseBlock());
        scf::YieldOp::create(b, loc, acc);
      }
      acc = ifValid.getResult(0);
    }
    Value result = arith::TruncFOp::create(b, loc, bf16x8, acc);
    Value dword = divC(add(mul(token, hidden), column), 2);
    store16(vector::BitCastOp::create(b, loc, VectorType::get({4}, b.getI32Type()),
                                      result),
            out, dword);
  }
  b.setInsertionPointAfter(tokenScope);
  gpu::ReturnOp::create(b, loc);
}

} // namespace

KernelAbi getCombineKernelAbi(moe::CombineOp op) {
  using K = KernelArg::Kind;
  using A = KernelArg::Access;
  KernelAbi abi;
  abi.args = {
      {"rows", K::Buffer, op.getSplitK() > 1 ? "f32" : "bf16", A::Read,
       op.getSplitK() > 1 ? "[num_tokens*top_k, split_k, H]"
                          : "[num_tokens*top_k, H]"},
      {"topk_ids", K::Buffer, "i32", A::Read, "[num_tokens, top_k]"},
      {"topk_weights", K::Buffer, "f32", A::Read, "[num_tokens, top_k]"},
      {"out", K::Buffer, "bf16", A::Write, "[num_tokens, H]"},
      {"num_tokens", K::I32, "i32", A::Read, "scalar"},
  };
  if (op.getPeerRows())
    abi.args[0] = {"symmetric", K::Buffer, "i8", A::ReadWrite,
                   op.getFp8PeerRows()
                       ? "[symmetric buffer bytes] (this rank's: its combine "
                         "rows, [num_tokens*top_k] FP8 rows of H codes + H/32 "
                         "E8M0 scales, and control words; "
                         "moec/abi/peer_protocol.h)"
                       : "[symmetric buffer bytes] (this rank's: its combine "
                         "rows, [num_tokens*top_k, H] bf16, and control words; "
                         "moec/abi/peer_protocol.h)"};
  int64_t blocks = op.getTile().getBlocks();
  int64_t waves = op.getTile().getWaves();
  abi.gridX = blocks > 0 ? std::to_string(blocks)
                         : "ceil(num_tokens / " + std::to_string(waves) + ")";
  abi.gridY = "1";
  abi.gridZ = "1";
  abi.workgroupSize =
      static_cast<unsigned>(moe::getVerifiedTarget(op).wavefrontSize * waves);
  return abi;
}

FailureOr<gpu::GPUModuleOp> buildCombineKernel(OpBuilder &builder,
                                               moe::CombineOp op) {
  return CombineEmitter(builder, op).emit();
}

} // namespace moec
