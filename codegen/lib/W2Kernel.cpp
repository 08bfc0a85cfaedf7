//===- W2Kernel.cpp - moe.w2 -> gpu.func ----------------------------------===//
///
/// \file
/// Builds the W2 (down-projection) kernel: FP8 activations x MXFP4 weights
/// with scaled MFMA, FP32 accumulation, BF16 output.
///
/// One workgroup computes a tile.m x tile.n block of the output: tile.m rows
/// of the expert-sorted route list (all of one expert) by tile.n hidden
/// columns. Per K step every lane helps copy the A tile (FP8 rows gathered by
/// route id) and the B tile (the expert's packed E2M1 rows) into LDS with
/// 16-byte buffer loads; after a barrier each wave reads its MFMA fragments
/// from LDS in the lane layout of MfmaLayout.h and accumulates. Scales are
/// read per lane straight from global memory: each lane needs exactly one
/// E8M0 byte per operand per instruction.
///
/// Padding entries of the route list hold the route id num_routes, which lies
/// past the valid bytes of the activation and output buffers: their loads
/// read zero and their stores are dropped by the buffer bounds check.
///
//===----------------------------------------------------------------------===//

#include "moec/Codegen/KernelBuilders.h"
#include "GemmEmitter.h"
#include "moec/Dialect/Moe/MoeDialect.h"

#include "mlir/Dialect/AMDGPU/IR/AMDGPUDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;

namespace moec {
namespace {

/// Static extent (elements) of buffers indexed by route: the real bound comes
/// from the validBytes of the buffer descriptor, computed from num_routes.
constexpr int64_t kRouteIndexedExtent = int64_t(1) << 28;

/// Argument positions of the W2 kernel, in ABI order.
enum W2Arg : unsigned {
  kA, kAScale, kB, kBScale, kSortedRoutes, kTileExperts, kOut,
  kNumRoutes, kNumSorted, kW2ArgCount,
  // Only with a shared FP8 expert, after the others.
  kBShared = kW2ArgCount, kBSharedScale
};

/// Emits one W2 kernel: the shared GEMM plus its arguments and epilogue.
class W2Emitter : GemmEmitter {
public:
  W2Emitter(OpBuilder &builder, moe::W2Op op)
      : GemmEmitter(builder, op.getLoc(), op.getTile()), op(op),
        problem(op.getProblem()) {}

  FailureOr<gpu::GPUModuleOp> emit();

private:
  void emitBody(gpu::GPUFuncOp func);

  moe::W2Op op;
  moe::ProblemAttr problem;
};

FailureOr<gpu::GPUModuleOp> W2Emitter::emit() {
  const int64_t hidden = problem.getHidden();
  const int64_t inter = problem.getIntermediate();
  const bool shared = op.getSharedFp8Expert();
  const int64_t routedExperts = problem.getLocalExperts() - (shared ? 1 : 0);

  SmallVector<Type> argTypes(kW2ArgCount);
  argTypes[kA] = globalBuffer(kRouteIndexedExtent, b.getI32Type());
  argTypes[kAScale] = globalBuffer(kRouteIndexedExtent, b.getI8Type());
  argTypes[kB] = globalBuffer(routedExperts * hidden * inter / 8, b.getI32Type());
  argTypes[kBScale] = globalBuffer(routedExperts * hidden * inter / 32,
                                   b.getI8Type());
  argTypes[kSortedRoutes] = globalBuffer(kRouteIndexedExtent, b.getI32Type());
  argTypes[kTileExperts] = globalBuffer(kRouteIndexedExtent, b.getI32Type());
  // Split-K writes FP32 partials [routes, split_k, H]; else BF16 [routes, H].
  argTypes[kOut] = globalBuffer(kRouteIndexedExtent, op.getSplitK() > 1
                                                         ? b.getF32Type()
                                                         : b.getBF16Type());
  argTypes[kNumRoutes] = b.getI32Type();
  argTypes[kNumSorted] = b.getI32Type();
  if (shared) {
    argTypes.push_back(globalBuffer(hidden * inter / 4, b.getI32Type()));
    argTypes.push_back(globalBuffer(hidden * inter / 32, b.getI8Type()));
  }

  OpBuilder::InsertionGuard guard(b);
  FailureOr<gpu::GPUFuncOp> func = createKernel(
      op.getSymName(), argTypes, getW2KernelAbi(op), op.getLdsBytes() / 4);
  if (failed(func))
    return failure();
  applyTileHints(*func);
  emitBody(*func);
  return (*func)->getParentOfType<gpu::GPUModuleOp>();
}

void W2Emitter::emitBody(gpu::GPUFuncOp func) {
  const int64_t hidden = problem.getHidden();
  const int64_t inter = problem.getIntermediate();
  const int64_t tileM = tile.getM(), tileN = tile.getN(), tileK = tile.getK();
  const int64_t waveN = tile.getWaveN();
  const int64_t dim = layout.dim;
  auto arg = [&](W2Arg which) { return func.getArgument(which); };

  Value numRoutes = arg(kNumRoutes), numSorted = arg(kNumSorted);
  Value numTiles = arith::DivUIOp::create(b, loc, numSorted, i32(tileM));
  Value aBuf = asBuffer(arg(kA), bytesOf(numRoutes, inter));
  Value aScaleBuf = asBuffer(arg(kAScale), bytesOf(numRoutes, inter / 32));
  Value sortedBuf = asBuffer(arg(kSortedRoutes), bytesOf(numSorted, 4));
  Value tileExpertBuf = asBuffer(arg(kTileExperts), bytesOf(numTiles, 4));
  const int64_t splitK = op.getSplitK();
  const int64_t outRowBytes = splitK > 1 ? splitK * hidden * 4 : hidden * 2;
  Value outBuf = asBuffer(arg(kOut), bytesOf(numRoutes, outRowBytes));
  const bool shared = op.getSharedFp8Expert();
  const int64_t sharedExpert = problem.getLocalExperts() - 1;

  emitLaneIds();
  auto [nTile, mTile] = emitTileIds(hidden / tileN, numTiles);
  // A tile whose expert id is negative (or past this rank's experts) holds
  // no routes: the whole workgroup leaves.
  Value expertI32 =
      memref::LoadOp::create(b, loc, tileExpertBuf, ValueRange{mTile});
  emitExpertGuard(expertI32, problem.getLocalExperts());

  Value expert = toIndex(expertI32);
  Value rowBase = mul(mTile, tileM);
  Value colBase = mul(nTile, tileN);
  auto routeOfRow = [&](Value row) {
    return toIndex(memref::LoadOp::create(b, loc, sortedBuf,
                                          ValueRange{add(rowBase, row)}));
  };
  const int64_t mFrags = tileM / dim, nFrags = waveN / dim;
  SmallVector<Value> fragRoute;
  for (int64_t mi = 0; mi < mFrags; ++mi)
    fragRoute.push_back(routeOfRow(add(laneRow, idx(mi * dim))));
  Value waveCol = mul(wave, waveN);
  // Split-K: grid z takes ceil(steps / S) K steps (the last slice may be
  // shorter) and writes the partial row (route, z) of the output.
  Value kSlice = splitK > 1 ? Value(gpu::BlockIdOp::create(b, loc, gpu::Dimension::z))
                            : idx(0);
  const int64_t sliceDepth = llvm::divideCeil(inter / tileK, splitK) * tileK;
  Value kBegin = mul(kSlice, sliceDepth);
  Value kEnd =
      arith::MinUIOp::create(b, loc, add(kBegin, idx(sliceDepth)), idx(inter));
  // Output element (route, column): BF16 [R, H] or FP32 partials [R, S, H].
  auto outIndex = [&](Value route, Value col) {
    if (splitK == 1)
      return add(mul(route, hidden), col);
    return add(mul(add(mul(route, splitK), kSlice), hidden), col);
  };

  auto makeOperands = [&](bool bFp8) {
    GemmOperands ops;
    ops.aBuffer = aBuf;
    ops.aScaleBuffer = aScaleBuf;
    ops.bBuffer = asBuffer(arg(bFp8 ? W2Arg(kBShared) : kB), Value());
    ops.bScaleBuffer = asBuffer(arg(bFp8 ? W2Arg(kBSharedScale) : kBScale), Value());
    ops.lds = func.getWorkgroupAttributions()[0];
    ops.ldsADword = 0;
    ops.ldsBDword = tileM * tileK / 4;
    ops.depth = inter;
    ops.kBegin = kBegin;
    ops.kEnd = kEnd;
    ops.bNontemporal = tile.getBCache() == moe::CachePolicy::nt;
    ops.bFp8 = bFp8;
    // Weight row (expert, column) in rows of the [E, H, .] tensors; the
    // shared expert's tensor holds just its own rows.
    Value weightRowBase = bFp8 ? colBase : add(mul(expert, hidden), colBase);
    // A rows are tileK FP8 bytes (tileK / 16 chunks of 16 bytes); B rows
    // tileK / 2 packed bytes (tileK / 32 chunks), or tileK FP8 bytes.
    ops.aSlots = planCopy(
        tileM, tileK / 16,
        [&](Value row) { return mul(routeOfRow(row), inter / 4); },
        ops.ldsADword, /*swizzle=*/tile.getASwizzle());
    const int64_t bRowDwords = bFp8 ? inter / 4 : inter / 8;
    ops.bSlots = planCopy(
        tileN, bFp8 ? tileK / 16 : tileK / 32,
        [&](Value row) { return mul(add(weightRowBase, row), bRowDwords); },
        ops.ldsBDword);
    for (int64_t mi = 0; mi < mFrags; ++mi) {
      ops.aTileRow.push_back(add(laneRow, idx(mi * dim)));
      ops.aScaleRow.push_back(mul(fragRoute[mi], inter / 32));
    }
    for (int64_t ni = 0; ni < nFrags; ++ni) {
      ops.bTileRow.push_back(add(add(waveCol, idx(ni * dim)), laneRow));
      ops.bScaleRow.push_back(
          mul(add(weightRowBase, ops.bTileRow.back()), inter / 32));
    }
    return ops;
  };
  Value isShared;
  if (shared)
    isShared = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                     expertI32, i32(sharedExpert));
  SmallVector<Value> accs = emitGemm(isShared, mFrags * nFrags, makeOperands);

  // Epilogue: accumulator value a of a lane sits at (accRow(a), accCol) of
  // the MFMA's source-A x source-B block. BF16 output rounds once (to
  // nearest even); split-K partials stay FP32.
  const bool stage = op.getBf16Lds();
  Value lds = func.getWorkgroupAttributions()[0];
  auto bf16x4 = VectorType::get({4}, b.getBF16Type());
  auto i32x2 = VectorType::get({2}, b.getI32Type());
  for (int64_t mi = 0; mi < mFrags; ++mi) {
    for (int64_t ni = 0; ni < nFrags; ++ni) {
      Value acc = accs[mi * nFrags + ni];
      Value fragCol = add(waveCol, idx(ni * dim));
      for (int64_t a = 0; a < layout.accPerLane; a += 4) {
        // accRow(a) = (a / 4) * 4 * groups + 4 * g + a % 4.
        Value rowOfFour =
            add(mul(laneGroup, 4), idx((a / 4) * 4 * layout.groups));
        Value quad = vector::ShuffleOp::create(
            b, loc, acc, acc, ArrayRef<int64_t>{a, a + 1, a + 2, a + 3});
        if (splitK == 1)
          quad = arith::TruncFOp::create(b, loc, bf16x4, quad);
        if (bMajor) {
          // Four consecutive output columns of one row.
          Value localCol = add(fragCol, rowOfFour);
          if (stage) {
            // Into the LDS tile [tileM][tileN] BF16: 8 bytes = 2 dwords.
            Value dword = divC(add(mul(add(laneRow, idx(mi * dim)), tileN),
                                   localCol), 2);
            vector::StoreOp::create(
                b, loc, vector::BitCastOp::create(b, loc, i32x2, quad), lds,
                ValueRange{dword}, /*nontemporal=*/false, llvm::MaybeAlign(8));
            continue;
          }
          vector::StoreOp::create(
              b, loc, quad, outBuf,
              ValueRange{outIndex(fragRoute[mi], add(colBase, localCol))},
              /*nontemporal=*/false, llvm::MaybeAlign(splitK == 1 ? 8 : 16));
          continue;
        }
        Value localCol = add(fragCol, laneRow);
        for (int64_t j = 0; j < 4; ++j) {
          Value row = add(rowOfFour, idx(mi * dim + j));
          Value value = vector::ExtractOp::create(b, loc, quad, j);
          memref::StoreOp::create(
              b, loc, value, outBuf,
              ValueRange{outIndex(routeOfRow(row), add(colBase, localCol))});
        }
      }
    }
  }
  if (!stage)
    return;
  // Write the staged tile back: each lane copies 16-byte chunks (8 BF16
  // columns) of whole rows.
  gpu::BarrierOp::create(b, loc);
  const int64_t chunksPerRow = tileN / 8, chunks = tileM * chunksPerRow;
  for (int64_t first = 0; first < chunks; first += lanes) {
    Value chunk = add(tid, idx(first));
    std::optional<OpBuilder::InsertionGuard> tail;
    if (first + lanes > chunks) {
      auto ifActive = scf::IfOp::create(
          b, loc,
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, chunk,
                                idx(chunks)),
          /*withElseRegion=*/false);
      tail.emplace(b);
      b.setInsertionPointToStart(ifActive.thenBlock());
    }
    Value row = divC(chunk, chunksPerRow);
    Value col = mul(remC(chunk, chunksPerRow), 8);
    Value data = load16(lds, divC(add(mul(row, tileN), col), 2));
    Value outElement = add(mul(routeOfRow(row), hidden), add(colBase, col));
    vector::StoreOp::create(
        b, loc, vector::BitCastOp::create(
                    b, loc, VectorType::get({8}, b.getBF16Type()), data),
        outBuf, ValueRange{outElement}, /*nontemporal=*/false,
        llvm::MaybeAlign(16));
  }
  // A persistent workgroup's next tile reuses the LDS.
  if (tile.getPersistCu() > 0)
    gpu::BarrierOp::create(b, loc);
}

} // namespace

const char *toString(KernelArg::Kind kind) {
  return kind == KernelArg::Kind::Buffer ? "buffer" : "i32";
}

const char *toString(KernelArg::Access access) {
  switch (access) {
  case KernelArg::Access::Read: return "read";
  case KernelArg::Access::Write: return "write";
  case KernelArg::Access::ReadWrite: return "readwrite";
  case KernelArg::Access::Value: return "value";
  }
  return "unknown";
}

KernelAbi getW2KernelAbi(moe::W2Op op) {
  using K = KernelArg::Kind;
  using A = KernelArg::Access;
  moe::TileAttr tile = op.getTile();
  KernelAbi abi;
  abi.args = {
      {"a", K::Buffer, "f8E4M3FN", A::Read, "[num_routes, I]"},
      {"a_scale", K::Buffer, "f8E8M0FNU", A::Read, "[num_routes, I/32]"},
      {"b", K::Buffer, "f4E2M1FN x2", A::Read, "[local_experts, H, I/2]"},
      {"b_scale", K::Buffer, "f8E8M0FNU", A::Read, "[local_experts, H, I/32]"},
      {"sorted_routes", K::Buffer, "i32", A::Read, "[num_sorted]"},
      {"tile_experts", K::Buffer, "i32", A::Read, "[num_sorted/tile_m]"},
      {"out", K::Buffer, op.getSplitK() > 1 ? "f32" : "bf16", A::Write,
       op.getSplitK() > 1 ? "[num_routes, split_k, H]" : "[num_routes, H]"},
      {"num_routes", K::I32, "i32", A::Value, "scalar"},
      {"num_sorted", K::I32, "i32", A::Value, "scalar (multiple of tile_m)"},
  };
  if (op.getSharedFp8Expert()) {
    abi.args.push_back({"b_shared", K::Buffer, "f8E4M3FN", A::Read, "[H, I]"});
    abi.args.push_back(
        {"b_shared_scale", K::Buffer, "f8E8M0FNU", A::Read, "[H, I/32]"});
  }
  abi.gridX = "H / " + std::to_string(tile.getN());
  abi.gridY = tile.getPersistCu() > 0
                  ? std::to_string(tile.getPersistCu())
                  : "num_sorted / " + std::to_string(tile.getM());
  abi.gridZ = std::to_string(op.getSplitK());
  abi.workgroupSize = static_cast<unsigned>(64 * tile.getWaves());
  return abi;
}

FailureOr<gpu::GPUModuleOp> buildW2Kernel(OpBuilder &builder, moe::W2Op op) {
  return W2Emitter(builder, op).emit();
}

} // namespace moec
