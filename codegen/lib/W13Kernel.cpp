//===- W13Kernel.cpp - moe.w13 -> gpu.func --------------------------------===//
///
/// \file
/// Builds the W13 kernel: FP8 or MXFP4 (A4W4) token rows x MXFP4 gate and up
/// rows with scaled MFMA (the shared GemmEmitter), then in the epilogue the
/// gated activation and 1x32 quantisation of the intermediate, to FP8 or,
/// with problem.output f4E2M1FN, to MXFP4 by AITER's rule.
///
/// A workgroup owns tile.m sorted routes (one expert) by tile.n intermediate
/// columns, so it multiplies 2 * tile.n weight rows: the gate and the up row
/// of each column. After the K loop every lane applies the activation to
/// its gate/up accumulator pairs and stages the FP32 tile in LDS (reusing
/// the GEMM tiles); after a barrier each lane takes one 32-column block of
/// one row, finds its amax, derives the E8M0 scale and writes 32 FP8 bytes
/// and one scale byte to the route's row.
///
//===----------------------------------------------------------------------===//

#include "GemmEmitter.h"
#include "PeerBuffer.h"
#include "moec/Codegen/KernelBuilders.h"
#include "moec/Dialect/Moe/MoeDialect.h"
#include "moec/abi/peer_protocol.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;

namespace moec {
namespace {

enum W13Arg : unsigned {
  kA, kAScale, kB, kBScale, kSortedRoutes, kTileExperts, kOut, kOutScale,
  kNumTokens, kNumSorted, kW13ArgCount,
  // Only with a shared FP8 expert, after the others.
  kBShared = kW13ArgCount, kBSharedScale
  // With `bias` the FP32 bias is the last argument.
};

/// Argument positions of the fused stage 1 (`peer`): kPSymmetric is this
/// rank's symmetric buffer, and after kPeerFirst come problem.ep symmetric
/// buffers, one per rank (their regions: PeerBuffer.h).
enum W13PeerArg : unsigned {
  kPA, kPAScale, kPTopkIds, kPTopkWeights, kPB, kPBScale, kPOut, kPOutScale,
  kPSymmetric, kPNumTokens, kPRank, kPeerFirst
};

class W13Emitter : GemmEmitter {
public:
  W13Emitter(OpBuilder &builder, moe::W13Op op)
      : GemmEmitter(builder, op, op.getTile()), op(op),
        problem(op.getProblem()),
        outFp4(problem.getOutputFormat() == moe::ActivationFormat::fp4),
        outBf16(problem.getOutputFormat() == moe::ActivationFormat::bf16) {
    aFp4 = problem.getActivationFormat() == moe::ActivationFormat::fp4;
    aBf16 = problem.getActivationFormat() == moe::ActivationFormat::bf16;
    // tile.k_waves: each wave group's A and B tiles, as W13Op::getLdsBytes
    // counts them (the B tile at its larger, FP8, size with a shared
    // expert, whose K loop the same groups run).
    const int64_t bRowBytes =
        op.getSharedFp8Expert() ? tile.getK() : tile.getK() / 2;
    kGroupLdsDwords =
        (tile.getM() * tile.getK() * (aBf16 ? 2 : 1) +
         (tile.getBDirect() ? 0 : 2 * tile.getN() * bRowBytes)) /
        4;
  }

  FailureOr<gpu::GPUModuleOp> emit();

private:
  /// Where the rows of one tile come from and go to (the first
  /// intermediate column is colBase).
  struct TileRows : ExpertTile {
    /// Per tile row (index): the output row to write; past-the-end rows
    /// give an out-of-range row, so their stores are dropped.
    function_ref<Value(Value)> outRow;
    Value outBuf, outScaleBuf;
    /// With `bias`: the f32 [local experts, 2I] bias as a raw buffer, else
    /// null.
    Value bias;
  };

  /// The argument types of the fused stage 1, in W13PeerArg order.
  SmallVector<Type> peerArgTypes(moe::PeerTransportAttr peer);
  /// The route-list kernel: one tile per workgroup from the sorted routes.
  void emitBody(gpu::GPUFuncOp func);
  /// The fused MegaMoE stage 1 (`peer`): dispatch, then W13 tiles.
  void emitPeerBody(gpu::GPUFuncOp func);
  /// Stage 1's arrival: thread 0 reads the launch epoch from the control
  /// word (peer::kEpoch), then takes the workgroup's ticket and arrives;
  /// the launch's last arrival advances the epoch. Returns (role, epoch),
  /// both broadcast to the workgroup through LDS.
  std::pair<Value, Value> emitStage1Arrival(Value control, Value lds,
                                            const PeerLds &words);
  /// GEMM, activation and quantisation of one tile.
  void emitTile(const TileRows &tileRows);
  /// Quantises the activation staged in LDS (FP32 [tile.m][tile.n]) to
  /// BF16 rows (A16W4) or
  /// FP8 1x32 blocks of the tile's output rows.
  void storeQuantised(const TileRows &rows);
  /// Physical W13 row of logical intermediate column `column` (an index),
  /// for the gate row or the up row.
  Value physicalRow(Value column, bool up);
  /// silu(min(g, L)) * clamp(u, -L, L) elementwise on FP32 vectors, or
  /// with gpt_oss_swiglu g' * sigmoid(1.702 g') * (u' + 1) of the clamped
  /// g', u'.
  Value gatedActivation(Value gate, Value up);
  /// With situ_v2: B tanh(g / B) sigmoid(g) * LB tanh(u / LB) of the
  /// clamped g, u (B = situ_beta, LB = situ_linear_beta).
  Value situV2(Value gate, Value up, function_ref<Value(float)> splat);

  moe::W13Op op;
  moe::ProblemAttr problem;
  /// The intermediate is MXFP4 (E2M1 pairs, I / 2 bytes a row), not FP8.
  bool outFp4;
  /// The intermediate is BF16 (A16W4: 2 I bytes a row, no scales).
  bool outBf16;
};

FailureOr<gpu::GPUModuleOp> W13Emitter::emit() {
  if (moe::PeerTransportAttr peer = op.getPeerAttr()) {
    if (failed(checkSymmetricLayout(
            op, peer::bufferLayout(problem.getLocalExperts(), problem.getEp(),
                                   peer.getReceiveRows(problem.getLocalExperts()),
                                   problem.getHidden(), problem.getTopK(),
                                   peer.getMaxTokens()))))
      return failure();
    return emitKernel(op.getSymName(), peerArgTypes(peer), getW13KernelAbi(op),
                      op.getLdsBytes() / 4,
                      [&](gpu::GPUFuncOp func) { emitPeerBody(func); });
  }
  const int64_t hidden = problem.getHidden();
  const int64_t inter = problem.getIntermediate();
  // After the shared prefix: out, out_scale, num_tokens, num_sorted.
  SmallVector<Type> argTypes = routeListArgTypes(
      problem, op.getSharedFp8Expert(), 2 * inter * hidden,
      {globalBuffer(kRouteIndexedExtent, b.getI32Type()),
       globalBuffer(kRouteIndexedExtent, b.getI8Type()), b.getI32Type(),
       b.getI32Type()},
      op.getBias() ? 2 * inter : 0);
  return emitKernel(op.getSymName(), argTypes, getW13KernelAbi(op),
                    op.getLdsBytes() / 4,
                    [&](gpu::GPUFuncOp func) { emitBody(func); });
}

SmallVector<Type> W13Emitter::peerArgTypes(moe::PeerTransportAttr peer) {
  const int64_t hidden = problem.getHidden();
  const int64_t inter = problem.getIntermediate();
  const int64_t rows = peer.getReceiveRows(problem.getLocalExperts());
  SmallVector<Type> argTypes(kPeerFirst);
  argTypes[kPA] = globalBuffer(kRouteIndexedExtent, b.getI32Type());
  argTypes[kPAScale] = globalBuffer(kRouteIndexedExtent, b.getI8Type());
  argTypes[kPTopkIds] = globalBuffer(kRouteIndexedExtent, b.getI32Type());
  argTypes[kPTopkWeights] = globalBuffer(kRouteIndexedExtent, b.getF32Type());
  std::tie(argTypes[kPB], argTypes[kPBScale]) =
      expertWeightTypes(problem, op.getSharedFp8Expert(), 2 * inter * hidden);
  Type symmetric = symmetricBufferType(b.getContext());
  argTypes[kPOut] = globalBuffer(rows * inter / 4, b.getI32Type());
  argTypes[kPOutScale] = globalBuffer(rows * inter / 32, b.getI8Type());
  argTypes[kPSymmetric] = symmetric;
  argTypes[kPNumTokens] = b.getI32Type();
  argTypes[kPRank] = b.getI32Type();
  argTypes.append(problem.getEp(), symmetric);
  return argTypes;
}

Value W13Emitter::physicalRow(Value column, bool up) {
  const int64_t inter = problem.getIntermediate();
  const int64_t interleave = op.getGateUpInterleave();
  if (interleave == 0)
    return up ? add(column, idx(inter)) : column;
  // Blocks of G gate rows then G up rows.
  Value row = add(mul(divC(column, interleave), 2 * interleave),
                  remC(column, interleave));
  return up ? add(row, idx(interleave)) : row;
}

Value W13Emitter::gatedActivation(Value gate, Value up) {
  auto type = cast<VectorType>(gate.getType());
  auto splat = [&](float value) {
    return arith::ConstantOp::create(b, loc, type,
                                     DenseElementsAttr::get(type, value));
  };
  const float limit = op.getSwigluLimit().convertToFloat();
  if (limit > 0.0f) {
    gate = arith::MinimumFOp::create(b, loc, gate, splat(limit));
    up = arith::MaximumFOp::create(
        b, loc, arith::MinimumFOp::create(b, loc, up, splat(limit)),
        splat(-limit));
  }
  if (op.getSituV2())
    return situV2(gate, up, splat);
  // g * sigmoid(alpha * g) = g / (1 + exp(-alpha * g)), with the exp as
  // exp2(-alpha * g * log2(e)); alpha = 1 for SiLU, 1.702 for GPT-OSS.
  const bool gptOss = op.getGptOssSwiglu();
  const float alpha = gptOss ? 1.702f : 1.0f;
  Value scaled =
      arith::MulFOp::create(b, loc, gate, splat(-1.4426950408889634f * alpha));
  Value denominator =
      arith::AddFOp::create(b, loc, splat(1.0f), math::Exp2Op::create(b, loc, scaled));
  Value silu = arith::DivFOp::create(b, loc, gate, denominator);
  if (gptOss)
    up = arith::AddFOp::create(b, loc, up, splat(1.0f));
  return arith::MulFOp::create(b, loc, silu, up);
}

Value W13Emitter::situV2(Value gate, Value up,
                         function_ref<Value(float)> splat) {
  // tanh(x) = (1 - e) / (1 + e) with e = exp2(-2 log2(e) x). x is first
  // raised to -20 (tanh(-20) is -1 in FP32), so e stays finite; AITER's
  // kernels take |x| and restore the sign, the same value to an ulp.
  auto tanhOf = [&](Value x) {
    x = arith::MaximumFOp::create(b, loc, x, splat(-20.0f));
    Value e = math::Exp2Op::create(
        b, loc, arith::MulFOp::create(b, loc, x, splat(-2.8853900817779268f)));
    return arith::DivFOp::create(
        b, loc, arith::SubFOp::create(b, loc, splat(1.0f), e),
        arith::AddFOp::create(b, loc, splat(1.0f), e));
  };
  const float beta = op.getSituBeta().convertToFloat();
  const float linearBeta = op.getSituLinearBeta().convertToFloat();
  // B * tanh(g / B) * sigmoid(g), sigmoid(g) = 1 / (1 + exp2(-g log2(e))).
  Value gateTanh = arith::MulFOp::create(
      b, loc, splat(beta),
      tanhOf(arith::MulFOp::create(b, loc, gate, splat(1.0f / beta))));
  Value sigmoidDenominator = arith::AddFOp::create(
      b, loc, splat(1.0f),
      math::Exp2Op::create(
          b, loc,
          arith::MulFOp::create(b, loc, gate, splat(-1.4426950408889634f))));
  Value gateAct = arith::DivFOp::create(b, loc, gateTanh, sigmoidDenominator);
  // LB * tanh(u / LB).
  Value upAct = arith::MulFOp::create(
      b, loc, splat(linearBeta),
      tanhOf(arith::MulFOp::create(b, loc, up, splat(1.0f / linearBeta))));
  return arith::MulFOp::create(b, loc, gateAct, upAct);
}

void W13Emitter::emitBody(gpu::GPUFuncOp func) {
  const int64_t hidden = problem.getHidden();
  const int64_t inter = problem.getIntermediate();
  const int64_t topK = problem.getTopK();
  const int64_t tileM = tile.getM(), tileN = tile.getN();
  auto arg = [&](W13Arg which) { return func.getArgument(which); };

  Value numTokens = arg(kNumTokens), numSorted = arg(kNumSorted);
  Value numRoutes = arith::MulIOp::create(b, loc, numTokens, i32(topK));
  Value numTiles = arith::DivUIOp::create(b, loc, numSorted, i32(tileM));
  TileRows rows;
  rows.aBuf = asBuffer(arg(kA), bytesOf(numTokens, hidden * 4 /
                                                      aElementsPerDword()));
  rows.aScaleBuf = asBuffer(arg(kAScale), bytesOf(numTokens, hidden / 32));
  Value sortedBuf = asBuffer(arg(kSortedRoutes), bytesOf(numSorted, 4));
  Value tileExpertBuf = asBuffer(arg(kTileExperts), bytesOf(numTiles, 4));
  rows.outBuf = asBuffer(
      arg(kOut),
      bytesOf(numRoutes, outFp4 ? inter / 2 : outBf16 ? 2 * inter : inter));
  rows.outScaleBuf = asBuffer(arg(kOutScale), bytesOf(numRoutes, inter / 32));
  rows.lds = func.getWorkgroupAttributions()[0];
  rows.b = arg(kB);
  rows.bScale = arg(kBScale);
  if (op.getSharedFp8Expert()) {
    rows.bShared = arg(kBShared);
    rows.bSharedScale = arg(kBSharedScale);
  }
  if (op.getBias())
    rows.bias = asBuffer(
        func.getArgument(func.getNumArguments() - 1),
        i64(problem.getLocalExperts() * 2 * inter * 4));

  emitLaneIds();
  auto [nTile, mTile] = emitTileIds(inter / tileN, numTiles);
  rows.expertI32 =
      memref::LoadOp::create(b, loc, tileExpertBuf, ValueRange{mTile});
  emitExpertGuard(rows.expertI32, problem.getLocalExperts());
  rows.expert = toIndex(rows.expertI32);
  rows.colBase = mul(nTile, tileN);
  Value rowBase = mul(mTile, tileM);
  auto routeOfRow = [&](Value row) {
    return toIndex(memref::LoadOp::create(b, loc, sortedBuf,
                                          ValueRange{add(rowBase, row)}));
  };
  auto tokenOfRow = [&](Value row) { return divC(routeOfRow(row), topK); };
  rows.aRow = tokenOfRow;
  rows.outRow = routeOfRow;
  emitTile(rows);
  emitEndOfTile();
}

void W13Emitter::emitTile(const TileRows &tileRows) {
  const int64_t hidden = problem.getHidden();
  TileRows rows = tileRows;
  if (kGroup) {
    // tile.k_waves: wave group g reduces the hidden range [g H/W, (g+1) H/W).
    const int64_t slice = hidden / tile.getKWaves();
    rows.kBegin = mul(kGroup, slice);
    rows.kEnd = add(rows.kBegin, idx(slice));
  }
  const int64_t inter = problem.getIntermediate();
  const int64_t tileM = tile.getM(), tileN = tile.getN(), tileK = tile.getK();
  const int64_t waveN = tile.getWaveN();
  const int64_t dim = layout.dim;
  Value lds = rows.lds, expert = rows.expert, colBase = rows.colBase;

  const int64_t mFrags = tileM / dim, nFrags = waveN / dim;
  SmallVector<Value> fragARow = fragmentARows(rows);
  Value waveCol = mul(groupWave, waveN);

  auto makeOperands = [&](bool bFp8) {
    GemmOperands ops = beginGemmOperands(rows, bFp8, hidden);
    // The shared expert's tensor holds just its own 2I rows.
    Value expertRows = bFp8 ? idx(0) : mul(expert, 2 * inter);
    const int64_t bRowDwords = bFp8 ? hidden / 4 : hidden / 8;
    // B tile rows [0, tileN) are gate rows, [tileN, 2 tileN) up rows.
    ops.aSlots = planACopy(rows, hidden);
    ops.bSlots = planCopy(
        2 * tileN, bFp8 ? tileK / 16 : tileK / 32,
        [&](Value row) {
          Value isUp = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge,
                                             row, idx(tileN));
          Value column = add(
              colBase,
              arith::SelectOp::create(
                  b, loc, isUp, arith::SubIOp::create(b, loc, row, idx(tileN)),
                  row));
          Value physical = arith::SelectOp::create(
              b, loc, isUp, physicalRow(column, /*up=*/true),
              physicalRow(column, /*up=*/false));
          return mul(add(expertRows, physical), bRowDwords);
        },
        ops.ldsBDword);
    addAFragments(ops, fragARow, hidden);
    for (bool up : {false, true}) {
      for (int64_t ni = 0; ni < nFrags; ++ni) {
        Value localCol = add(add(waveCol, idx(ni * dim)), laneRow);
        ops.bTileRow.push_back(up ? add(localCol, idx(tileN)) : localCol);
        Value physical = physicalRow(add(colBase, localCol), up);
        ops.bScaleRow.push_back(mul(add(expertRows, physical), hidden / 32));
        ops.bRowDword.push_back(mul(add(expertRows, physical), bRowDwords));
      }
    }
    return ops;
  };
  SmallVector<Value> gemmAccs =
      emitExpertGemm(rows, op.getSharedFp8Expert(), problem.getLocalExperts(),
                     mFrags * 2 * nFrags, makeOperands);
  // With tile.k_waves the groups' partial sums meet in group 0, through LDS
  // after the activation's staging area (which group 0 then writes); all
  // groups quantise below. The epilogue's registers are group 0's, and the
  // quantisation, the larger part, is spread over every lane anyway.
  reduceKGroups(gemmAccs, lds, tileM * tileN, [&](ArrayRef<Value> accs) {
    // The bias rows of the tile's columns: gate column j at [expert, j], up
    // column j at [expert, I + j], whatever the interleave of the weights.
    // Per N fragment they are the same for every M fragment.
    SmallVector<Value> gateBias, upBias;
    if (rows.bias) {
      Value gateFirst = add(mul(expert, 2 * inter), colBase);
      Value upFirst = add(gateFirst, idx(inter));
      for (int64_t ni = 0; ni < nFrags; ++ni) {
        Value fragCol = add(waveCol, idx(ni * dim));
        gateBias.push_back(loadColumnBias(rows.bias, gateFirst, fragCol));
        upBias.push_back(loadColumnBias(rows.bias, upFirst, fragCol));
      }
    }

    // Activation, staged in LDS as FP32 [tileM][tileN] over the GEMM tiles
    // (the K loop ended with a barrier, so nobody reads them any more).
    auto activation = [&](int64_t mi, int64_t ni) -> Value {
      Value gate = accs[mi * 2 * nFrags + ni];
      Value up = accs[mi * 2 * nFrags + nFrags + ni];
      if (rows.bias) {
        // AITER's order: bias on the FP32 accumulators, then the clamp.
        gate = arith::AddFOp::create(b, loc, gate, gateBias[ni]);
        up = arith::AddFOp::create(b, loc, up, upBias[ni]);
      }
      Value act = gatedActivation(gate, up);
      return arith::BitcastOp::create(
          b, loc, VectorType::get({layout.accPerLane}, b.getI32Type()), act);
    };
    forEachAccQuad(mFrags, nFrags, waveCol, activation,
                   [&](int64_t mi, Value fragCol, Value rowOfFour, Value quad) {
      if (bMajor) {
        // Source A was the weights: four consecutive columns of one row.
        Value row = add(laneRow, idx(mi * dim));
        Value col = add(fragCol, rowOfFour);
        store16(quad, lds, add(mul(row, tileN), col));
        return;
      }
      Value col = add(fragCol, laneRow);
      for (int64_t j = 0; j < 4; ++j) {
        Value row = add(rowOfFour, idx(mi * dim + j));
        memref::StoreOp::create(b, loc,
                                vector::ExtractOp::create(b, loc, quad, j), lds,
                                ValueRange{add(mul(row, tileN), col)});
      }
    });
  });
  gpu::BarrierOp::create(b, loc);
  storeQuantised(rows);
}

void W13Emitter::storeQuantised(const TileRows &rows) {
  const int64_t inter = problem.getIntermediate();
  const int64_t tileM = tile.getM(), tileN = tile.getN();
  Value lds = rows.lds, colBase = rows.colBase;
  // One lane per (row, 32-column block).
  const int64_t blocksPerRow = tileN / 32, blocks = tileM * blocksPerRow;
  forEachLaneItem(blocks, [&](Value blockId) {
    Value row = divC(blockId, blocksPerRow);
    Value block = remC(blockId, blocksPerRow);
    Value stageDword = add(mul(row, tileN), mul(block, 32));
    SmallVector<Value, 8> values = loadF32Block(lds, stageDword);
    Value outRow = rows.outRow(row);
    Value outElement = add(mul(outRow, inter), add(colBase, mul(block, 32)));
    Value scaleIndex =
        add(mul(outRow, inter / 32), add(divC(colBase, 32), block));
    if (outBf16) {
      // A16W4: the 32 values rounded to BF16 (nearest even), 64 bytes.
      for (int64_t q = 0; q < 4; ++q) {
        Value eight = vector::ShuffleOp::create(
            b, loc, values[2 * q], values[2 * q + 1],
            ArrayRef<int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
        Value rounded = arith::TruncFOp::create(
            b, loc, VectorType::get({8}, b.getBF16Type()), eight);
        store16(vector::BitCastOp::create(
                    b, loc, VectorType::get({4}, b.getI32Type()), rounded),
                rows.outBuf, add(divC(outElement, 2), idx(4 * q)));
      }
    } else if (outFp4)
      storeFp4Block(values, rows.outBuf, divC(outElement, 8),
                    rows.outScaleBuf, scaleIndex);
    else
      storeFp8Block(values, rows.outBuf, divC(outElement, 4),
                    rows.outScaleBuf, scaleIndex);
  });
}


std::pair<Value, Value> W13Emitter::emitStage1Arrival(Value control, Value lds,
                                                      const PeerLds &words) {
  moe::PeerTransportAttr peer = op.getPeerAttr();
  const int64_t groups = peer.getWorkgroups();
  const moe::PeerDispatch dispatch = peer.getDispatch();
  // Arrivals per launch: this kernel's workgroups, and with a separate
  // dispatch kernel (dispatch = none) its dispatch_cus workgroups too. The
  // dispatch kernel only arrives; the W13 kernel behind it completes.
  const int64_t arrivals =
      groups + (dispatch == moe::PeerDispatch::none ? peer.getDispatchCus() : 0);
  const int64_t epochWord = words.waveWords;
  onThreadZero(tid, [&] {
    // The read comes before this workgroup's arrival (acquire-release), and
    // the epoch advances only after the last arrival: every workgroup of
    // the launch reads the same word.
    Value epoch = arith::AddIOp::create(
        b, loc, atomicAddI32(control, idx(peer::kEpoch), i32(0)), i32(1));
    memref::StoreOp::create(b, loc, epoch, lds, ValueRange{idx(epochWord)});
    // Roles by ticket: the first `producers` tickets of a launch dispatch.
    Value ticket = atomicAddI32(control, idx(peer::kStage1Ticket), i32(1));
    Value role = arith::RemUIOp::create(b, loc, ticket, i32(groups));
    memref::StoreOp::create(b, loc, role, lds, ValueRange{idx(words.groupWord)});
    Value arrived =
        atomicAddI32(control, idx(peer::kStage1Arrivals), i32(1));
    if (dispatch == moe::PeerDispatch::only)
      return;
    Value last = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                       arrived, i32(arrivals - 1));
    auto ifLast = scf::IfOp::create(b, loc, last, false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifLast.thenBlock());
    (void)atomicAddI32(control, idx(peer::kStage1Arrivals), i32(-arrivals));
    (void)atomicAddI32(control, idx(peer::kEpoch), i32(1));
  });
  gpu::BarrierOp::create(b, loc);
  Value role = toIndex(
      memref::LoadOp::create(b, loc, lds, ValueRange{idx(words.groupWord)}));
  Value epoch =
      memref::LoadOp::create(b, loc, lds, ValueRange{idx(epochWord)});
  // The epoch's LDS word is wave 0's dispatch slot: read before reuse.
  gpu::BarrierOp::create(b, loc);
  return {role, epoch};
}

void W13Emitter::emitPeerBody(gpu::GPUFuncOp func) {
  moe::PeerTransportAttr peer = op.getPeerAttr();
  const int64_t hidden = problem.getHidden();
  const int64_t inter = problem.getIntermediate();
  const int64_t topK = problem.getTopK();
  const int64_t ep = problem.getEp();
  const int64_t experts = problem.getLocalExperts();
  const int64_t rowsTotal = peer.getReceiveRows(experts);
  const int64_t producers = peer.getDispatchCus();
  const int64_t waves = tile.getWaves();
  const int64_t tileN = tile.getN();
  auto arg = [&](unsigned which) { return func.getArgument(which); };
  const peer::BufferLayout layout = peer::bufferLayout(
      experts, ep, rowsTotal, hidden, topK, peer.getMaxTokens());
  // A region of a symmetric buffer (kind: 0 receive rows, 1 their scales,
  // 2 their metadata, 3 the control words), viewed where it is used so
  // that only the bases stay in scalar registers.
  auto region = [&](Value base, unsigned kind) -> Value {
    switch (kind) {
    case 0:
      return symmetricRegion(b, loc, base, layout.recv_a, rowsTotal * hidden / 4,
                             b.getI32Type());
    case 1:
      return symmetricRegion(b, loc, base, layout.recv_scale,
                             rowsTotal * hidden / 32, b.getI8Type());
    case 2:
      return symmetricRegion(b, loc, base, layout.recv_meta,
                             rowsTotal * peer::kMetaWords, b.getI32Type());
    default:
      return symmetricRegion(b, loc, base, layout.control,
                             peer::controlWords(experts, ep), b.getI32Type());
    }
  };
  auto peerBase = [&](int64_t rank) {
    return func.getArgument(kPeerFirst + rank);
  };
  Value lds = func.getWorkgroupAttributions()[0];
  const PeerLds words = PeerLds::at(
      (op.getLdsBytes() - op.getPeerLdsBytes()) / 4, experts, waves);
  Value symmetric = arg(kPSymmetric);
  Value control = region(symmetric, 3);
  Value numTokens = arg(kPNumTokens);
  Value numRoutes = arith::MulIOp::create(b, loc, numTokens, i32(topK));
  Value aBuf = asBuffer(arg(kPA), bytesOf(numTokens, hidden));
  Value aScaleBuf = asBuffer(arg(kPAScale), bytesOf(numTokens, hidden / 32));
  Value idsBuf = asBuffer(arg(kPTopkIds), bytesOf(numRoutes, 4));
  Value weightsBuf = asBuffer(arg(kPTopkWeights), bytesOf(numRoutes, 4));
  emitLaneIds();
  auto [role, epoch] = emitStage1Arrival(control, lds, words);
  PeerDispatchArgs dispatchArgs;
  dispatchArgs.peer = peer;
  dispatchArgs.problem = problem;
  dispatchArgs.lds = lds;
  dispatchArgs.control = control;
  dispatchArgs.rank = arg(kPRank);
  dispatchArgs.aBuf = aBuf;
  dispatchArgs.aScaleBuf = aScaleBuf;
  dispatchArgs.idsBuf = idsBuf;
  dispatchArgs.weightsBuf = weightsBuf;
  dispatchArgs.numRoutesI32 = numRoutes;
  dispatchArgs.epoch = epoch;
  dispatchArgs.peerBase = peerBase;
  dispatchArgs.peerRegion = region;
  const moe::PeerDispatch dispatch = peer.getDispatch();
  if (dispatch == moe::PeerDispatch::only) {
    // The dispatch kernel: every workgroup produces, nothing else.
    emitPeerDispatch(role, words, dispatchArgs);
    gpu::ReturnOp::create(b, loc);
    return;
  }
  if (dispatch == moe::PeerDispatch::fused) {
    Value isProducer = arith::CmpIOp::create(
        b, loc, arith::CmpIPredicate::ult, role, idx(producers));
    auto ifProducer = scf::IfOp::create(b, loc, isProducer, false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifProducer.thenBlock());
    emitPeerDispatch(role, words, dispatchArgs);
  }

  // Everyone computes once every producer wave of every rank (of this
  // kernel, or of the dispatch kernel before it) has signalled this rank:
  // ep * producers * waves signals per launch.
  Value expected = arith::MulIOp::create(b, loc, epoch,
                                         i32(ep * producers * waves));
  emitWaitUntil(tid, control, idx(peer::kDispatchDone), expected);
  TileRows rows;
  rows.aBuf = asBuffer(region(symmetric, 0), i64(rowsTotal * hidden));
  rows.aScaleBuf =
      asBuffer(region(symmetric, 1), i64(rowsTotal * hidden / 32));
  rows.outBuf = asBuffer(arg(kPOut), i64(rowsTotal * inter));
  rows.outScaleBuf = asBuffer(arg(kPOutScale), i64(rowsTotal * inter / 32));
  rows.lds = lds;
  rows.b = arg(kPB);
  rows.bScale = arg(kPBScale);
  emitPeerTiles(peer, control, epoch, role, lds, words, experts, ep,
                inter / tileN, /*stage=*/0, [&](const PeerItem &item) {
    rows.setItem(item);
    auto receiveRow = [&](Value row) { return peerReceiveRow(item, row); };
    rows.aRow = receiveRow;
    rows.outRow = receiveRow;
    emitTile(rows);
    // The next item reuses the LDS tiles.
    gpu::BarrierOp::create(b, loc);
  });
  gpu::ReturnOp::create(b, loc);
}

} // namespace

KernelAbi getW13KernelAbi(moe::W13Op op) {
  using K = KernelArg::Kind;
  using A = KernelArg::Access;
  moe::TileAttr tile = op.getTile();
  KernelAbi abi;
  abi.workgroupSize = static_cast<unsigned>(
      moe::getVerifiedTarget(op).wavefrontSize * tile.getWaves() *
      tile.getKWaves());
  // [E, 2I, H/2] E2M1 pairs (even K in the low nibble): I gate rows then I
  // up rows, or blocks of G of each with gate_up_interleave = G.
  abi.weightLayout = "w13_expert_2i_h_e2m1x2_low_nibble_first";
  if (op.getGateUpInterleave() > 0)
    abi.weightLayout += "_gui" + std::to_string(op.getGateUpInterleave());
  if (moe::PeerTransportAttr peer = op.getPeerAttr()) {
    abi.args = {
        {"a", K::Buffer, "f8E4M3FN", A::Read, "[num_tokens, H]"},
        {"a_scale", K::Buffer, "f8E8M0FNU", A::Read, "[num_tokens, H/32]"},
        {"topk_ids", K::Buffer, "i32", A::Read, "[num_tokens, top_k] (global expert ids)"},
        {"topk_weights", K::Buffer, "f32", A::Read, "[num_tokens, top_k]"},
        {"b", K::Buffer, "f4E2M1FN x2", A::Read, "[local_experts, 2I, H/2]"},
        {"b_scale", K::Buffer, "f8E8M0FNU", A::Read, "[local_experts, 2I, H/32]"},
        {"out", K::Buffer, "f8E4M3FN", A::Write, "[local_experts * capacity, I]"},
        {"out_scale", K::Buffer, "f8E8M0FNU", A::Write, "[local_experts * capacity, I/32]"},
        {"symmetric", K::Buffer, "i8", A::ReadWrite,
         "[symmetric buffer bytes] (this rank's; regions: moec/abi/peer_protocol.h)"},
        {"num_tokens", K::I32, "i32", A::Read, "scalar (<= max_tokens)"},
        {"rank", K::I32, "i32", A::Read, "scalar"},
    };
    for (int64_t r = 0; r < op.getProblem().getEp(); ++r)
      abi.args.push_back({"peer_symmetric" + std::to_string(r), K::Buffer, "i8",
                          A::ReadWrite,
                          "[symmetric buffer bytes] of rank " + std::to_string(r)});
    abi.gridX = std::to_string(peer.getWorkgroups());
    abi.gridY = "1";
    abi.gridZ = "1";
    return abi;
  }
  const bool aFp4 =
      op.getProblem().getActivationFormat() == moe::ActivationFormat::fp4;
  const bool outFp4 =
      op.getProblem().getOutputFormat() == moe::ActivationFormat::fp4;
  // A16W4: BF16 A and intermediate rows; their scale arguments stay in
  // the ABI (same positions for every format) and are not accessed.
  const bool a16 =
      op.getProblem().getActivationFormat() == moe::ActivationFormat::bf16;
  abi.args = {
      aFp4 ? KernelArg{"a", K::Buffer, "f4E2M1FN x2", A::Read,
                       "[num_tokens, H/2]"}
      : a16
          ? KernelArg{"a", K::Buffer, "bf16", A::Read, "[num_tokens, H]"}
          : KernelArg{"a", K::Buffer, "f8E4M3FN", A::Read, "[num_tokens, H]"},
      a16 ? KernelArg{"a_scale", K::Buffer, "f8E8M0FNU", A::Read,
                      "unused (BF16 A has no scales)"}
          : KernelArg{"a_scale", K::Buffer, "f8E8M0FNU", A::Read,
                      "[num_tokens, H/32]"},
      {"b", K::Buffer, "f4E2M1FN x2", A::Read, "[local_experts, 2I, H/2]"},
      {"b_scale", K::Buffer, "f8E8M0FNU", A::Read, "[local_experts, 2I, H/32]"},
      {"sorted_routes", K::Buffer, "i32", A::Read, "[num_sorted]"},
      {"tile_experts", K::Buffer, "i32", A::Read, "[num_sorted/tile_m]"},
      outFp4 ? KernelArg{"out", K::Buffer, "f4E2M1FN x2", A::Write,
                         "[num_tokens*top_k, I/2]"}
      : a16  ? KernelArg{"out", K::Buffer, "bf16", A::Write,
                        "[num_tokens*top_k, I]"}
             : KernelArg{"out", K::Buffer, "f8E4M3FN", A::Write,
                         "[num_tokens*top_k, I]"},
      a16 ? KernelArg{"out_scale", K::Buffer, "f8E8M0FNU", A::Write,
                      "unused (the BF16 intermediate has no scales)"}
          : KernelArg{"out_scale", K::Buffer, "f8E8M0FNU", A::Write,
                      "[num_tokens*top_k, I/32]"},
      {"num_tokens", K::I32, "i32", A::Read, "scalar"},
      {"num_sorted", K::I32, "i32", A::Read, "scalar (multiple of tile_m)"},
  };
  if (op.getSharedFp8Expert()) {
    abi.args.push_back({"b_shared", K::Buffer, "f8E4M3FN", A::Read, "[2I, H]"});
    abi.args.push_back(
        {"b_shared_scale", K::Buffer, "f8E8M0FNU", A::Read, "[2I, H/32]"});
  }
  // Logical order (gate j at [e, j], up j at [e, I + j]); the shared
  // expert's row is the last.
  if (op.getBias())
    abi.args.push_back(
        {"bias", K::Buffer, "f32", A::Read, "[local_experts, 2I]"});
  abi.gridX = "I / " + std::to_string(tile.getN());
  abi.gridY = tileGridY(tile);
  abi.gridZ = "1";
  return abi;
}

FailureOr<gpu::GPUModuleOp> buildW13Kernel(OpBuilder &builder, moe::W13Op op) {
  moe::ProblemAttr problem = op.getProblem();
  if (failed(refuseUnscaledActivations(
          op, problem, op.getPeerAttr() || op.getSharedFp8Expert())))
    return failure();
  std::optional<moe::ActivationFormat> out = problem.getOutputFormat();
  const bool a16 = problem.getActivationFormat() == moe::ActivationFormat::bf16;
  if (a16 ? out != moe::ActivationFormat::bf16
          : out != moe::ActivationFormat::fp8 &&
                out != moe::ActivationFormat::fp4)
    return op.emitOpError(
        a16 ? "problem.output must be bf16 with BF16 activations (A16W4's "
              "intermediate)"
            : "problem.output must be f8E4M3FN or f4E2M1FN (the quantised "
              "intermediate W2 reads)");
  return W13Emitter(builder, op).emit();
}

} // namespace moec
