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
#include "moec/Codegen/MfmaLayout.h"
#include "moec/Dialect/Moe/MoeDialect.h"

#include "mlir/Dialect/AMDGPU/IR/AMDGPUDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;

namespace moec {
namespace {

/// Static extent (elements) of buffers indexed by route: the real bound comes
/// from the validBytes of the buffer descriptor, computed from num_routes.
constexpr int64_t kRouteIndexedExtent = int64_t(1) << 28;

/// Argument positions of the W2 kernel, in ABI order.
enum W2Arg : unsigned {
  kA, kAScale, kB, kBScale, kSortedRoutes, kTileExperts, kOut,
  kNumRoutes, kNumSorted, kW2ArgCount
};

mfma::Shape toLayoutShape(moe::MfmaShape shape) {
  return shape == moe::MfmaShape::m16n16k128 ? mfma::Shape::M16N16K128
                                              : mfma::Shape::M32N32K64;
}

/// Emits the body of one W2 kernel. Holds the builder and the handful of
/// values every helper needs, so the emitting code reads top to bottom.
class W2Emitter {
public:
  W2Emitter(OpBuilder &builder, moe::W2Op op)
      : b(builder), loc(op.getLoc()), op(op), problem(op.getProblem()),
        tile(op.getTile()), shape(toLayoutShape(tile.getMfma())),
        layout(mfma::shapeInfo(shape)) {}

  FailureOr<gpu::GPUModuleOp> emit();

private:
  Value idx(int64_t value) {
    return arith::ConstantIndexOp::create(b, loc, value);
  }
  Value add(Value x, Value y) { return arith::AddIOp::create(b, loc, x, y); }
  Value mul(Value x, int64_t c) {
    return arith::MulIOp::create(b, loc, x, idx(c));
  }
  Value mul(Value x, Value y) { return arith::MulIOp::create(b, loc, x, y); }
  Value divC(Value x, int64_t c) {
    return arith::DivUIOp::create(b, loc, x, idx(c));
  }
  Value remC(Value x, int64_t c) {
    return arith::RemUIOp::create(b, loc, x, idx(c));
  }
  Value toIndex(Value i32) {
    return arith::IndexCastOp::create(b, loc, b.getIndexType(), i32);
  }

  MemRefType globalBuffer(int64_t elements, Type elementType) {
    auto space = gpu::AddressSpaceAttr::get(b.getContext(),
                                            gpu::AddressSpace::Global);
    return MemRefType::get({elements}, elementType, MemRefLayoutAttrInterface(),
                           space);
  }
  MemRefType ldsBuffer(int64_t elements) {
    auto space = gpu::AddressSpaceAttr::get(b.getContext(),
                                            gpu::AddressSpace::Workgroup);
    return MemRefType::get({elements}, b.getI32Type(),
                           MemRefLayoutAttrInterface(), space);
  }

  /// Wraps a kernel argument as a raw-buffer fat pointer; `validBytes`
  /// (i64, may be null) bounds it for the hardware range check.
  Value asBuffer(Value memref, Value validBytes) {
    return amdgpu::FatRawBufferCastOp::create(b, loc, memref, validBytes,
                                              /*cacheSwizzleStride=*/Value(),
                                              /*boundsCheck=*/true,
                                              /*resetOffset=*/false);
  }
  Value bytesOf(Value countI32, int64_t bytesPerItem) {
    Value count = arith::ExtUIOp::create(b, loc, b.getI64Type(), countI32);
    Value perItem = arith::ConstantIntOp::create(b, loc, b.getI64Type(),
                                                 bytesPerItem);
    return arith::MulIOp::create(b, loc, count, perItem);
  }

  /// Loads 16 bytes as vector<4xi32>.
  Value load16(Value memref, Value dwordIndex, bool nontemporal = false) {
    return vector::LoadOp::create(b, loc, VectorType::get({4}, b.getI32Type()),
                                  memref, ValueRange{dwordIndex}, nontemporal,
                                  llvm::MaybeAlign(16));
  }
  void store16(Value value, Value memref, Value dwordIndex) {
    vector::StoreOp::create(b, loc, value, memref, ValueRange{dwordIndex},
                            /*nontemporal=*/false, llvm::MaybeAlign(16));
  }
  /// Loads one E8M0 scale byte and reinterprets it as f8E8M0FNU.
  Value loadScale(Value memref, Value byteIndex) {
    Value byte = memref::LoadOp::create(b, loc, memref, ValueRange{byteIndex});
    return arith::BitcastOp::create(b, loc, b.getType<Float8E8M0FNUType>(),
                                    byte);
  }

  void emitBody(gpu::GPUFuncOp func);
  /// Global-to-LDS copy plan of one operand: per copy slot of this lane, the
  /// global dword index at K = 0 and the LDS dword index.
  struct CopySlot {
    Value globalDword;
    Value ldsDword;
    /// Null when every lane has work in this slot.
    Value active;
  };

  OpBuilder &b;
  Location loc;
  moe::W2Op op;
  moe::ProblemAttr problem;
  moe::TileAttr tile;
  mfma::Shape shape;
  mfma::ShapeInfo layout;
};

FailureOr<gpu::GPUModuleOp> W2Emitter::emit() {
  MLIRContext *ctx = b.getContext();
  const int64_t hidden = problem.getHidden();
  const int64_t inter = problem.getIntermediate();
  const int64_t localExperts = problem.getLocalExperts();

  SmallVector<Type> argTypes(kW2ArgCount);
  argTypes[kA] = globalBuffer(kRouteIndexedExtent, b.getI32Type());
  argTypes[kAScale] = globalBuffer(kRouteIndexedExtent, b.getI8Type());
  argTypes[kB] = globalBuffer(localExperts * hidden * inter / 8, b.getI32Type());
  argTypes[kBScale] = globalBuffer(localExperts * hidden * inter / 32,
                                   b.getI8Type());
  argTypes[kSortedRoutes] = globalBuffer(kRouteIndexedExtent, b.getI32Type());
  argTypes[kTileExperts] = globalBuffer(kRouteIndexedExtent, b.getI32Type());
  argTypes[kOut] = globalBuffer(kRouteIndexedExtent, b.getBF16Type());
  argTypes[kNumRoutes] = b.getI32Type();
  argTypes[kNumSorted] = b.getI32Type();

  StringRef name = op.getSymName();
  auto module = gpu::GPUModuleOp::create(b, loc, name);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(module.getBody());

  const int64_t ldsA = tile.getM() * tile.getK() / 4;
  const int64_t ldsB = tile.getN() * tile.getK() / 8;
  auto func = gpu::GPUFuncOp::create(
      b, loc, name, FunctionType::get(ctx, argTypes, {}),
      /*workgroupAttributions=*/TypeRange{ldsBuffer(ldsA), ldsBuffer(ldsB)},
      /*privateAttributions=*/TypeRange{});
  func->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
  const int32_t lanes = static_cast<int32_t>(64 * tile.getWaves());
  func.setKnownBlockSizeAttr(b.getDenseI32ArrayAttr({lanes, 1, 1}));
  emitBody(func);
  return module;
}

void W2Emitter::emitBody(gpu::GPUFuncOp func) {
  Block &entry = func.getBody().front();
  b.setInsertionPointToStart(&entry);
  const int64_t hidden = problem.getHidden();
  const int64_t inter = problem.getIntermediate();
  const int64_t tileM = tile.getM(), tileN = tile.getN(), tileK = tile.getK();
  const int64_t waveN = tile.getWaveN();
  const int64_t lanes = 64 * tile.getWaves();
  const int64_t dim = layout.dim, mfmaK = layout.k;
  const bool bMajor = tile.getOrientation() == moe::MfmaOrientation::b_major;
  const bool bNontemporal = tile.getBCache() == moe::CachePolicy::nt;

  auto arg = [&](W2Arg which) { return func.getArgument(which); };
  Value ldsA = func.getWorkgroupAttributions()[0];
  Value ldsB = func.getWorkgroupAttributions()[1];

  Value numRoutes = arg(kNumRoutes), numSorted = arg(kNumSorted);
  Value numTiles = arith::DivUIOp::create(
      b, loc, numSorted,
      arith::ConstantIntOp::create(b, loc, b.getI32Type(), tileM));
  Value aBuf = asBuffer(arg(kA), bytesOf(numRoutes, inter));
  Value aScaleBuf = asBuffer(arg(kAScale), bytesOf(numRoutes, inter / 32));
  Value bBuf = asBuffer(arg(kB), Value());
  Value bScaleBuf = asBuffer(arg(kBScale), Value());
  Value sortedBuf = asBuffer(arg(kSortedRoutes), bytesOf(numSorted, 4));
  Value tileExpertBuf = asBuffer(arg(kTileExperts), bytesOf(numTiles, 4));
  Value outBuf = asBuffer(arg(kOut), bytesOf(numRoutes, hidden * 2));

  Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
  Value nTile = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  Value mTile = gpu::BlockIdOp::create(b, loc, gpu::Dimension::y);
  Value wave = divC(tid, 64);
  Value lane = remC(tid, 64);
  Value laneRow = remC(lane, dim);   // mfma::operandRow
  Value laneGroup = divC(lane, dim); // mfma::laneGroup

  // A tile whose expert id is negative (or past this rank's experts) holds no
  // routes: the whole workgroup leaves.
  Value expertI32 = memref::LoadOp::create(b, loc, tileExpertBuf,
                                           ValueRange{mTile});
  Value zero32 = arith::ConstantIntOp::create(b, loc, b.getI32Type(), 0);
  Value limit32 = arith::ConstantIntOp::create(b, loc, b.getI32Type(),
                                               problem.getLocalExperts());
  Value inRange = arith::AndIOp::create(
      b, loc,
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, expertI32,
                            zero32),
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, expertI32,
                            limit32));
  auto ifValid = scf::IfOp::create(b, loc, inRange, /*withElseRegion=*/false);
  gpu::ReturnOp::create(b, loc);
  b.setInsertionPointToStart(ifValid.thenBlock());

  Value expert = toIndex(expertI32);
  Value rowBase = mul(mTile, tileM);
  Value colBase = mul(nTile, tileN);
  auto routeOfRow = [&](Value row) {
    Value route = memref::LoadOp::create(b, loc, sortedBuf,
                                         ValueRange{add(rowBase, row)});
    return toIndex(route);
  };
  // Weight row (expert, column) in units of rows of the [E, H, .] tensors.
  Value expertRowBase = add(mul(expert, hidden), colBase);

  // Copy plans. A rows are tileK FP8 bytes (tileK / 16 chunks of 16 bytes);
  // B rows are tileK / 2 packed bytes (tileK / 32 chunks).
  auto planCopy = [&](int64_t rows, int64_t chunksPerRow,
                      function_ref<Value(Value row)> globalRowDword,
                      int64_t ldsRowDwords) {
    SmallVector<CopySlot> slots;
    const int64_t chunks = rows * chunksPerRow;
    for (int64_t first = 0; first < chunks; first += lanes) {
      Value chunk = add(tid, idx(first));
      Value active;
      if (first + lanes > chunks)
        active = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult,
                                       chunk, idx(chunks));
      Value row = divC(chunk, chunksPerRow);
      if (active)
        row = arith::MinUIOp::create(b, loc, row, idx(rows - 1));
      Value col = remC(chunk, chunksPerRow);
      slots.push_back({add(globalRowDword(row), mul(col, 4)),
                       add(mul(row, ldsRowDwords), mul(col, 4)), active});
    }
    return slots;
  };
  SmallVector<CopySlot> aSlots = planCopy(
      tileM, tileK / 16,
      [&](Value row) { return mul(routeOfRow(row), inter / 4); }, tileK / 4);
  SmallVector<CopySlot> bSlots = planCopy(
      tileN, tileK / 32,
      [&](Value row) { return mul(add(expertRowBase, row), inter / 8); },
      tileK / 8);

  // Per-lane rows of the MFMA fragments, and where their scales live.
  const int64_t mFrags = tileM / dim, nFrags = waveN / dim;
  SmallVector<Value> fragRoute, aScaleRow, bScaleRow;
  for (int64_t mi = 0; mi < mFrags; ++mi) {
    fragRoute.push_back(routeOfRow(add(laneRow, idx(mi * dim))));
    aScaleRow.push_back(mul(fragRoute.back(), inter / 32));
  }
  Value waveCol = mul(wave, waveN);
  for (int64_t ni = 0; ni < nFrags; ++ni) {
    Value n = add(add(waveCol, idx(ni * dim)), laneRow);
    bScaleRow.push_back(mul(add(expertRowBase, n), inter / 32));
  }

  // The K loop carries one accumulator per (M fragment, N fragment).
  auto accType = VectorType::get({layout.accPerLane}, b.getF32Type());
  Value accZero = arith::ConstantOp::create(
      b, loc, accType, DenseElementsAttr::get(accType, 0.0f));
  SmallVector<Value> accInit(mFrags * nFrags, accZero);
  auto kLoop = scf::ForOp::create(b, loc, idx(0), idx(inter), idx(tileK),
                                  accInit);
  {
    OpBuilder::InsertionGuard loopGuard(b);
    b.setInsertionPointToStart(kLoop.getBody());
    Value k0 = kLoop.getInductionVar();
    SmallVector<Value> accs(kLoop.getRegionIterArgs().begin(),
                            kLoop.getRegionIterArgs().end());

    auto emitCopy = [&](ArrayRef<CopySlot> slots, Value src, Value kDwords,
                        Value lds, bool nontemporal) {
      for (const CopySlot &slot : slots) {
        auto copy = [&] {
          Value data = load16(src, add(slot.globalDword, kDwords), nontemporal);
          store16(data, lds, slot.ldsDword);
        };
        if (!slot.active) {
          copy();
          continue;
        }
        auto guarded = scf::IfOp::create(b, loc, slot.active, false);
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPointToStart(guarded.thenBlock());
        copy();
      }
    };
    emitCopy(aSlots, aBuf, divC(k0, 4), ldsA, /*nontemporal=*/false);
    emitCopy(bSlots, bBuf, divC(k0, 8), ldsB, bNontemporal);
    gpu::BarrierOp::create(b, loc);

    const mfma::OperandLayout fp8 =
        mfma::operandLayout(shape, mfma::OperandFormat::Fp8);
    const mfma::OperandLayout fp4 =
        mfma::operandLayout(shape, mfma::OperandFormat::Fp4);
    auto fp8Type = VectorType::get({32}, b.getType<Float8E4M3FNType>());
    auto fp4Type = VectorType::get({32}, b.getType<Float4E2M1FNType>());
    for (int64_t kk = 0; kk < tileK / mfmaK; ++kk) {
      // Fragments follow the run table: each run is 16 bytes of one row.
      SmallVector<Value> aFrag, bFrag, aScale, bScale;
      Value block = add(divC(k0, 32), add(laneGroup, idx(kk * mfmaK / 32)));
      for (int64_t mi = 0; mi < mFrags; ++mi) {
        Value row = add(laneRow, idx(mi * dim));
        SmallVector<Value> parts;
        for (int run = 0; run < fp8.runCount; ++run) {
          const mfma::KRun &r = fp8.runs[run];
          Value kByte = add(mul(laneGroup, r.kPerGroup),
                            idx(kk * mfmaK + r.kBase));
          parts.push_back(load16(ldsA, add(mul(row, tileK / 4), divC(kByte, 4))));
        }
        Value joined = vector::ShuffleOp::create(
            b, loc, parts[0], parts[1], ArrayRef<int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
        aFrag.push_back(vector::BitCastOp::create(b, loc, fp8Type, joined));
        aScale.push_back(loadScale(aScaleBuf, add(aScaleRow[mi], block)));
      }
      for (int64_t ni = 0; ni < nFrags; ++ni) {
        Value n = add(add(waveCol, idx(ni * dim)), laneRow);
        const mfma::KRun &r = fp4.runs[0];
        Value kElem = add(mul(laneGroup, r.kPerGroup), idx(kk * mfmaK + r.kBase));
        Value data = load16(ldsB, add(mul(n, tileK / 8), divC(kElem, 8)));
        bFrag.push_back(vector::BitCastOp::create(b, loc, fp4Type, data));
        bScale.push_back(loadScale(bScaleBuf, add(bScaleRow[ni], block)));
      }
      for (int64_t mi = 0; mi < mFrags; ++mi) {
        for (int64_t ni = 0; ni < nFrags; ++ni) {
          Value &acc = accs[mi * nFrags + ni];
          if (bMajor)
            acc = amdgpu::ScaledMFMAOp::create(
                b, loc, accType, dim, dim, mfmaK, bFrag[ni], aFrag[mi], acc,
                bScale[ni], aScale[mi], /*scalesIdxA=*/0, /*scalesIdxB=*/0);
          else
            acc = amdgpu::ScaledMFMAOp::create(
                b, loc, accType, dim, dim, mfmaK, aFrag[mi], bFrag[ni], acc,
                aScale[mi], bScale[ni], /*scalesIdxA=*/0, /*scalesIdxB=*/0);
        }
      }
    }
    // The next iteration overwrites the tiles every wave is reading.
    gpu::BarrierOp::create(b, loc);
    scf::YieldOp::create(b, loc, accs);
  }

  // Epilogue: accumulator value a of a lane sits at (accRow(a), accCol) of
  // the MFMA's source-A x source-B product.
  auto bf16x4 = VectorType::get({4}, b.getBF16Type());
  for (int64_t mi = 0; mi < mFrags; ++mi) {
    for (int64_t ni = 0; ni < nFrags; ++ni) {
      Value acc = kLoop.getResult(mi * nFrags + ni);
      Value fragCol = add(waveCol, idx(ni * dim));
      for (int64_t a = 0; a < layout.accPerLane; a += 4) {
        // accRow(a) = (a / 4) * 4 * groups + 4 * g + a % 4.
        Value rowOfFour = add(mul(laneGroup, 4), idx((a / 4) * 4 * layout.groups));
        // A shuffle rather than extract_strided_slice: it lowers to LLVM
        // without the vector unrolling patterns.
        Value quad = vector::ShuffleOp::create(
            b, loc, acc, acc, ArrayRef<int64_t>{a, a + 1, a + 2, a + 3});
        Value quadBf16 = arith::TruncFOp::create(b, loc, bf16x4, quad);
        if (bMajor) {
          // Four consecutive output columns of one row: one 8-byte store.
          Value col = add(colBase, add(fragCol, rowOfFour));
          Value outIndex = add(mul(fragRoute[mi], hidden), col);
          vector::StoreOp::create(b, loc, quadBf16, outBuf, ValueRange{outIndex},
                                  /*nontemporal=*/false, llvm::MaybeAlign(8));
          continue;
        }
        Value col = add(colBase, add(fragCol, laneRow));
        for (int64_t j = 0; j < 4; ++j) {
          Value row = add(rowOfFour, idx(mi * dim + j));
          Value outIndex = add(mul(routeOfRow(row), hidden), col);
          Value value = vector::ExtractOp::create(b, loc, quadBf16, j);
          memref::StoreOp::create(b, loc, value, outBuf, ValueRange{outIndex});
        }
      }
    }
  }
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
      {"out", K::Buffer, "bf16", A::Write, "[num_routes, H]"},
      {"num_routes", K::I32, "i32", A::Value, "scalar"},
      {"num_sorted", K::I32, "i32", A::Value, "scalar (multiple of tile_m)"},
  };
  abi.gridX = "H / " + std::to_string(tile.getN());
  abi.gridY = "num_sorted / " + std::to_string(tile.getM());
  abi.gridZ = "1";
  abi.workgroupSize = static_cast<unsigned>(64 * tile.getWaves());
  return abi;
}

FailureOr<gpu::GPUModuleOp> buildW2Kernel(OpBuilder &builder, moe::W2Op op) {
  return W2Emitter(builder, op).emit();
}

} // namespace moec
