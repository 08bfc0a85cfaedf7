//===- MoeVerifiers.cpp - legality rules of moe attributes and ops --------===//
///
/// \file
/// Every rule names the field it is about, because the message ends up in
/// front of someone editing a tuning table.
///
//===----------------------------------------------------------------------===//

#include "moec/Dialect/Moe/MoeDialect.h"
#include "moec/Dialect/Moe/MoeTarget.h"
#include "moec/abi/peer_protocol.h"
#include "moec/target/mfma_layout.h"
#include "moec/target/target_info.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>
#include <sstream>

using namespace mlir;
using namespace moec::moe;
using moec::target::TargetInfo;

/// verifyOnTarget against the chip around `op` (its `moe.target`).
static LogicalResult verifyOnOwnTarget(Operation *op) {
  FailureOr<const TargetInfo *> chip = getTarget(op);
  if (failed(chip))
    return failure();
  return verifyOnTarget(op, **chip);
}

//===----------------------------------------------------------------------===//
// ProblemAttr
//===----------------------------------------------------------------------===//

std::optional<ActivationFormat> moec::moe::activationFormatOf(Type type) {
  if (isa_and_nonnull<Float8E4M3FNType>(type))
    return ActivationFormat::fp8;
  if (isa_and_nonnull<Float4E2M1FNType>(type))
    return ActivationFormat::fp4;
  if (type && type.isBF16())
    return ActivationFormat::bf16;
  return std::nullopt;
}

/// Whether `type` is a scaled (1x32 E8M0) activation format: FP8 or MXFP4.
static bool isQuantizedFormat(Type type) {
  std::optional<ActivationFormat> format = activationFormatOf(type);
  return format == ActivationFormat::fp8 || format == ActivationFormat::fp4;
}

/// Bytes of a GEMM stage's A tile in LDS: tile.m rows of tile.k FP8 bytes
/// (MXFP4 rows keep that size), or of tile.k BF16 (A16W4).
static int64_t aTileBytes(ProblemAttr problem, TileAttr tile) {
  const int64_t bytes = problem.getActivationFormat() == ActivationFormat::bf16
                            ? 2
                            : 1;
  return tile.getM() * tile.getK() * bytes;
}

/// A16W4 (problem.activation bf16) is lowered for the route-list stages with
/// routed experts only.
static LogicalResult verifyBf16Activations(Operation *op, ProblemAttr problem,
                                           bool peer, bool sharedFp8Expert) {
  if (problem.getActivationFormat() == ActivationFormat::bf16 &&
      (peer || sharedFp8Expert))
    return op->emitOpError("BF16 activations (A16W4) do not apply to peer or "
                           "shared_fp8_expert stages");
  return success();
}

/// The fused MegaMoE stages move FP8 rows between ranks: `peer` admits no
/// MXFP4 activation or intermediate.
static LogicalResult verifyPeerFormats(Operation *op, ProblemAttr problem,
                                       PeerTransportAttr peer) {
  if (peer && (problem.getActivationFormat() == ActivationFormat::fp4 ||
               problem.getOutputFormat() == ActivationFormat::fp4))
    return op->emitOpError("peer needs FP8 activations (f8E4M3FN); MXFP4 "
                           "(f4E2M1FN) is for the two-stage kernels");
  return success();
}

ActivationFormat ProblemAttr::getActivationFormat() const {
  return *activationFormatOf(getActivation());
}

std::optional<ActivationFormat> ProblemAttr::getOutputFormat() const {
  return activationFormatOf(getOutput());
}

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
  if (!activationFormatOf(activation))
    return emitError() << "problem.activation must be an activation format "
                          "(f8E4M3FN, f4E2M1FN or bf16), got "
                       << activation;
  return success();
}

//===----------------------------------------------------------------------===//
// TileAttr
//===----------------------------------------------------------------------===//

/// The scaled-MFMA instruction shape of a tile.mfma value, from the lane
/// layout table.
static moec::mfma::ShapeInfo shapeInfoOf(MfmaShape shape) {
  return moec::mfma::shapeInfo(shape == MfmaShape::m16n16k128
                                   ? moec::mfma::Shape::M16N16K128
                                   : moec::mfma::Shape::M32N32K64);
}

int64_t TileAttr::getMfmaM() const { return shapeInfoOf(getMfma()).dim; }
int64_t TileAttr::getMfmaK() const { return shapeInfoOf(getMfma()).k; }

LogicalResult TileAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               int64_t m, int64_t n, int64_t k, int64_t waves,
                               MfmaShape mfma, MfmaOrientation orientation,
                               CachePolicy bCache, int64_t wavesPerEu,
                               bool xcdSwizzle, bool aSwizzle,
                               int64_t persistCu, bool persistStrided,
                               bool bPrefetch, bool scalePrefetch,
                               int64_t groupM, bool asyncA,
                               int64_t persistSkew, int64_t residencyCap,
                               bool bDirect, int64_t kWaves) {
  if (!llvm::is_contained({16, 32, 64, 128}, m))
    return emitError() << "tile.m must be one of 16, 32, 64, 128, got " << m;
  // Whole 1x32 quantisation blocks per tile (W13's epilogue finds each
  // block's amax inside one tile); AITER's opus stage 1 has 192.
  if (n < 32 || n > 512 || n % 32 != 0)
    return emitError() << "tile.n must be a multiple of 32 from 32 to 512, "
                          "got "
                       << n;
  if (k < 128 || k % 128 != 0)
    return emitError() << "tile.k must be a positive multiple of 128, got "
                       << k;
  if (!llvm::is_contained({1, 2, 4, 8}, waves))
    return emitError() << "tile.waves must be one of 1, 2, 4, 8, got "
                       << waves;
  const int64_t mfmaDim = shapeInfoOf(mfma).dim;
  if (m % mfmaDim != 0)
    return emitError() << "tile.m (" << m << ") must be a multiple of the "
                       << "MFMA M (" << mfmaDim << ") of tile.mfma";
  if ((n / waves) % mfmaDim != 0 || n % waves != 0)
    return emitError() << "tile.n (" << n << ") split over tile.waves ("
                       << waves << ") must give each wave a multiple of the "
                       << "MFMA N (" << mfmaDim << ") columns";
  // The ranges of waves_per_eu and persist_cu and the accumulator budget
  // depend on the chip: verifyOnTarget checks them.
  // The XOR swizzle permutes chunk indices within a row: their count must
  // be a power of two.
  if (aSwizzle && !llvm::isPowerOf2_64(k / 16))
    return emitError() << "tile.a_swizzle needs tile.k / 16 to be a power of "
                          "two, got tile.k = "
                       << k;
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
  if (groupM > 0 && persistCu > 0)
    return emitError() << "tile.group_m cannot be combined with "
                          "tile.persist_cu";
  if (bDirect && bPrefetch)
    return emitError() << "tile.b_direct loads the weights into registers "
                          "already; tile.b_prefetch does not apply";
  if (residencyCap < 0)
    return emitError() << "tile.residency_cap must be 0 (no cap) or "
                          "positive, got "
                       << residencyCap;
  // The LDS DMA writes a wave's 64 chunks contiguously in lane order from
  // one base address: the XOR swizzle's permutation of chunks within a row
  // cannot be expressed. (The other condition of the direct copy, that
  // every wave of a copy slot fills 64 consecutive chunks or none, holds
  // for every legal tile: m * k / 16 chunks is a multiple of 128.)
  if (asyncA && aSwizzle)
    return emitError() << "tile.async_a cannot be combined with "
                          "tile.a_swizzle: the LDS DMA writes a wave's 16-byte "
                          "chunks contiguously in lane order";
  // The groups' waves must fit one workgroup (verifyOnTarget) and their
  // tiles the LDS (W13Op::getLdsBytes); AITER's opus stage 1 has 7.
  if (kWaves < 1 || kWaves > 8)
    return emitError() << "tile.k_waves must be from 1 to 8, got " << kWaves;
  return success();
}

//===----------------------------------------------------------------------===//
// PeerTransportAttr
//===----------------------------------------------------------------------===//

LogicalResult
PeerTransportAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                          PeerKind transport, int64_t capacity, int64_t maxTokens,
                          int64_t workgroups, int64_t dispatchCus,
                          int64_t workShards, int64_t planCus,
                          int64_t chunkRoutes, PeerDispatch dispatch,
                          ActivationFormat payload) {
  // Upper bounds from the chip (wave slots, CUs) are verifyOnTarget's.
  if (payload != ActivationFormat::bf16 && payload != ActivationFormat::fp8)
    return emitError() << "peer.payload must be bf16 or fp8, got "
                       << stringifyActivationFormat(payload);
  if (capacity <= 0)
    return emitError() << "peer.capacity must be positive, got " << capacity;
  if (maxTokens <= 0)
    return emitError() << "peer.max_tokens must be positive, got "
                       << maxTokens;
  if (workgroups <= 0)
    return emitError() << "peer.workgroups must be positive, got "
                       << workgroups;
  if (dispatchCus <= 0)
    return emitError() << "peer.dispatch_cus must be positive, got "
                       << dispatchCus;
  if (workShards < 0 || workShards > moec::peer::kMaxWorkShards)
    return emitError() << "peer.work_shards must be in [0, "
                       << moec::peer::kMaxWorkShards
                       << "] (0: static assignment), got " << workShards;
  if (planCus < 1 || planCus > dispatchCus ||
      (planCus > 1 && transport != PeerKind::compact))
    return emitError() << "peer.plan_cus must be in [1, dispatch_cus] and 1 "
                          "unless transport = compact, got "
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
  // arrival, so that holds when they fit one per CU (verifyOnTarget) and
  // leave a consumer (W13's rule: stage 2 has no producers and keeps
  // dispatch_cus at its default). With dispatch = none they are another
  // kernel's workgroups.
  return success();
}

/// Rules every stage with a `#moe.peer` transport shares: the receive rows
/// of an expert are whole M tiles and the stage runs its own persistent
/// work loop.
static LogicalResult verifyPeerStage(Operation *op, PeerTransportAttr peer,
                                     ProblemAttr problem, TileAttr tile) {
  if (peer.getTransport() == PeerKind::fixed_slot &&
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

/// The rule of `shared_last_route` (sort and combine of FHMoE): the last
/// route of a token is the shared expert's, so there must be a routed slot
/// before it and a routed expert below the shared id; FHMoE is tensor
/// parallel (the ids are global).
static LogicalResult verifySharedLastRoute(Operation *op, ProblemAttr problem) {
  if (problem.getEp() != 1)
    return op->emitOpError("shared_last_route needs problem.ep = 1 (FHMoE is "
                           "tensor parallel), got ")
           << problem.getEp();
  if (problem.getExperts() < 2 || problem.getTopK() < 2)
    return op->emitOpError("shared_last_route needs problem.experts >= 2 and "
                           "problem.top_k >= 2 (routed experts and slots plus "
                           "the shared one), got ")
           << problem.getExperts() << " and " << problem.getTopK();
  return success();
}

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

int64_t TileAttr::padLdsForResidency(int64_t ldsBytes,
                                     int64_t ldsBytesPerCu) const {
  if (getResidencyCap() <= 0)
    return ldsBytes;
  // One byte more than 1 / (C + 1) of the CU's LDS leaves room for C.
  const int64_t floor = llvm::alignTo(ldsBytesPerCu / (getResidencyCap() + 1) + 1, 4);
  return std::max(ldsBytes, floor);
}

int64_t W2Op::getLdsBytes() {
  TileAttr tile = getTile();
  // A tile: m rows of k FP8 bytes; B tile: n rows of k/2 packed E2M1 bytes
  // (k FP8 bytes for a shared expert).
  int64_t bRowBytes = getSharedFp8Expert() ? tile.getK() : tile.getK() / 2;
  int64_t gemm = aTileBytes(getProblem(), tile) +
                 (tile.getBDirect() ? 0 : tile.getN() * bRowBytes);
  // bf16_lds stages the m x n BF16 output tile afterwards; the FP8 peer
  // payload one M fragment (MFMA dim rows x n FP32) at a time, whose 1x32
  // blocks are quantised from LDS.
  int64_t own = getBf16Lds() ? std::max(gemm, tile.getM() * tile.getN() * 2)
                             : gemm;
  if (PeerTransportAttr peer = getPeerAttr();
      peer && peer.getPayload() == ActivationFormat::fp8)
    own = std::max(own, tile.getMfmaM() * tile.getN() * 4);
  return tile.padLdsForResidency(own + getPeerLdsBytes(),
                                 getVerifiedTarget(*this).ldsBytesPerCu);
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

/// The K granule of W2's K tail (W2Op::verify).
static constexpr int64_t kW2KTailGranule = 128;

LogicalResult W2Op::verify() {
  ProblemAttr problem = getProblem();
  TileAttr tile = getTile();
  if (tile.getKWaves() != 1)
    return emitOpError("tile.k_waves (")
           << tile.getKWaves() << ") applies to moe.w13 only";
  // BF16 (A16W4), FP8 or MXFP4: ProblemAttr admits only these.
  if (failed(verifyBf16Activations(*this, problem, bool(getPeerAttr()),
                                   getSharedFp8Expert())))
    return failure();
  if (!isa<Float4E2M1FNType>(problem.getWeight()))
    return emitOpError("problem.weight must be f4E2M1FN for W2, got ")
           << problem.getWeight();
  if (!problem.getOutput().isBF16())
    return emitOpError("problem.output must be bf16 for W2, got ")
           << problem.getOutput();
  if (failed(verifyPeerFormats(*this, problem, getPeerAttr())))
    return failure();
  if (getSharedFp8Expert() && failed(verifySharedExpert(*this, problem)))
    return failure();
  // W2 computes [routes, I] x [I, H]: N is the hidden size, K the
  // intermediate size.
  if (problem.getHidden() % tile.getN() != 0)
    return emitOpError("tile.n (")
           << tile.getN() << ") must divide problem.hidden ("
           << problem.getHidden() << "), the N of W2";
  // tile.k need not divide I: the K loop runs the whole steps, then one
  // step of the remainder (the K tail). The tail must be whole granules of
  // 128 K: whole E8M0 scale words (4 blocks of 32, which the K step loads
  // by the word) and whole MFMAs of either shape (K 128 or 64); 128 is
  // also the smallest tile.k, so the tail's copies are those of a legal
  // tile.
  const int64_t inter = problem.getIntermediate();
  if (tile.getK() > inter)
    return emitOpError("tile.k (")
           << tile.getK() << ") must not exceed problem.intermediate ("
           << inter << "), the K of W2";
  if (int64_t tail = inter % tile.getK(); tail % kW2KTailGranule != 0)
    return emitOpError("tile.k (")
           << tile.getK() << ") leaves a K tail of " << tail
           << " in problem.intermediate (" << inter
           << "), the K of W2: the tail (I mod tile.k) must be a multiple of "
           << kW2KTailGranule
           << " (whole E8M0 scale words and MFMAs), or tile.k divide I";
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
    // The fused stages are MegaMoE's, whose experts take no bias here.
    if (getBias())
      return emitOpError("peer: bias does not apply to the fused stage 2");
    // The producer knobs have no use in stage 2: they must keep their ODS
    // defaults, which the attribute's own parser fills in.
    auto defaults = cast<PeerTransportAttr>(parseAttribute(
        "#moe.peer<capacity = 1, max_tokens = 1>", getContext()));
    if (peer.getDispatch() != defaults.getDispatch())
      return emitOpError("peer.dispatch applies to stage 1 (moe.w13) only");
    if (peer.getDispatchCus() != defaults.getDispatchCus() ||
        peer.getPlanCus() != defaults.getPlanCus() ||
        peer.getChunkRoutes() != defaults.getChunkRoutes())
      return emitOpError("peer.dispatch_cus, plan_cus and chunk_routes apply "
                         "to stage 1 (moe.w13) only");
  }
  if (int64_t block = getSortBlockM()) {
    if (block < tile.getM() || block % tile.getM() != 0)
      return emitOpError("sort_block_m (")
             << block << ") must be 0 or a multiple of tile.m ("
             << tile.getM() << ")";
    if (getPeerAttr())
      return emitOpError("sort_block_m applies to sorted routes; the fused "
                         "stage 2 reads receive rows");
  }
  // Split-K slices take ceil(steps / split_k) K steps each (the last may
  // be shorter; a K tail counts as a step); every slice must get at least
  // one.
  int64_t steps = llvm::divideCeil(inter, tile.getK());
  int64_t perSlice = llvm::divideCeil(steps, getSplitK());
  if ((getSplitK() - 1) * perSlice >= steps)
    return emitOpError("split_k (")
           << getSplitK() << ") leaves a K slice empty: W2 has " << steps
           << " K steps of tile.k (" << tile.getK() << ")";
  return verifyOnOwnTarget(*this);
}

//===----------------------------------------------------------------------===//
// W13Op
//===----------------------------------------------------------------------===//

int64_t W13Op::getLdsBytes() {
  TileAttr tile = getTile();
  // A tile m x k FP8, B tile 2n rows (gate and up) of k/2 bytes (k for a
  // shared FP8 expert); afterwards the m x n FP32 activation tile.
  int64_t bRowBytes = getSharedFp8Expert() ? tile.getK() : tile.getK() / 2;
  int64_t gemm = aTileBytes(getProblem(), tile) +
                 (tile.getBDirect() ? 0 : 2 * tile.getN() * bRowBytes);
  // tile.k_waves = W: W groups' GEMM tiles; afterwards groups 1..W-1 hand
  // their FP32 gate and up accumulators (m x 2n each) to group 0 through
  // LDS after the activation tile.
  const int64_t groups = tile.getKWaves();
  const int64_t epilogue = tile.getM() * tile.getN() * 4 +
                           (groups - 1) * tile.getM() * 2 * tile.getN() * 4;
  return tile.padLdsForResidency(
      std::max(groups * gemm, epilogue) + getPeerLdsBytes(),
      getVerifiedTarget(*this).ldsBytesPerCu);
}

LogicalResult W13Op::verify() {
  ProblemAttr problem = getProblem();
  TileAttr tile = getTile();
  if (PeerTransportAttr peer = getPeerAttr();
      peer && peer.getPayload() != ActivationFormat::bf16)
    return emitOpError("peer.payload applies to stage 2 (moe.w2) only");
  if (failed(verifyBf16Activations(*this, problem, bool(getPeerAttr()),
                                   getSharedFp8Expert())))
    return failure();
  if (!isa<Float4E2M1FNType>(problem.getWeight()))
    return emitOpError("problem.weight must be f4E2M1FN for W13, got ")
           << problem.getWeight();
  // A16W4 writes its intermediate in BF16, without requantisation.
  const bool a16 = problem.getActivationFormat() == ActivationFormat::bf16;
  if (a16 && !problem.getOutput().isBF16())
    return emitOpError("problem.output must be bf16 for W13 with BF16 "
                       "activations (A16W4's intermediate), got ")
           << problem.getOutput();
  if (!a16 && !isQuantizedFormat(problem.getOutput()))
    return emitOpError("problem.output must be f8E4M3FN or f4E2M1FN for W13 "
                       "(the quantised intermediate), got ")
           << problem.getOutput();
  if (failed(verifyPeerFormats(*this, problem, getPeerAttr())))
    return failure();
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
  // Each of the k_waves groups reduces H / k_waves in whole K steps.
  if (tile.getKWaves() > 1 &&
      problem.getHidden() % (tile.getKWaves() * tile.getK()) != 0)
    return emitOpError("problem.hidden (")
           << problem.getHidden() << ") must be a multiple of tile.k_waves ("
           << tile.getKWaves() << ") x tile.k (" << tile.getK()
           << "): each wave group reduces H / k_waves in whole K steps";
  int64_t interleave = getGateUpInterleave();
  if (interleave < 0 || (interleave > 0 &&
                         problem.getIntermediate() % interleave != 0))
    return emitOpError("gate_up_interleave (")
           << interleave << ") must be 0 or divide problem.intermediate ("
           << problem.getIntermediate() << ")";
  if (getSwigluLimit().convertToFloat() < 0.0f)
    return emitOpError("swiglu_limit must be >= 0 (0 disables the clamp)");
  if (getGptOssSwiglu() && !(getSwigluLimit().convertToFloat() > 0.0f))
    return emitOpError("gpt_oss_swiglu needs swiglu_limit > 0 (GPT-OSS and "
                       "AITER clamp at 7)");
  if (getSituV2()) {
    if (getGptOssSwiglu())
      return emitOpError("situ_v2 and gpt_oss_swiglu are two activations; "
                         "give one");
    // tanh(x / B) with B <= 0 (or NaN) is no SiTUv2; AITER's launcher
    // refuses it as well.
    const float beta = getSituBeta().convertToFloat();
    const float linearBeta = getSituLinearBeta().convertToFloat();
    if (!(beta > 0.0f) || !(linearBeta > 0.0f)) {
      std::ostringstream got; // 4 and -1, as tables write them
      got << beta << " and " << linearBeta;
      return emitOpError("situ_v2 needs situ_beta > 0 and situ_linear_beta "
                         "> 0, got ")
             << got.str();
    }
  }
  if (PeerTransportAttr peer = getPeerAttr()) {
    if (failed(verifyPeerStage(*this, peer, problem, tile)))
      return failure();
    // Producers come first by arrival; at least one workgroup must be left
    // to compute.
    if (peer.getDispatch() == PeerDispatch::fused &&
        peer.getDispatchCus() >= peer.getWorkgroups())
      return emitOpError("peer.dispatch_cus must be in [1, workgroups - 1] (")
             << peer.getWorkgroups() << " - 1), got " << peer.getDispatchCus();
    if (interleave != 0 || getSharedFp8Expert())
      return emitOpError("peer: gate_up_interleave and shared_fp8_expert do "
                         "not apply to the fused stage 1 (MegaMoE W13 is gate "
                         "rows then up rows)");
    // The fused stages are MegaMoE's, whose experts take no bias here.
    if (getBias())
      return emitOpError("peer: bias does not apply to the fused stage 1");
    // The fused stage's work loop and dispatch count one group of waves.
    if (tile.getKWaves() != 1)
      return emitOpError("peer: tile.k_waves (")
             << tile.getKWaves() << ") does not apply to the fused stage 1";
  }
  return verifyOnOwnTarget(*this);
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
  if (getFp8PeerRows() && !getPeerRows())
    return emitOpError("fp8_peer_rows needs peer_rows");
  if (getSharedLastRoute() && getPeerRows())
    return emitOpError("shared_last_route (FHMoE) and peer_rows do not "
                       "combine");
  if (getSharedLastRoute() && failed(verifySharedLastRoute(*this, problem)))
    return failure();
  return verifyOnOwnTarget(*this);
}

//===----------------------------------------------------------------------===//
// SortOp
//===----------------------------------------------------------------------===//

LogicalResult SortOp::verify() {
  if (getSharedLastRoute() &&
      failed(verifySharedLastRoute(*this, getProblem())))
    return failure();
  return verifyOnOwnTarget(*this);
}

//===----------------------------------------------------------------------===//
// QuantOp
//===----------------------------------------------------------------------===//

LogicalResult QuantOp::verify() {
  ProblemAttr problem = getProblem();
  // ProblemAttr already holds H to whole 32-element blocks; the kernel reads
  // BF16 and writes what moe.w13 reads.
  if (!problem.getActivation().isBF16())
    return emitOpError("problem.activation must be bf16 for quant (the "
                       "layer's input hidden states), got ")
           << problem.getActivation();
  if (!isQuantizedFormat(problem.getOutput()))
    return emitOpError("problem.output must be f8E4M3FN or f4E2M1FN for "
                       "quant (the token rows moe.w13 reads), got ")
           << problem.getOutput();
  return verifyOnOwnTarget(*this);
}

//===----------------------------------------------------------------------===//
// Target chip
//===----------------------------------------------------------------------===//

/// The closest op around `op` (or `op`) with a `moe.target` attribute.
static Operation *findTargetHolder(Operation *op) {
  for (Operation *at = op; at; at = at->getParentOp())
    if (at->hasAttr(kTargetAttrName))
      return at;
  return nullptr;
}

const TargetInfo *moec::moe::lookupTarget(Operation *op) {
  Operation *holder = findTargetHolder(op);
  if (!holder)
    return &moec::target::defaultTarget();
  auto name = dyn_cast<StringAttr>(holder->getAttr(kTargetAttrName));
  return name ? moec::target::lookupTargetInfo(name.getValue()) : nullptr;
}

FailureOr<const TargetInfo *> moec::moe::getTarget(Operation *op) {
  if (const TargetInfo *chip = lookupTarget(op))
    return chip;
  op->emitError() << kTargetAttrName << " = "
                  << findTargetHolder(op)->getAttr(kTargetAttrName)
                  << " is not a chip moec knows ("
                  << moec::target::knownTargetNames() << ")";
  return failure();
}

const TargetInfo &moec::moe::getVerifiedTarget(Operation *op) {
  const TargetInfo *chip = lookupTarget(op);
  assert(chip && "the verifier rejects ops for unknown chips");
  return chip ? *chip : moec::target::defaultTarget();
}

/// The sort's LDS on `chip`: the per-expert counts and cursors, next to
/// one id per lane.
static int64_t sortLdsBytes(SortOp sort, const TargetInfo &chip) {
  return 4 * (2 * sort.getProblem().getLocalExperts() +
              chip.wavefrontSize * sort.getWaves() + 1);
}

int64_t SortOp::getLdsBytes() {
  return sortLdsBytes(*this, getVerifiedTarget(*this));
}

// The quant and the combine keep everything in registers.
int64_t QuantOp::getLdsBytes() { return 0; }
int64_t CombineOp::getLdsBytes() { return 0; }

namespace {

/// Collects every problem of one op on one chip, each as its own error.
class TargetChecker {
public:
  TargetChecker(Operation *op, const TargetInfo &chip) : op(op), chip(chip) {}

  /// The scaled-MFMA GEMM stages (W2, W13).
  void checkGemm(ProblemAttr problem, TileAttr tile, PeerTransportAttr peer,
                 int64_t ldsBytes, bool gateAndUp, bool asyncA,
                 bool writesFp8) {
    // Features first: they are what a chip of another generation lacks.
    if (!chip.hasScaledMfma)
      fieldProblem() << chip.arch << " has no MXFP4 scaled MFMA ("
                     << (tile.getMfma() == MfmaShape::m16n16k128
                             ? "V_MFMA_SCALE_F32_16X16X128_F8F6F4"
                             : "V_MFMA_SCALE_F32_32X32X64_F8F6F4")
                     << ")";
    if (writesFp8 && !chip.hasOcpFp8)
      fieldProblem() << chip.arch
                     << " has no OCP FP8 conversion (problem.output f8E4M3FN; "
                     << chip.arch << "'s V_CVT_PK_FP8_F32 writes E4M3FNUZ)";
    if (asyncA && chip.ldsDmaBytesPerLane < 16)
      fieldProblem() << chip.arch
                     << " has no 16-byte LDS DMA (tile.async_a needs "
                        "BUFFER_LOAD_DWORDX4 with LDS; at most "
                     << chip.ldsDmaBytesPerLane << " bytes per lane)";
    // Limits.
    if (tile.getWavesPerEu() < 0 ||
        tile.getWavesPerEu() > int64_t(chip.maxWavesPerSimd))
      fieldProblem() << "tile.waves_per_eu must be 0 (no hint) to "
                     << chip.maxWavesPerSimd << ", got "
                     << tile.getWavesPerEu();
    if (tile.getPersistCu() < 0 ||
        tile.getPersistCu() > int64_t(chip.computeUnits))
      fieldProblem() << "tile.persist_cu must be 0 (not persistent) to "
                     << chip.computeUnits << ", got " << tile.getPersistCu();
    // Each wave holds (m x n/waves) FP32 accumulators (twice for W13's gate
    // and up rows); with operands they must fit a lane's register file.
    const int64_t accumulatorRegs = (gateAndUp ? 2 : 1) * tile.getM() *
                                    tile.getWaveN() / chip.wavefrontSize;
    if (accumulatorRegs > int64_t(chip.accumulatorRegs)) {
      if (gateAndUp)
        opProblem("tile (m ")
            << tile.getM() << " x n " << tile.getN() << " over "
            << tile.getWaves() << " waves) needs " << accumulatorRegs
            << " gate and up accumulator registers per lane; at most "
            << chip.accumulatorRegs << " fit";
      else
        fieldProblem() << "tile (m " << tile.getM() << " x n " << tile.getN()
                       << " over " << tile.getWaves() << " waves) needs "
                       << accumulatorRegs
                       << " accumulator registers per lane; at most "
                       << chip.accumulatorRegs << " fit";
    }
    // tile.k_waves multiplies the waves of a workgroup.
    const int64_t lanes =
        chip.wavefrontSize * tile.getWaves() * tile.getKWaves();
    if (tile.getKWaves() > 1 && lanes > int64_t(chip.maxWorkgroupSize))
      fieldProblem() << "tile.waves x tile.k_waves (" << tile.getWaves()
                     << " x " << tile.getKWaves() << ") gives " << lanes
                     << " lanes per workgroup; " << chip.arch << " allows "
                     << chip.maxWorkgroupSize;
    if (ldsBytes > int64_t(chip.ldsBytesPerCu))
      opProblem("tile (m ")
          << tile.getM() << ", n " << tile.getN() << ", k " << tile.getK()
          << (tile.getKWaves() > 1
                  ? ", k_waves " + std::to_string(tile.getKWaves())
                  : std::string())
          << (gateAndUp ? ") needs " : ") stages ") << ldsBytes
          << " bytes of LDS; " << chip.arch << " has " << chip.ldsBytesPerCu;
    if (peer)
      checkPeer(peer);
  }

  void checkPeer(PeerTransportAttr peer) {
    if (peer.getWorkgroups() > int64_t(chip.maxResidentWaves()))
      fieldProblem() << "peer.workgroups must be in [1, "
                     << chip.maxResidentWaves() << "], got "
                     << peer.getWorkgroups();
    // Producers must be resident together, one per CU.
    if (peer.getDispatch() != PeerDispatch::only &&
        peer.getDispatchCus() > int64_t(chip.computeUnits))
      fieldProblem() << "peer.dispatch_cus must be in [1, " << chip.computeUnits
                     << "], got " << peer.getDispatchCus();
  }

  void checkCombine(CombineOp combine) {
    // A persistent grid larger than the chip gains nothing and hides a typo.
    const int64_t blocks = combine.getTile().getBlocks();
    if (blocks > int64_t(chip.maxResidentWaves()))
      opProblem("combine_tile.blocks (")
          << blocks << ") exceeds the resident workgroups of " << chip.arch;
  }

  void checkSort(SortOp sort) {
    const int64_t experts = sort.getProblem().getLocalExperts();
    const int64_t ldsBytes = sortLdsBytes(sort, chip);
    if (ldsBytes > int64_t(chip.ldsBytesPerCu))
      opProblem("problem.experts / problem.ep (")
          << experts << " local experts) needs " << ldsBytes
          << " bytes of LDS for the counts; " << chip.arch << " has "
          << chip.ldsBytesPerCu;
  }

  void checkQuant(QuantOp quant) {
    if (!chip.hasOcpFp8)
      fieldProblem() << chip.arch
                     << " has no OCP FP8 conversion (problem.output f8E4M3FN; "
                     << chip.arch << "'s V_CVT_PK_FP8_F32 writes E4M3FNUZ)";
    const int64_t lanes = chip.wavefrontSize * quant.getWaves();
    if (lanes > int64_t(chip.maxWorkgroupSize))
      fieldProblem() << "waves (" << quant.getWaves() << ") gives " << lanes
                     << " lanes per workgroup; " << chip.arch << " allows "
                     << chip.maxWorkgroupSize;
  }

  LogicalResult result() const { return success(ok); }

private:
  /// A problem in the words of a field ("tile.persist_cu must be ...").
  InFlightDiagnostic fieldProblem() {
    ok = false;
    return op->emitError();
  }
  /// A problem of the op as a whole ("'moe.w2' op tile (m ...) stages ...").
  InFlightDiagnostic opProblem(const Twine &message) {
    ok = false;
    return op->emitOpError(message);
  }

  Operation *op;
  const TargetInfo &chip;
  bool ok = true;
};

} // namespace

LogicalResult W2Op::verifyOnTarget(const TargetInfo &chip) {
  TargetChecker checker(*this, chip);
  // The FP8 peer payload converts to OCP FP8 as W13's output does.
  checker.checkGemm(getProblem(), getTile(), getPeerAttr(), getLdsBytes(),
                    /*gateAndUp=*/false, getTile().getAsyncA(),
                    /*writesFp8=*/getPeerAttr() &&
                        getPeerAttr().getPayload() == ActivationFormat::fp8);
  return checker.result();
}

LogicalResult W13Op::verifyOnTarget(const TargetInfo &chip) {
  TargetChecker checker(*this, chip);
  checker.checkGemm(
      getProblem(), getTile(), getPeerAttr(), getLdsBytes(),
      /*gateAndUp=*/true, getTile().getAsyncA(),
      /*writesFp8=*/isa<Float8E4M3FNType>(getProblem().getOutput()));
  return checker.result();
}

LogicalResult CombineOp::verifyOnTarget(const TargetInfo &chip) {
  TargetChecker checker(*this, chip);
  checker.checkCombine(*this);
  return checker.result();
}

LogicalResult SortOp::verifyOnTarget(const TargetInfo &chip) {
  TargetChecker checker(*this, chip);
  checker.checkSort(*this);
  return checker.result();
}

LogicalResult QuantOp::verifyOnTarget(const TargetInfo &chip) {
  TargetChecker checker(*this, chip);
  checker.checkQuant(*this);
  return checker.result();
}

LogicalResult moec::moe::verifyOnTarget(Operation *op, const TargetInfo &chip) {
  if (auto stage = dyn_cast<StageOpInterface>(op))
    return stage.verifyOnTarget(chip);
  return success();
}
