//===- GemmEmitter.cpp - shared machinery of the scaled-MFMA stages -------===//

#include "GemmEmitter.h"
#include "moec/abi/peer_protocol.h"

#include "mlir/Dialect/AMDGPU/IR/AMDGPUDialect.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <map>
#include <optional>
#include <tuple>

using namespace mlir;

namespace moec {

static mfma::Shape toLayoutShape(moe::MfmaShape shape) {
  return shape == moe::MfmaShape::m16n16k128 ? mfma::Shape::M16N16K128
                                              : mfma::Shape::M32N32K64;
}

GemmEmitter::GemmEmitter(OpBuilder &builder, Operation *op, moe::TileAttr tile)
    : KernelEmitter(builder, op), tile(tile), shape(toLayoutShape(tile.getMfma())),
      layout(mfma::shapeInfo(shape)),
      bMajor(tile.getOrientation() == moe::MfmaOrientation::b_major),
      stepK(tile.getK()),
      lanes(chip.wavefrontSize * tile.getWaves() * tile.getKWaves()),
      groupLanes(chip.wavefrontSize * tile.getWaves()) {}

Value GemmEmitter::groupLdsDword(int64_t base) {
  return kGroup ? add(idx(base), mul(kGroup, kGroupLdsDwords)) : idx(base);
}

Value GemmEmitter::swizzleChunk(Value chunk, Value row) {
  // chunk ^ (row mod P): a permutation of the row's chunks (an MXFP4 A row
  // has half the chunks of an FP8 one, a BF16 row twice). P is the largest
  // power of two dividing the chunks per row: all of them for a tile.k
  // step (a_swizzle needs tile.k / 16 to be a power of two), and one that
  // keeps every chunk in its row for a K tail such as 384.
  const int64_t chunks = stepK / 16 * 4 / aElementsPerDword();
  return arith::XOrIOp::create(b, loc, chunk,
                               remC(row, chunks & -chunks));
}

Value GemmEmitter::loadFp8Fragment(Value memref, Value rowDword,
                                   int64_t kOffset, Value swizzleRow,
                                   bool nontemporal) {
  const mfma::OperandLayout fp8 =
      mfma::operandLayout(shape, mfma::OperandFormat::Fp8);
  SmallVector<Value> parts;
  for (int run = 0; run < fp8.runCount; ++run) {
    const mfma::KRun &r = fp8.runs[run];
    // Runs are 16 bytes starting at a multiple of 16: one chunk each.
    Value kByte = add(mul(laneGroup, r.kPerGroup), idx(kOffset + r.kBase));
    Value chunk = divC(kByte, 16);
    if (swizzleRow)
      chunk = swizzleChunk(chunk, swizzleRow);
    parts.push_back(load16(memref, add(rowDword, mul(chunk, 4)), nontemporal));
  }
  Value joined = vector::ShuffleOp::create(
      b, loc, parts[0], parts[1], ArrayRef<int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
  return vector::BitCastOp::create(
      b, loc, VectorType::get({32}, b.getType<Float8E4M3FNType>()), joined);
}

Value GemmEmitter::loadScaleWords(Value memref, Value byteIndex,
                                  int64_t words) {
  Value bytes = vector::LoadOp::create(
      b, loc, VectorType::get({4 * words}, b.getI8Type()), memref,
      ValueRange{byteIndex}, /*nontemporal=*/false, llvm::MaybeAlign(4));
  return vector::BitCastOp::create(
      b, loc, VectorType::get({words}, b.getI32Type()), bytes);
}

Value GemmEmitter::scaleOperand(Value words, int64_t word, Value shiftI32) {
  Value picked = vector::ExtractOp::create(b, loc, words, ArrayRef<int64_t>{word});
  Value shifted = arith::ShRUIOp::create(b, loc, picked, shiftI32);
  return vector::BitCastOp::create(
      b, loc, VectorType::get({4}, b.getType<Float8E8M0FNUType>()),
      vector::BroadcastOp::create(b, loc, VectorType::get({1}, b.getI32Type()),
                                  shifted));
}

void GemmEmitter::emitLaneIds() {
  tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
  wave = divC(tid, chip.wavefrontSize);
  lane = remC(tid, chip.wavefrontSize);
  laneRow = remC(lane, layout.dim);   // mfma::operandRow
  laneGroup = divC(lane, layout.dim); // mfma::laneGroup
  groupTid = tid, groupWave = wave;
  if (tile.getKWaves() > 1) {
    kGroup = divC(wave, tile.getWaves());
    groupWave = remC(wave, tile.getWaves());
    groupTid = remC(tid, groupLanes);
  }
}

Block *GemmEmitter::emitExpertGuard(Value expertI32, int64_t localExperts) {
  Value inRange = arith::AndIOp::create(
      b, loc,
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, expertI32,
                            i32(0)),
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, expertI32,
                            i32(localExperts)));
  auto ifValid = scf::IfOp::create(b, loc, inRange, /*withElseRegion=*/false);
  if (!inTileLoop)
    gpu::ReturnOp::create(b, loc);
  b.setInsertionPointToStart(ifValid.thenBlock());
  return ifValid.thenBlock();
}

void GemmEmitter::applyTileHints(gpu::GPUFuncOp func) {
  if (int64_t waves = tile.getWavesPerEu())
    func->setAttr("rocdl.waves_per_eu", b.getI32IntegerAttr(waves));
  // SC bits have no spelling in the MLIR dialects: mark the weight loads
  // non-temporal and let the backend set the bits named here (see
  // kBCachePolicyAttr); `passthrough` becomes an LLVM function attribute.
  const target::CachePolicyBits &policy = chip.cachePolicy;
  int64_t bits = 0;
  switch (tile.getBCache()) {
  case moe::CachePolicy::sc0: bits = policy.sc0; break;
  case moe::CachePolicy::sc1: bits = policy.sc1; break;
  case moe::CachePolicy::sc0_sc1: bits = policy.sc0 | policy.sc1; break;
  default: break;
  }
  if (bits)
    func->setAttr("passthrough",
                  b.getArrayAttr({b.getStrArrayAttr(
                      {kBCachePolicyAttr, std::to_string(bits)})}));
}

SmallVector<GemmEmitter::CopySlot>
GemmEmitter::planCopy(int64_t rows, int64_t chunksPerRow,
                      function_ref<Value(Value row)> globalRowDword,
                      int64_t ldsBaseDword, bool swizzle, bool direct) {
  SmallVector<CopySlot> slots;
  const int64_t chunks = rows * chunksPerRow;
  // An LDS DMA writes a wave's chunks in lane order from one base: every
  // wave of a slot must copy one chunk per lane or none, so that the base
  // of an active wave is its lane 0's chunk. Tiles hold m * k / 16 chunks,
  // always a multiple of 128 for a valid #moe.tile.
  const int64_t waveSize = chip.wavefrontSize;
  assert((!direct || (!swizzle && chunks % waveSize == 0)) &&
         "a direct copy needs whole waves of unswizzled chunks");
  // The copy is the wave group's (the workgroup's with one group).
  Value waveChunk = direct ? mul(groupWave, waveSize) : Value();
  Value ldsBase = groupLdsDword(ldsBaseDword);
  for (int64_t first = 0; first < chunks; first += groupLanes) {
    Value chunk = add(groupTid, idx(first));
    Value active;
    Value row = divC(chunk, chunksPerRow);
    if (first + groupLanes > chunks) {
      // Lanes past the last chunk copy nothing; clamp their row so even the
      // address they compute stays inside the tile.
      active = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, chunk,
                                     idx(chunks));
      row = arith::MinUIOp::create(b, loc, row, idx(rows - 1));
    }
    Value col = remC(chunk, chunksPerRow);
    Value ldsCol = swizzle ? swizzleChunk(col, row) : col;
    Value ldsWaveDword;
    if (direct)
      ldsWaveDword = add(ldsBase, mul(add(waveChunk, idx(first)), 4));
    slots.push_back({add(globalRowDword(row), mul(col, 4)),
                     add(ldsBase,
                         add(mul(row, chunksPerRow * 4), mul(ldsCol, 4))),
                     active, ldsWaveDword});
  }
  return slots;
}

SmallVector<Value>
GemmEmitter::emitGemm(Value isShared, size_t accCount,
                      function_ref<GemmOperands(bool bFp8)> makeOperands) {
  if (!isShared)
    return emitKLoop(makeOperands(/*bFp8=*/false));
  SmallVector<Type> accTypes(
      accCount, VectorType::get({layout.accPerLane}, b.getF32Type()));
  auto branch = scf::IfOp::create(b, loc, accTypes, isShared,
                                  /*withElseRegion=*/true);
  for (bool fp8 : {true, false}) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(fp8 ? branch.thenBlock() : branch.elseBlock());
    scf::YieldOp::create(b, loc, emitKLoop(makeOperands(fp8)));
  }
  return SmallVector<Value>(branch.getResults().begin(),
                            branch.getResults().end());
}

void GemmEmitter::emitTileCopies(const GemmOperands &ops, Value k0,
                                 ArrayRef<Value> bRegs) {
  /// Runs `body` for a slot, under its scf.if when some lanes are idle.
  auto forSlot = [&](const CopySlot &slot, function_ref<void()> body) {
    if (!slot.active) {
      body();
      return;
    }
    auto guarded = scf::IfOp::create(b, loc, slot.active, false);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(guarded.thenBlock());
    body();
  };
  auto emitCopy = [&](ArrayRef<CopySlot> slots, Value src, Value kDwords,
                      bool nontemporal) {
    for (const CopySlot &slot : slots)
      forSlot(slot, [&] {
        Value data = load16(src, add(slot.globalDword, kDwords), nontemporal);
        store16(data, ops.lds, slot.ldsDword);
      });
  };
  if (tile.getAsyncA()) {
    // tile.async_a: each lane's 16-byte chunk goes from the raw buffer
    // straight into LDS (buffer_load_dwordx4 ... lds on gfx950). The wave's
    // chunks land at its lane 0's LDS index + 16 bytes * lane, which is
    // where planCopy puts them; padding rows past validBytes fail the
    // buffer's range check and write zeros, as the register path does.
    auto chunk = VectorType::get({4}, b.getI32Type());
    Value kDwords = divC(k0, aElementsPerDword());
    for (const CopySlot &slot : ops.aSlots)
      forSlot(slot, [&] {
        amdgpu::GatherToLDSOp::create(
            b, loc, ops.aBuffer, ValueRange{add(slot.globalDword, kDwords)},
            ops.lds, ValueRange{slot.ldsWaveDword}, TypeAttr::get(chunk));
      });
  } else {
    emitCopy(ops.aSlots, ops.aBuffer, divC(k0, aElementsPerDword()),
             /*nontemporal=*/false);
  }
  if (!bRegs.empty()) {
    for (size_t i = 0; i < ops.bSlots.size(); ++i)
      forSlot(ops.bSlots[i],
              [&] { store16(bRegs[i], ops.lds, ops.bSlots[i].ldsDword); });
  } else if (!tile.getBDirect()) {
    emitCopy(ops.bSlots, ops.bBuffer, divC(k0, ops.bFp8 ? 4 : 8),
             ops.bNontemporal);
  }
}

SmallVector<SmallVector<Value>>
GemmEmitter::loadDirectBFragments(const GemmOperands &ops, Value k0) {
  // tile.b_direct: this K step's weight fragments, per sub-step and B
  // fragment, straight from global memory into registers. Each lane reads
  // the same 16 bytes (FP4) or two runs of 16 (FP8) it would have read
  // from the LDS tile; all are requested here, before the barrier.
  const int64_t mfmaK = layout.k;
  const mfma::OperandLayout fp4 =
      mfma::operandLayout(shape, mfma::OperandFormat::Fp4);
  auto fp4Type = VectorType::get({32}, b.getType<Float4E2M1FNType>());
  SmallVector<SmallVector<Value>> directB;
  assert(ops.bRowDword.size() == ops.bTileRow.size() &&
         "b_direct needs bRowDword");
  for (int64_t kk = 0; kk < stepK / mfmaK; ++kk) {
    SmallVector<Value> &frags = directB.emplace_back();
    for (size_t bi = 0; bi < ops.bTileRow.size(); ++bi) {
      if (ops.bFp8) {
        frags.push_back(loadFp8Fragment(ops.bBuffer,
                                        add(ops.bRowDword[bi], divC(k0, 4)),
                                        kk * mfmaK, /*swizzleRow=*/Value(),
                                        ops.bNontemporal));
        continue;
      }
      const mfma::KRun &r = fp4.runs[0];
      Value kElem = add(add(k0, mul(laneGroup, r.kPerGroup)),
                        idx(kk * mfmaK + r.kBase));
      Value data = load16(ops.bBuffer, add(ops.bRowDword[bi], divC(kElem, 8)),
                          ops.bNontemporal);
      frags.push_back(vector::BitCastOp::create(b, loc, fp4Type, data));
    }
  }
  return directB;
}

SmallVector<Value> GemmEmitter::loadNextBTile(const GemmOperands &ops,
                                              Value k0, Value loopEnd) {
  // The last step reloads its own K range rather than reading past it:
  // rows beyond belong to another expert (possibly one nobody uploaded)
  // and would only cost bandwidth; a K tail is copied by its own step.
  const int64_t tileK = tile.getK();
  SmallVector<Value> bNext;
  Value kLast = arith::SubIOp::create(b, loc, loopEnd, idx(tileK));
  Value kNext = arith::MinUIOp::create(b, loc, add(k0, idx(tileK)), kLast);
  Value kNextDwords = divC(kNext, ops.bFp8 ? 4 : 8);
  for (const CopySlot &slot : ops.bSlots)
    bNext.push_back(load16(ops.bBuffer, add(slot.globalDword, kNextDwords),
                           ops.bNontemporal));
  return bNext;
}

void GemmEmitter::emitMfmaSubStep(const GemmOperands &ops, int64_t kk,
                                  ArrayRef<Value> aScale,
                                  ArrayRef<Value> bScale,
                                  ArrayRef<Value> directB,
                                  MutableArrayRef<Value> accs) {
  if (aBf16) {
    emitBf16SubStep(ops, kk, bScale, directB, accs);
    return;
  }
  // LDS rows of this step: stepK elements.
  const int64_t tileK = stepK;
  const int64_t mfmaK = layout.k, dim = layout.dim;
  const size_t mFrags = ops.aTileRow.size(), bFrags = ops.bTileRow.size();
  const int64_t scaleByte = kk * (layout.k / 32) % 4;
  const mfma::OperandLayout fp4 =
      mfma::operandLayout(shape, mfma::OperandFormat::Fp4);
  auto fp4Type = VectorType::get({32}, b.getType<Float4E2M1FNType>());
  auto accType = VectorType::get({layout.accPerLane}, b.getF32Type());
  SmallVector<Value> aFrag, bFrag;
  // Fragments follow the run table: each run is 16 bytes of one row.
  for (size_t mi = 0; mi < mFrags; ++mi) {
    if (aFp4) {
      // An MXFP4 A row is tile.k / 2 bytes; the lane's 32 elements are one
      // 16-byte chunk, as for the weights.
      const mfma::KRun &r = fp4.runs[0];
      Value kElem = add(mul(laneGroup, r.kPerGroup), idx(kk * mfmaK + r.kBase));
      Value chunk = divC(kElem, 32);
      if (tile.getASwizzle())
        chunk = swizzleChunk(chunk, ops.aTileRow[mi]);
      Value rowDword =
          add(groupLdsDword(ops.ldsADword), mul(ops.aTileRow[mi], tileK / 8));
      Value data = load16(ops.lds, add(rowDword, mul(chunk, 4)));
      aFrag.push_back(vector::BitCastOp::create(b, loc, fp4Type, data));
      continue;
    }
    Value rowDword =
        add(groupLdsDword(ops.ldsADword), mul(ops.aTileRow[mi], tileK / 4));
    aFrag.push_back(loadFp8Fragment(
        ops.lds, rowDword, kk * mfmaK,
        tile.getASwizzle() ? ops.aTileRow[mi] : Value()));
  }
  for (size_t bi = 0; bi < bFrags; ++bi) {
    if (!directB.empty()) {
      bFrag.push_back(directB[bi]);
    } else if (ops.bFp8) {
      Value rowDword =
          add(groupLdsDword(ops.ldsBDword), mul(ops.bTileRow[bi], tileK / 4));
      bFrag.push_back(loadFp8Fragment(ops.lds, rowDword, kk * mfmaK,
                                      /*swizzleRow=*/Value()));
    } else {
      const mfma::KRun &r = fp4.runs[0];
      Value kElem = add(mul(laneGroup, r.kPerGroup), idx(kk * mfmaK + r.kBase));
      Value rowDword =
          add(groupLdsDword(ops.ldsBDword), mul(ops.bTileRow[bi], tileK / 8));
      Value data = load16(ops.lds, add(rowDword, divC(kElem, 8)));
      bFrag.push_back(vector::BitCastOp::create(b, loc, fp4Type, data));
    }
  }
  for (size_t mi = 0; mi < mFrags; ++mi) {
    for (size_t bi = 0; bi < bFrags; ++bi) {
      Value &acc = accs[mi * bFrags + bi];
      if (bMajor)
        acc = amdgpu::ScaledMFMAOp::create(
            b, loc, accType, dim, dim, mfmaK, bFrag[bi], aFrag[mi], acc,
            bScale[bi], aScale[mi], /*scalesIdxA=*/scaleByte,
            /*scalesIdxB=*/scaleByte);
      else
        acc = amdgpu::ScaledMFMAOp::create(
            b, loc, accType, dim, dim, mfmaK, aFrag[mi], bFrag[bi], acc,
            aScale[mi], bScale[bi], /*scalesIdxA=*/scaleByte,
            /*scalesIdxB=*/scaleByte);
    }
  }
}

Value GemmEmitter::upconvertFp4Word(Value word, Value scaleCode) {
  // BF16 bits of E2M1 magnitude m (code & 7) times 2^(s - 127): m = 1
  // (0.5) has exponent s - 1 and no mantissa; m >= 2 is 2^(m/2 - 1) (1 +
  // (m & 1) / 2), exponent s - 1 + m / 2, mantissa bit 6 = m & 1; so with
  // base = (s - 1) << 7 the bits are 0 (m = 0), base (m = 1) or base +
  // (m << 6) (m >= 2), and the sign is bit 3 of the code moved to bit 15.
  // s in [2, 252] keeps every exponent in [1, 254]: normal and exact.
  auto i32x8 = VectorType::get({8}, b.getI32Type());
  auto splat = [&](Value scalar) {
    return vector::BroadcastOp::create(b, loc, i32x8, scalar);
  };
  auto constant = [&](ArrayRef<int32_t> values) -> Value {
    return arith::ConstantOp::create(
        b, loc, i32x8, DenseElementsAttr::get(i32x8, values));
  };
  auto constSplat = [&](int32_t value) {
    return constant(SmallVector<int32_t>(8, value));
  };
  Value clamped = arith::MinUIOp::create(
      b, loc, arith::MaxUIOp::create(b, loc, scaleCode, i32(2)), i32(252));
  Value base = arith::ShLIOp::create(
      b, loc, arith::SubIOp::create(b, loc, clamped, i32(1)), i32(7));
  Value isNan = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                      scaleCode, i32(255));
  Value nanBits =
      arith::SelectOp::create(b, loc, isNan, i32(0x7FC0), i32(0));
  Value codes = arith::AndIOp::create(
      b, loc,
      arith::ShRUIOp::create(b, loc, splat(word),
                             constant({0, 4, 8, 12, 16, 20, 24, 28})),
      constSplat(15));
  Value m = arith::AndIOp::create(b, loc, codes, constSplat(7));
  Value nonZero = arith::MinUIOp::create(b, loc, m, constSplat(1));
  Value atLeastTwo = arith::MinUIOp::create(
      b, loc, arith::ShRUIOp::create(b, loc, m, constSplat(1)), constSplat(1));
  Value magnitude = arith::MulIOp::create(
      b, loc, nonZero,
      arith::AddIOp::create(
          b, loc, splat(base),
          arith::MulIOp::create(
              b, loc, atLeastTwo,
              arith::ShLIOp::create(b, loc, m, constSplat(6)))));
  Value sign = arith::ShLIOp::create(
      b, loc, arith::AndIOp::create(b, loc, codes, constSplat(8)),
      constSplat(12));
  Value bits = arith::OrIOp::create(
      b, loc, arith::OrIOp::create(b, loc, magnitude, sign), splat(nanBits));
  Value halves = arith::TruncIOp::create(
      b, loc, VectorType::get({8}, b.getI16Type()), bits);
  return arith::BitcastOp::create(
      b, loc, VectorType::get({8}, b.getBF16Type()), halves);
}

void GemmEmitter::emitBf16SubStep(const GemmOperands &ops, int64_t kk,
                                  ArrayRef<Value> bScale,
                                  ArrayRef<Value> directB,
                                  MutableArrayRef<Value> accs) {
  assert(!ops.bFp8 && "BF16 A takes MXFP4 weights only");
  // LDS rows of this step: stepK elements.
  const int64_t tileK = stepK;
  const int64_t mfmaK = layout.k, dim = layout.dim;
  const mfma::ShapeInfo bf16 = mfma::shapeInfo(mfma::bf16ShapeOf(shape));
  // Four BF16 MFMAs of 8 K per lane group cover the lane's 32 K.
  constexpr int64_t kParts = 32 / mfma::kBf16ElementsPerLane;
  const size_t mFrags = ops.aTileRow.size(), bFrags = ops.bTileRow.size();
  const int64_t scaleByte = kk * (layout.k / 32) % 4;
  auto i32x4 = VectorType::get({4}, b.getI32Type());
  auto bf16x8 = VectorType::get({8}, b.getBF16Type());
  auto accType = VectorType::get({layout.accPerLane}, b.getF32Type());
  // A: the lane's row holds tile.k BF16 (tile.k / 2 dwords); its 32 K of
  // this sub-step are chunks kk * mfmaK / 8 + 4 g + j.
  SmallVector<SmallVector<Value>> aFrag(mFrags);
  for (size_t mi = 0; mi < mFrags; ++mi) {
    Value rowDword =
        add(groupLdsDword(ops.ldsADword), mul(ops.aTileRow[mi], tileK / 2));
    for (int64_t j = 0; j < kParts; ++j) {
      Value chunk = add(mul(laneGroup, kParts), idx(kk * mfmaK / 8 + j));
      if (tile.getASwizzle())
        chunk = swizzleChunk(chunk, ops.aTileRow[mi]);
      Value data = load16(ops.lds, add(rowDword, mul(chunk, 4)));
      aFrag[mi].push_back(vector::BitCastOp::create(b, loc, bf16x8, data));
    }
  }
  // B: the same 16 bytes as for the scaled MFMA (32 E2M1 codes of K
  // 32 g..32 g + 31, one scale), dword j up-converted for MFMA j.
  const mfma::KRun r =
      mfma::operandLayout(shape, mfma::OperandFormat::Fp4).runs[0];
  SmallVector<SmallVector<Value>> bFrag(bFrags);
  for (size_t bi = 0; bi < bFrags; ++bi) {
    Value words;
    if (!directB.empty()) {
      words = vector::BitCastOp::create(b, loc, i32x4, directB[bi]);
    } else {
      Value kElem = add(mul(laneGroup, r.kPerGroup), idx(kk * mfmaK + r.kBase));
      Value rowDword =
          add(groupLdsDword(ops.ldsBDword), mul(ops.bTileRow[bi], tileK / 8));
      words = load16(ops.lds, add(rowDword, divC(kElem, 8)));
    }
    Value scaleCode = arith::AndIOp::create(
        b, loc,
        arith::ShRUIOp::create(b, loc, bScale[bi], i32(8 * scaleByte)),
        i32(0xFF));
    for (int64_t j = 0; j < kParts; ++j)
      bFrag[bi].push_back(upconvertFp4Word(
          vector::ExtractOp::create(b, loc, words, ArrayRef<int64_t>{j}),
          scaleCode));
  }
  for (int64_t j = 0; j < kParts; ++j)
    for (size_t mi = 0; mi < mFrags; ++mi)
      for (size_t bi = 0; bi < bFrags; ++bi) {
        Value &acc = accs[mi * bFrags + bi];
        Value srcA = bMajor ? bFrag[bi][j] : aFrag[mi][j];
        Value srcB = bMajor ? aFrag[mi][j] : bFrag[bi][j];
        acc = amdgpu::MFMAOp::create(b, loc, accType, dim, dim, bf16.k,
                                     /*blocks=*/1, srcA, srcB, acc);
      }
}

void GemmEmitter::emitLdsDmaWait() {
  // The LDS DMA is counted by vmcnt, not lgkmcnt, and each wave's copies
  // must be complete before the barrier lets other waves read them.
  // Found with LLVM 22 (llvm-objdump-22 -d --mcpu=gfx950): the backend
  // waits on its own. gpu.barrier becomes a workgroup release fence +
  // s_barrier, and the fence waits for pending LDS DMA: a small kernel
  // with a DMA and an unrelated buffer load before the barrier gets
  // s_waitcnt vmcnt(0) before s_barrier, while its twin copying through
  // registers leaves the buffer load in flight across it. In this loop
  // the B tile's ds_write_b128 also waits vmcnt(0) after the DMA, since
  // the backend cannot tell its address from the DMA's destination. The
  // explicit wait states the requirement in the kernel IR rather than
  // relying on either; it merges into that same s_waitcnt vmcnt(0), and,
  // as a scheduling barrier, keeps tile.scale_prefetch's scale loads
  // after it, so they stay in flight across the barrier.
  amdgpu::MemoryCounterWaitOp::create(b, loc, /*load=*/b.getI32IntegerAttr(0),
                                      /*store=*/IntegerAttr(),
                                      /*ds=*/IntegerAttr(),
                                      /*exp=*/IntegerAttr(),
                                      /*tensor=*/IntegerAttr());
}

SmallVector<Value> GemmEmitter::emitKLoop(const GemmOperands &ops) {
  const int64_t tileK = tile.getK();
  const size_t mFrags = ops.aTileRow.size(), bFrags = ops.bTileRow.size();

  auto accType = VectorType::get({layout.accPerLane}, b.getF32Type());
  Value accZero = arith::ConstantOp::create(
      b, loc, accType, DenseElementsAttr::get(accType, 0.0f));
  SmallVector<Value> accInit(mFrags * bFrags, accZero);
  Value kFirst = ops.kBegin ? ops.kBegin : idx(0);
  Value kEnd = ops.kEnd ? ops.kEnd : idx(ops.depth);
  // With a K tail the loop runs the whole steps only, up to depth - tailK
  // (a multiple of tile.k); the tail's step follows it.
  const int64_t wholeEnd = ops.depth - ops.tailK;
  Value loopEnd = kEnd;
  if (ops.tailK)
    loopEnd = ops.kEnd ? Value(arith::MinUIOp::create(b, loc, ops.kEnd,
                                                      idx(wholeEnd)))
                       : idx(wholeEnd);
  // Scales are loaded by the word (see emitKStep); tile.k and the tail are
  // multiples of 128.
  assert(tileK % 128 == 0 && ops.depth % 128 == 0 && ops.tailK % 128 == 0 &&
         "scale rows and K steps must be whole words (the verifiers)");
  // With tile.b_prefetch the next K step's weights are loaded into
  // registers while this step's MFMAs run, and carried through the loop.
  // With a K tail a range may hold no whole step (split-K's last slice):
  // its first load then reads the last whole step, inside the rows, and
  // goes unused.
  const bool prefetch = tile.getBPrefetch();
  SmallVector<Value> loopInit = accInit;
  if (prefetch) {
    Value kLoad = ops.tailK ? Value(arith::MinUIOp::create(
                                  b, loc, kFirst,
                                  arith::SubIOp::create(b, loc, loopEnd,
                                                        idx(tileK))))
                            : kFirst;
    for (const CopySlot &slot : ops.bSlots)
      loopInit.push_back(load16(ops.bBuffer,
                                add(slot.globalDword,
                                    divC(kLoad, ops.bFp8 ? 4 : 8)),
                                ops.bNontemporal));
  }
  // Lane group g shifts its scale words right by 8 g bits (emitKStep).
  Value scaleShift = arith::IndexCastOp::create(b, loc, b.getI32Type(),
                                                mul(laneGroup, 8));
  SmallVector<Value> results;
  {
    auto kLoop = scf::ForOp::create(b, loc, kFirst, loopEnd, idx(tileK),
                                    loopInit);
    OpBuilder::InsertionGuard loopGuard(b);
    b.setInsertionPointToStart(kLoop.getBody());
    auto iterArgs = kLoop.getRegionIterArgs();
    SmallVector<Value> accs(iterArgs.begin(),
                            iterArgs.begin() + accInit.size());
    SmallVector<Value> bRegs(iterArgs.begin() + accInit.size(),
                             iterArgs.end());
    SmallVector<Value> yielded;
    SmallVector<Value> bNext =
        emitKStep(ops, kLoop.getInductionVar(), bRegs, loopEnd, scaleShift,
                  accs);
    yielded = accs;
    yielded.append(bNext.begin(), bNext.end());
    scf::YieldOp::create(b, loc, yielded);
    results.assign(kLoop.getResults().begin(),
                   kLoop.getResults().begin() + accInit.size());
  }
  if (!ops.tailK)
    return results;
  // The K tail: one step of tailK at K = depth - tailK, after the whole
  // steps, so every accumulator still adds its MFMAs in increasing K. Its
  // LDS rows are tailK wide and its copies read exactly the rows' last
  // tailK elements: nothing past a row. B is copied from global memory
  // (the prefetched registers hold a whole step).
  StepKScope tailStep(*this, ops.tailK);
  GemmOperands tailOps = ops;
  tailOps.aSlots = ops.aTailSlots;
  tailOps.bSlots = ops.bTailSlots;
  Value kTail = idx(wholeEnd);
  auto emitTail = [&](SmallVector<Value> &accs) {
    (void)emitKStep(tailOps, kTail, /*bRegs=*/{}, /*loopEnd=*/Value(),
                    scaleShift, accs);
  };
  if (!ops.kEnd) {
    emitTail(results);
    return results;
  }
  // A range [kBegin, kEnd) of whole steps (split-K's slices) takes the
  // tail when it ends past depth - tailK: the last slice, for the whole
  // workgroup.
  Value hasTail = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ugt,
                                        ops.kEnd, idx(wholeEnd));
  SmallVector<Type> accTypes(results.size(), accType);
  auto ifTail = scf::IfOp::create(b, loc, accTypes, hasTail,
                                  /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifTail.thenBlock());
    SmallVector<Value> accs = results;
    emitTail(accs);
    scf::YieldOp::create(b, loc, accs);
    b.setInsertionPointToStart(ifTail.elseBlock());
    scf::YieldOp::create(b, loc, results);
  }
  return SmallVector<Value>(ifTail.getResults().begin(),
                            ifTail.getResults().end());
}

SmallVector<Value> GemmEmitter::emitKStep(const GemmOperands &ops, Value k0,
                                          ArrayRef<Value> bRegs, Value loopEnd,
                                          Value scaleShift,
                                          MutableArrayRef<Value> accs) {
  emitTileCopies(ops, k0, bRegs);
  SmallVector<SmallVector<Value>> directB;
  if (tile.getBDirect())
    directB = loadDirectBFragments(ops, k0);
  if (tile.getAsyncA())
    emitLdsDmaWait();
  // Each lane's E8M0 scales of K sub-step kk: one byte per A and per B
  // fragment, for lane group g the one of K block k0 / 32 + g + kk * S of
  // its row (S = layout.k / 32 blocks per MFMA, g < S). As S divides 4,
  // that is byte (g + kk * S) % 4 of the row's word kk * S / 4 of this K
  // step, and the step (tile.k or the K tail) and the depth being
  // multiples of 128 make the K step's blocks whole, aligned words.
  // Shifted right by 8 g bits, the word holds the byte at (kk * S) % 4 in
  // every lane: the MFMA's op_sel picks it. So one load per row and K step
  // serves all its MFMAs, where a byte load served one MFMA. Scales come
  // from global memory, not LDS, so with tile.scale_prefetch they are
  // requested before the barrier and their latency overlaps the wait.
  const int64_t subSteps = stepK / layout.k;
  const int64_t blocksPerMfma = layout.k / 32;
  // Per A or B fragment, the row's scale words of this K step, in one
  // load of stepK / 32 bytes (a dwordx2 for k = 256); and per word the
  // lane's shifted copy. Both are created where they are first needed.
  const int64_t wordsPerStep = stepK / 128;
  std::map<std::pair<bool, size_t>, Value> scaleRows;
  std::map<std::tuple<bool, size_t, int64_t>, Value> scaleWords;
  auto scaleWord = [&](bool isA, size_t frag, int64_t kk) {
    Value &row = scaleRows[{isA, frag}];
    if (!row)
      row = loadScaleWords(isA ? ops.aScaleBuffer : ops.bScaleBuffer,
                           add(isA ? ops.aScaleRow[frag] : ops.bScaleRow[frag],
                               divC(k0, 32)),
                           wordsPerStep);
    const int64_t word = kk * blocksPerMfma / 4;
    Value &shifted = scaleWords[{isA, frag, word}];
    if (!shifted)
      shifted = aBf16 ? arith::ShRUIOp::create(
                            b, loc,
                            vector::ExtractOp::create(b, loc, row,
                                                      ArrayRef<int64_t>{word}),
                            scaleShift)
                      : scaleOperand(row, word, scaleShift);
    return shifted;
  };
  auto loadScales = [&](int64_t kk, SmallVector<Value> &aScale,
                        SmallVector<Value> &bScale) {
    for (size_t mi = 0; mi < ops.aScaleRow.size(); ++mi)
      aScale.push_back(scaleWord(/*isA=*/true, mi, kk));
    for (size_t bi = 0; bi < ops.bScaleRow.size(); ++bi)
      bScale.push_back(scaleWord(/*isA=*/false, bi, kk));
  };
  SmallVector<SmallVector<Value>> earlyA(subSteps), earlyB(subSteps);
  if (tile.getScalePrefetch())
    for (int64_t kk = 0; kk < subSteps; ++kk)
      loadScales(kk, earlyA[kk], earlyB[kk]);
  gpu::BarrierOp::create(b, loc);
  SmallVector<Value> bNext;
  if (!bRegs.empty())
    bNext = loadNextBTile(ops, k0, loopEnd);

  for (int64_t kk = 0; kk < subSteps; ++kk) {
    SmallVector<Value> aScale = earlyA[kk], bScale = earlyB[kk];
    if (!tile.getScalePrefetch())
      loadScales(kk, aScale, bScale);
    emitMfmaSubStep(ops, kk, aScale, bScale,
                    directB.empty() ? ArrayRef<Value>() : directB[kk], accs);
  }
  // The next step (or the epilogue) overwrites the tiles every wave is
  // reading.
  gpu::BarrierOp::create(b, loc);
  return bNext;
}

void GemmEmitter::reduceKGroups(ArrayRef<Value> accs, Value lds,
                                int64_t baseDword,
                                function_ref<void(ArrayRef<Value>)> body) {
  const int64_t groups = tile.getKWaves();
  if (groups == 1) {
    body(accs);
    return;
  }
  // Group g >= 1 writes accumulator i of its lane t at
  // [g - 1][i][t][accPerLane]: 16-byte stores and loads, lane-contiguous.
  const int64_t per = layout.accPerLane;
  const int64_t groupDwords = int64_t(accs.size()) * groupLanes * per;
  auto at = [&](Value group, size_t i, int64_t a) {
    return add(add(idx(baseDword + int64_t(i) * groupLanes * per + a),
                   mul(group, groupDwords)),
               mul(groupTid, per));
  };
  auto f32x4 = VectorType::get({4}, b.getF32Type());
  auto i32x4 = VectorType::get({4}, b.getI32Type());
  Value isFirst = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                        kGroup, idx(0));
  {
    Value isOther = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne,
                                          kGroup, idx(0));
    auto ifOther = scf::IfOp::create(b, loc, isOther, false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOther.thenBlock());
    Value slot = arith::SubIOp::create(b, loc, kGroup, idx(1));
    for (auto [i, acc] : llvm::enumerate(accs))
      for (int64_t a = 0; a < per; a += 4) {
        Value quad = vector::ShuffleOp::create(
            b, loc, acc, acc, ArrayRef<int64_t>{a, a + 1, a + 2, a + 3});
        store16(vector::BitCastOp::create(b, loc, i32x4, quad), lds,
                at(slot, i, a));
      }
  }
  gpu::BarrierOp::create(b, loc);
  auto ifFirst = scf::IfOp::create(b, loc, isFirst, false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(ifFirst.thenBlock());
  SmallVector<Value> sums(accs.begin(), accs.end());
  for (auto [i, sum] : llvm::enumerate(sums)) {
    // Quads of group 0 + group 1 + ... in that order.
    SmallVector<Value> quads;
    for (int64_t a = 0; a < per; a += 4) {
      Value quad = vector::ShuffleOp::create(
          b, loc, sum, sum, ArrayRef<int64_t>{a, a + 1, a + 2, a + 3});
      for (int64_t g = 1; g < groups; ++g)
        quad = arith::AddFOp::create(
            b, loc, quad,
            vector::BitCastOp::create(b, loc, f32x4,
                                      load16(lds, at(idx(g - 1), i, a))));
      quads.push_back(quad);
    }
    Value joined = quads[0];
    for (size_t q = 1; q < quads.size(); ++q) {
      SmallVector<int64_t> mask;
      for (int64_t e = 0; e < int64_t(4 * (q + 1)); ++e)
        mask.push_back(e);
      joined = vector::ShuffleOp::create(b, loc, joined, quads[q], mask);
    }
    sum = joined;
  }
  body(sums);
}

Value GemmEmitter::loadColumnBias(Value bias, Value first, Value fragCol) {
  auto f32 = b.getF32Type();
  auto accType = VectorType::get({layout.accPerLane}, f32);
  if (!bMajor) {
    // a_major: every value of the lane's accumulator is column accCol.
    Value value = memref::LoadOp::create(
        b, loc, bias, ValueRange{add(first, add(fragCol, laneRow))});
    return vector::BroadcastOp::create(b, loc, accType, value);
  }
  // b_major: runs of four consecutive columns, one 16-byte load each,
  // concatenated in accumulator order.
  auto f32x4 = VectorType::get({4}, f32);
  Value result;
  for (int64_t a = 0; a < layout.accPerLane; a += 4) {
    Value col = add(fragCol, add(mul(laneGroup, 4),
                                 idx((a / 4) * 4 * layout.groups)));
    Value quad = vector::LoadOp::create(b, loc, f32x4, bias,
                                        ValueRange{add(first, col)},
                                        /*nontemporal=*/false,
                                        llvm::MaybeAlign(16));
    if (!result) {
      result = quad;
      continue;
    }
    SmallVector<int64_t> mask;
    for (int64_t i = 0; i < a + 4; ++i)
      mask.push_back(i);
    result = vector::ShuffleOp::create(b, loc, result, quad, mask);
  }
  return result;
}

FailureOr<gpu::GPUModuleOp>
GemmEmitter::emitKernel(StringRef name, ArrayRef<Type> argTypes,
                        const KernelAbi &abi, int64_t ldsDwords,
                        function_ref<void(gpu::GPUFuncOp)> body) {
  OpBuilder::InsertionGuard guard(b);
  FailureOr<gpu::GPUFuncOp> func = createKernel(name, argTypes, abi, ldsDwords);
  if (failed(func))
    return failure();
  applyTileHints(*func);
  body(*func);
  return (*func)->getParentOfType<gpu::GPUModuleOp>();
}

SmallVector<Type> GemmEmitter::routeListArgTypes(moe::ProblemAttr problem,
                                                 bool shared,
                                                 int64_t expertWeights,
                                                 ArrayRef<Type> rest,
                                                 int64_t biasColumns) {
  auto [weights, weightScales] =
      expertWeightTypes(problem, shared, expertWeights);
  SmallVector<Type> argTypes = {
      globalBuffer(kRouteIndexedExtent, b.getI32Type()),
      globalBuffer(kRouteIndexedExtent, b.getI8Type()),
      weights,
      weightScales,
      globalBuffer(kRouteIndexedExtent, b.getI32Type()),
      globalBuffer(kRouteIndexedExtent, b.getI32Type())};
  argTypes.append(rest.begin(), rest.end());
  if (shared) {
    argTypes.push_back(globalBuffer(expertWeights / 4, b.getI32Type()));
    argTypes.push_back(globalBuffer(expertWeights / 32, b.getI8Type()));
  }
  if (biasColumns > 0)
    argTypes.push_back(
        globalBuffer(problem.getLocalExperts() * biasColumns, b.getF32Type()));
  return argTypes;
}

std::pair<Type, Type> GemmEmitter::expertWeightTypes(moe::ProblemAttr problem,
                                                    bool shared,
                                                    int64_t expertWeights) {
  const int64_t routedExperts = problem.getLocalExperts() - (shared ? 1 : 0);
  return {globalBuffer(routedExperts * expertWeights / 8, b.getI32Type()),
          globalBuffer(routedExperts * expertWeights / 32, b.getI8Type())};
}

Type GemmEmitter::peerControlType(moe::ProblemAttr problem) {
  return globalBuffer(
      peer::controlWords(problem.getLocalExperts(), problem.getEp()),
      b.getI32Type());
}

SmallVector<Value> GemmEmitter::fragmentARows(const ExpertTile &rows) {
  SmallVector<Value> fragARow;
  for (int64_t mi = 0; mi < tile.getM() / layout.dim; ++mi)
    fragARow.push_back(rows.aRow(add(laneRow, idx(mi * layout.dim))));
  return fragARow;
}

GemmEmitter::GemmOperands
GemmEmitter::beginGemmOperands(const ExpertTile &rows, bool bFp8, int64_t depth) {
  GemmOperands ops;
  ops.aBuffer = rows.aBuf;
  ops.aScaleBuffer = rows.aScaleBuf;
  ops.bBuffer = asBuffer(bFp8 ? rows.bShared : rows.b, Value());
  ops.bScaleBuffer = asBuffer(bFp8 ? rows.bSharedScale : rows.bScale, Value());
  ops.lds = rows.lds;
  ops.ldsADword = 0;
  // The A tile: FP8 bytes (MXFP4 keeps that size), or BF16.
  ops.ldsBDword = tile.getM() * tile.getK() / (aBf16 ? 2 : 4);
  ops.depth = depth;
  ops.kBegin = rows.kBegin;
  ops.kEnd = rows.kEnd;
  ops.bNontemporal = tile.getBCache() != moe::CachePolicy::cached;
  ops.bFp8 = bFp8;
  return ops;
}

SmallVector<GemmEmitter::CopySlot>
GemmEmitter::planACopy(const ExpertTile &rows, int64_t depth) {
  // A rows are stepK FP8 bytes: stepK / 16 chunks of 16 bytes; MXFP4
  // rows half that, BF16 rows twice.
  const int64_t elementsPerDword = aElementsPerDword();
  return planCopy(
      tile.getM(), stepK / (4 * elementsPerDword),
      [&](Value row) { return mul(rows.aRow(row), depth / elementsPerDword); },
      /*ldsBaseDword=*/0, /*swizzle=*/tile.getASwizzle(),
      /*direct=*/tile.getAsyncA());
}

void GemmEmitter::addAFragments(GemmOperands &ops, ArrayRef<Value> fragARow,
                                int64_t depth) {
  for (auto [mi, aRow] : llvm::enumerate(fragARow)) {
    ops.aTileRow.push_back(add(laneRow, idx(int64_t(mi) * layout.dim)));
    // BF16 A rows have no scales.
    if (!aBf16)
      ops.aScaleRow.push_back(mul(aRow, depth / 32));
  }
}

SmallVector<Value>
GemmEmitter::emitExpertGemm(const ExpertTile &rows, bool shared,
                            int64_t localExperts, size_t accCount,
                            function_ref<GemmOperands(bool bFp8)> makeOperands) {
  Value isShared;
  if (shared)
    isShared = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                     rows.expertI32, i32(localExperts - 1));
  return emitGemm(isShared, accCount, makeOperands);
}

void GemmEmitter::forEachAccQuad(
    int64_t mFrags, int64_t nFrags, Value waveCol,
    function_ref<Value(int64_t mi, int64_t ni)> fragment,
    function_ref<void(int64_t mi, Value fragCol, Value rowOfFour, Value quad)>
        body) {
  for (int64_t mi = 0; mi < mFrags; ++mi) {
    for (int64_t ni = 0; ni < nFrags; ++ni) {
      Value values = fragment(mi, ni);
      Value fragCol = add(waveCol, idx(ni * layout.dim));
      for (int64_t a = 0; a < layout.accPerLane; a += 4) {
        // accRow(a) = (a / 4) * 4 * groups + 4 * g + a % 4.
        Value rowOfFour =
            add(mul(laneGroup, 4), idx((a / 4) * 4 * layout.groups));
        Value quad = vector::ShuffleOp::create(
            b, loc, values, values, ArrayRef<int64_t>{a, a + 1, a + 2, a + 3});
        body(mi, fragCol, rowOfFour, quad);
      }
    }
  }
}

void GemmEmitter::forEachLaneItem(int64_t count,
                                  function_ref<void(Value)> body) {
  for (int64_t first = 0; first < count; first += lanes) {
    Value item = add(tid, idx(first));
    std::optional<OpBuilder::InsertionGuard> tail;
    if (first + lanes > count) {
      Value active = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult,
                                           item, idx(count));
      auto ifActive = scf::IfOp::create(b, loc, active, false);
      tail.emplace(b);
      b.setInsertionPointToStart(ifActive.thenBlock());
    }
    body(item);
  }
}

} // namespace moec
