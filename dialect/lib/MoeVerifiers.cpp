//===- MoeVerifiers.cpp - legality rules of moe attributes and ops --------===//
///
/// \file
/// Every rule names the field it is about, because the message ends up in
/// front of someone editing a tuning table.
///
//===----------------------------------------------------------------------===//

#include "moec/Dialect/Moe/MoeDialect.h"
#include "moec/target_info.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>

using namespace mlir;
using namespace moec::moe;

//===----------------------------------------------------------------------===//
// ProblemAttr
//===----------------------------------------------------------------------===//

LogicalResult
ProblemAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                    int64_t hidden, int64_t intermediate, int64_t experts,
                    int64_t topK, int64_t ep, Type activation, Type weight,
                    Type output) {
  auto positive = [&](int64_t value, StringRef field) -> LogicalResult {
    if (value > 0)
      return success();
    return emitError() << "problem." << field << " must be positive, got "
                       << value;
  };
  if (failed(positive(hidden, "hidden")) ||
      failed(positive(intermediate, "intermediate")) ||
      failed(positive(experts, "experts")) ||
      failed(positive(topK, "top_k")) || failed(positive(ep, "ep")))
    return failure();
  // MX scales cover 32 elements along K; both GEMMs reduce over H or I.
  if (hidden % 32 != 0)
    return emitError() << "problem.hidden (" << hidden
                       << ") must be a multiple of the 32-element MX block";
  if (intermediate % 32 != 0)
    return emitError() << "problem.intermediate (" << intermediate
                       << ") must be a multiple of the 32-element MX block";
  if (experts % ep != 0)
    return emitError() << "problem.experts (" << experts
                       << ") must be divisible by problem.ep (" << ep << ")";
  if (topK > experts)
    return emitError() << "problem.top_k (" << topK
                       << ") exceeds problem.experts (" << experts << ")";
  return success();
}

//===----------------------------------------------------------------------===//
// TileAttr
//===----------------------------------------------------------------------===//

int64_t TileAttr::getMfmaM() const {
  return getMfma() == MfmaShape::m16n16k128 ? 16 : 32;
}
int64_t TileAttr::getMfmaK() const {
  return getMfma() == MfmaShape::m16n16k128 ? 128 : 64;
}

LogicalResult TileAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               int64_t m, int64_t n, int64_t k, int64_t waves,
                               MfmaShape mfma, MfmaOrientation orientation,
                               CachePolicy bCache, int64_t wavesPerEu,
                               bool xcdSwizzle, bool aSwizzle,
                               int64_t persistCu, bool persistStrided,
                               bool bPrefetch, bool scalePrefetch,
                               int64_t groupM, bool asyncA,
                               int64_t persistSkew) {
  if (!llvm::is_contained({16, 32, 64, 128}, m))
    return emitError() << "tile.m must be one of 16, 32, 64, 128, got " << m;
  if (!llvm::is_contained({64, 128, 256, 512}, n))
    return emitError() << "tile.n must be one of 64, 128, 256, 512, got " << n;
  if (k < 128 || k % 128 != 0)
    return emitError() << "tile.k must be a positive multiple of 128, got "
                       << k;
  if (!llvm::is_contained({1, 2, 4, 8}, waves))
    return emitError() << "tile.waves must be one of 1, 2, 4, 8, got "
                       << waves;
  int64_t mfmaDim = mfma == MfmaShape::m16n16k128 ? 16 : 32;
  if (m % mfmaDim != 0)
    return emitError() << "tile.m (" << m << ") must be a multiple of the "
                       << "MFMA M (" << mfmaDim << ") of tile.mfma";
  if ((n / waves) % mfmaDim != 0 || n % waves != 0)
    return emitError() << "tile.n (" << n << ") split over tile.waves ("
                       << waves << ") must give each wave a multiple of the "
                       << "MFMA N (" << mfmaDim << ") columns";
  const moec::rt::TargetInfo &target = moec::rt::gfx950TargetInfo();
  if (wavesPerEu < 0 || wavesPerEu > int64_t(target.maxWavesPerSimd))
    return emitError() << "tile.waves_per_eu must be 0 (no hint) to "
                       << target.maxWavesPerSimd << ", got " << wavesPerEu;
  // The XOR swizzle permutes chunk indices within a row: their count must
  // be a power of two.
  if (aSwizzle && !llvm::isPowerOf2_64(k / 16))
    return emitError() << "tile.a_swizzle needs tile.k / 16 to be a power of "
                          "two, got tile.k = "
                       << k;
  if (persistCu < 0 || persistCu > int64_t(target.computeUnits))
    return emitError() << "tile.persist_cu must be 0 (not persistent) to "
                       << target.computeUnits << ", got " << persistCu;
  if (persistStrided && persistCu == 0)
    return emitError() << "tile.persist_strided needs tile.persist_cu > 0";
  if (persistSkew < 0 || (persistSkew > 0 && persistCu == 0))
    return emitError() << "tile.persist_skew must be 0, or positive with "
                          "tile.persist_cu > 0, got "
                       << persistSkew;
  // The XCD renumbering assumes one workgroup per tile.
  if (xcdSwizzle && persistCu > 0)
    return emitError() << "tile.xcd_swizzle cannot be combined with "
                          "tile.persist_cu";
  if (!llvm::is_contained({0, 2, 4, 8, 16}, groupM))
    return emitError() << "tile.group_m must be one of 0, 2, 4, 8, 16, got "
                       << groupM;
  if (groupM > 0 && (xcdSwizzle || persistCu > 0))
    return emitError() << "tile.group_m cannot be combined with "
                          "tile.xcd_swizzle or tile.persist_cu";
  // The LDS DMA writes a wave's 64 chunks contiguously in lane order from
  // one base address: the XOR swizzle's permutation of chunks within a row
  // cannot be expressed. (The other condition of the direct copy, that
  // every wave of a copy slot fills 64 consecutive chunks or none, holds
  // for every legal tile: m * k / 16 chunks is a multiple of 128.)
  if (asyncA && aSwizzle)
    return emitError() << "tile.async_a cannot be combined with "
                          "tile.a_swizzle: the LDS DMA writes a wave's 16-byte "
                          "chunks contiguously in lane order";
  // Each wave holds an (m x n/waves) FP32 accumulator; with operands it must
  // fit the unified 512-entry register file of a lane.
  int64_t accumulatorRegs = m * (n / waves) / 64;
  if (accumulatorRegs > 448)
    return emitError() << "tile (m " << m << " x n " << n << " over " << waves
                       << " waves) needs " << accumulatorRegs
                       << " accumulator registers per lane; at most 448 fit";
  return success();
}

//===----------------------------------------------------------------------===//
// PeerTransportAttr
//===----------------------------------------------------------------------===//

LogicalResult
PeerTransportAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                          PeerKind kind, int64_t capacity, int64_t maxTokens,
                          int64_t workgroups, int64_t dispatchCus,
                          int64_t workShards, int64_t planCus,
                          int64_t chunkRoutes, PeerDispatch dispatch) {
  const moec::rt::TargetInfo &target = moec::rt::gfx950TargetInfo();
  if (capacity <= 0)
    return emitError() << "peer.capacity must be positive, got " << capacity;
  if (maxTokens <= 0)
    return emitError() << "peer.max_tokens must be positive, got "
                       << maxTokens;
  if (workgroups <= 0 ||
      workgroups > int64_t(target.computeUnits) * target.maxWavesPerCu())
    return emitError() << "peer.workgroups must be in [1, "
                       << int64_t(target.computeUnits) * target.maxWavesPerCu()
                       << "], got " << workgroups;
  if (workShards < 0 || workShards > 8)
    return emitError() << "peer.work_shards must be in [0, 8] (0: static "
                          "assignment), got "
                       << workShards;
  if (planCus < 1 || planCus > dispatchCus ||
      (planCus > 1 && kind != PeerKind::compact))
    return emitError() << "peer.plan_cus must be in [1, dispatch_cus] and 1 "
                          "unless kind = compact, got "
                       << planCus;
  if (!llvm::is_contained({1, 2, 4, 8, 16}, chunkRoutes))
    return emitError() << "peer.chunk_routes must be one of 1, 2, 4, 8, 16, "
                          "got "
                       << chunkRoutes;
  if (dispatch == PeerDispatch::only) {
    if (dispatchCus != workgroups)
      return emitError() << "peer.dispatch = only: every workgroup "
                            "dispatches, so dispatch_cus ("
                         << dispatchCus << ") must equal workgroups ("
                         << workgroups << ")";
    return success();
  }
  // Producers must all be resident while others wait on them; roles go by
  // arrival, so that holds when they fit one per CU and leave a consumer.
  // (With dispatch = none they are another kernel's workgroups.)
  if (dispatch == PeerDispatch::none &&
      (dispatchCus <= 0 || dispatchCus > int64_t(target.computeUnits)))
    return emitError() << "peer.dispatch_cus must be in [1, "
                       << target.computeUnits << "], got " << dispatchCus;
  if (dispatch == PeerDispatch::fused &&
      (dispatchCus <= 0 || dispatchCus >= workgroups ||
       dispatchCus > int64_t(target.computeUnits)))
    return emitError() << "peer.dispatch_cus must be in [1, min(workgroups - "
                          "1, "
                       << target.computeUnits << ")], got " << dispatchCus;
  return success();
}

/// Rules every stage with a `#moe.peer` transport shares: the receive rows
/// of an expert are whole M tiles and the stage runs its own persistent
/// work loop.
static LogicalResult verifyPeerStage(Operation *op, PeerTransportAttr peer,
                                     ProblemAttr problem, TileAttr tile) {
  if (peer.getKind() == PeerKind::fixed_slot &&
      peer.getCapacity() % tile.getM() != 0)
    return op->emitOpError("peer.capacity (")
           << peer.getCapacity() << ") must be a multiple of tile.m ("
           << tile.getM() << ")";
  if (tile.getPersistCu() > 0 || tile.getXcdSwizzle())
    return op->emitOpError("tile.persist_cu and tile.xcd_swizzle do not apply "
                           "with peer: the stage runs peer.workgroups "
                           "persistent workgroups");
  // Source routes are packed as rank * max_tokens * top_k + route + 1 in 31
  // bits.
  if (problem.getEp() * peer.getMaxTokens() * problem.getTopK() >=
      (int64_t(1) << 31) - 1)
    return op->emitOpError("problem.ep * peer.max_tokens * problem.top_k must "
                           "fit in 31 bits");
  return success();
}

//===----------------------------------------------------------------------===//
// W2Op
//===----------------------------------------------------------------------===//

/// The shared-expert rule common to W13 and W2: FHMoE is tensor parallel
/// and needs at least one routed expert next to the shared one.
static LogicalResult verifySharedExpert(Operation *op, ProblemAttr problem) {
  if (problem.getEp() != 1)
    return op->emitOpError("shared_fp8_expert needs problem.ep = 1 (FHMoE is "
                           "tensor parallel), got ")
           << problem.getEp();
  if (problem.getExperts() < 2)
    return op->emitOpError("shared_fp8_expert needs problem.experts >= 2 "
                           "(routed experts plus the shared one)");
  return success();
}

int64_t W2Op::getLdsBytes() {
  TileAttr tile = getTile();
  // A tile: m rows of k FP8 bytes; B tile: n rows of k/2 packed E2M1 bytes
  // (k FP8 bytes for a shared expert).
  int64_t bRowBytes = getSharedFp8Expert() ? tile.getK() : tile.getK() / 2;
  int64_t gemm = tile.getM() * tile.getK() + tile.getN() * bRowBytes;
  // bf16_lds stages the m x n BF16 output tile afterwards.
  return (getBf16Lds() ? std::max(gemm, tile.getM() * tile.getN() * 2)
                       : gemm) +
         getPeerLdsBytes();
}

/// Bytes of the peer stages' LDS words: count, first row and tile prefix
/// per local expert plus the total, one word per wave, one per workgroup.
static int64_t peerLdsBytes(PeerTransportAttr peer, ProblemAttr problem,
                            TileAttr tile) {
  if (!peer)
    return 0;
  return 4 * (3 * problem.getLocalExperts() + 1 + tile.getWaves() + 1);
}

int64_t W2Op::getPeerLdsBytes() {
  return peerLdsBytes(getPeerAttr(), getProblem(), getTile());
}

int64_t W13Op::getPeerLdsBytes() {
  return peerLdsBytes(getPeerAttr(), getProblem(), getTile());
}

LogicalResult W2Op::verify() {
  ProblemAttr problem = getProblem();
  TileAttr tile = getTile();
  if (!isa<Float8E4M3FNType>(problem.getActivation()))
    return emitOpError("problem.activation must be f8E4M3FN for W2, got ")
           << problem.getActivation();
  if (!isa<Float4E2M1FNType>(problem.getWeight()))
    return emitOpError("problem.weight must be f4E2M1FN for W2, got ")
           << problem.getWeight();
  if (!problem.getOutput().isBF16())
    return emitOpError("problem.output must be bf16 for W2, got ")
           << problem.getOutput();
  if (getSharedFp8Expert() && failed(verifySharedExpert(*this, problem)))
    return failure();
  // W2 computes [routes, I] x [I, H]: N is the hidden size, K the
  // intermediate size.
  if (problem.getHidden() % tile.getN() != 0)
    return emitOpError("tile.n (")
           << tile.getN() << ") must divide problem.hidden ("
           << problem.getHidden() << "), the N of W2";
  if (problem.getIntermediate() % tile.getK() != 0)
    return emitOpError("tile.k (")
           << tile.getK() << ") must divide problem.intermediate ("
           << problem.getIntermediate() << "), the K of W2";
  if (getBf16Lds() && getSplitK() > 1)
    return emitOpError("bf16_lds stages the BF16 output; split_k (")
           << getSplitK() << ") writes FP32 partials";
  // The staging stores need four consecutive columns per lane, which only
  // the weights-as-source-A orientation gives.
  if (getBf16Lds() && tile.getOrientation() != MfmaOrientation::b_major)
    return emitOpError("bf16_lds needs tile.orientation = b_major");
  if (PeerTransportAttr peer = getPeerAttr()) {
    if (failed(verifyPeerStage(*this, peer, problem, tile)))
      return failure();
    if (getSplitK() > 1 || getBf16Lds() || getSharedFp8Expert())
      return emitOpError("peer: split_k, bf16_lds and shared_fp8_expert do "
                         "not apply to the fused stage 2");
    if (peer.getDispatch() != PeerDispatch::fused)
      return emitOpError("peer.dispatch applies to stage 1 (moe.w13) only");
  }
  // Split-K slices take ceil(steps / split_k) K steps each (the last may
  // be shorter); every slice must get at least one.
  int64_t steps = problem.getIntermediate() / tile.getK();
  int64_t perSlice = llvm::divideCeil(steps, getSplitK());
  if ((getSplitK() - 1) * perSlice >= steps)
    return emitOpError("split_k (")
           << getSplitK() << ") leaves a K slice empty: W2 has " << steps
           << " K steps of tile.k (" << tile.getK() << ")";
  const moec::rt::TargetInfo &target = moec::rt::gfx950TargetInfo();
  if (getLdsBytes() > target.ldsBytesPerCu)
    return emitOpError("tile (m ")
           << tile.getM() << ", n " << tile.getN() << ", k " << tile.getK()
           << ") stages " << getLdsBytes() << " bytes of LDS; " << target.arch
           << " has " << target.ldsBytesPerCu;
  return success();
}

//===----------------------------------------------------------------------===//
// W13Op
//===----------------------------------------------------------------------===//

int64_t W13Op::getLdsBytes() {
  TileAttr tile = getTile();
  // A tile m x k FP8, B tile 2n rows (gate and up) of k/2 bytes (k for a
  // shared FP8 expert); afterwards the m x n FP32 activation tile.
  int64_t bRowBytes = getSharedFp8Expert() ? tile.getK() : tile.getK() / 2;
  int64_t gemm = tile.getM() * tile.getK() + 2 * tile.getN() * bRowBytes;
  return std::max(gemm, tile.getM() * tile.getN() * 4) + getPeerLdsBytes();
}

LogicalResult W13Op::verify() {
  ProblemAttr problem = getProblem();
  TileAttr tile = getTile();
  if (!isa<Float8E4M3FNType>(problem.getActivation()))
    return emitOpError("problem.activation must be f8E4M3FN for W13, got ")
           << problem.getActivation();
  if (!isa<Float4E2M1FNType>(problem.getWeight()))
    return emitOpError("problem.weight must be f4E2M1FN for W13, got ")
           << problem.getWeight();
  if (!isa<Float8E4M3FNType>(problem.getOutput()))
    return emitOpError("problem.output must be f8E4M3FN for W13 (the "
                       "quantised intermediate), got ")
           << problem.getOutput();
  if (getSharedFp8Expert() && failed(verifySharedExpert(*this, problem)))
    return failure();
  // W13 computes [tokens, H] x [H, 2I]: K is the hidden size, N the
  // intermediate columns (each needing a gate and an up row).
  if (problem.getIntermediate() % tile.getN() != 0)
    return emitOpError("tile.n (")
           << tile.getN() << ") must divide problem.intermediate ("
           << problem.getIntermediate() << "), the N of W13";
  if (problem.getHidden() % tile.getK() != 0)
    return emitOpError("tile.k (")
           << tile.getK() << ") must divide problem.hidden ("
           << problem.getHidden() << "), the K of W13";
  int64_t interleave = getGateUpInterleave();
  if (interleave < 0 || (interleave > 0 &&
                         problem.getIntermediate() % interleave != 0))
    return emitOpError("gate_up_interleave (")
           << interleave << ") must be 0 or divide problem.intermediate ("
           << problem.getIntermediate() << ")";
  if (getSwigluLimit().convertToFloat() < 0.0f)
    return emitOpError("swiglu_limit must be >= 0 (0 disables the clamp)");
  if (PeerTransportAttr peer = getPeerAttr()) {
    if (failed(verifyPeerStage(*this, peer, problem, tile)))
      return failure();
    if (interleave != 0 || getSharedFp8Expert())
      return emitOpError("peer: gate_up_interleave and shared_fp8_expert do "
                         "not apply to the fused stage 1 (MegaMoE W13 is gate "
                         "rows then up rows)");
  }
  // Gate and up accumulators: twice the W2 count.
  int64_t accumulatorRegs = 2 * tile.getM() * tile.getWaveN() / 64;
  if (accumulatorRegs > 448)
    return emitOpError("tile (m ")
           << tile.getM() << " x n " << tile.getN() << " over "
           << tile.getWaves() << " waves) needs " << accumulatorRegs
           << " gate and up accumulator registers per lane; at most 448 fit";
  const moec::rt::TargetInfo &target = moec::rt::gfx950TargetInfo();
  if (getLdsBytes() > target.ldsBytesPerCu)
    return emitOpError("tile (m ")
           << tile.getM() << ", n " << tile.getN() << ", k " << tile.getK()
           << ") needs " << getLdsBytes() << " bytes of LDS; " << target.arch
           << " has " << target.ldsBytesPerCu;
  return success();
}

//===----------------------------------------------------------------------===//
// Combine
//===----------------------------------------------------------------------===//

LogicalResult
CombineTileAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                        int64_t blocks, int64_t waves) {
  if (blocks < 0)
    return emitError() << "combine_tile.blocks must be >= 0 (0: one "
                          "workgroup per `waves` tokens), got "
                       << blocks;
  if (!llvm::is_contained({1, 2, 4, 8, 16}, waves))
    return emitError() << "combine_tile.waves must be one of 1, 2, 4, 8, 16, "
                          "got "
                       << waves;
  return success();
}

LogicalResult CombineOp::verify() {
  ProblemAttr problem = getProblem();
  if (!problem.getOutput().isBF16())
    return emitOpError("problem.output must be bf16 for combine, got ")
           << problem.getOutput();
  // Each lane moves 8 BF16 columns (16 bytes) at a time.
  if (problem.getHidden() % 8 != 0)
    return emitOpError("problem.hidden (")
           << problem.getHidden()
           << ") must be a multiple of 8 for 16-byte row access";
  if (getPeerRows() && getSplitK() > 1)
    return emitOpError("peer_rows are BF16 rows from the fused stage 2; "
                       "split_k (")
           << getSplitK() << ") does not apply";
  const moec::rt::TargetInfo &target = moec::rt::gfx950TargetInfo();
  int64_t blocks = getTile().getBlocks();
  // A persistent grid larger than the chip gains nothing and hides a typo.
  if (blocks > int64_t(target.computeUnits) * target.maxWavesPerCu())
    return emitOpError("combine_tile.blocks (")
           << blocks << ") exceeds the resident workgroups of " << target.arch;
  return success();
}

//===----------------------------------------------------------------------===//
// SortOp
//===----------------------------------------------------------------------===//

LogicalResult SortOp::verify() {
  // The per-expert counts and cursors live in LDS, next to one id per lane.
  int64_t ldsBytes =
      4 * (2 * getProblem().getLocalExperts() + 64 * getWaves() + 1);
  const moec::rt::TargetInfo &target = moec::rt::gfx950TargetInfo();
  if (ldsBytes > target.ldsBytesPerCu)
    return emitOpError("problem.experts / problem.ep (")
           << getProblem().getLocalExperts() << " local experts) needs "
           << ldsBytes << " bytes of LDS for the counts; " << target.arch
           << " has " << target.ldsBytesPerCu;
  return success();
}
