//===- Families.h - the oracle of the three MoE kernel families -*- C++ -*-===//
//
// Whole-layer oracles built from the stage functions of Stages.h:
//   1. MegaMoE, expert-parallel: dispatch -> W13 + clamped SwiGLU + FP8
//      quantisation -> W2 -> weighted combine on the source rank.
//   2. Two-stage tensor-parallel fused MoE: sort -> W13 + SiLU (or GPT-OSS's
//      SwiGLU) -> W2 -> combine.
//   3. FHMoE: family 2 with one extra FP8 shared expert as logical expert E.
// docs/reference.md states the semantics of every step.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_REFERENCE_FAMILIES_H
#define MOEC_REFERENCE_FAMILIES_H

#include "moec/reference/Routing.h"
#include "moec/reference/Stages.h"
#include "moec/reference/Status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moec::ref {

/// How much of the kernels' quantisation the oracle reproduces.
enum class OracleMode {
  /// BF16 input values and the W13 activation enter the GEMMs exactly (no FP8
  /// quantisation anywhere); weights are the exactly dequantised MXFP4/FP8.
  /// The end-to-end reference that relative-L2 error bars are measured
  /// against.
  Exact,
  /// The input is quantised to FP8 1x32 and the W13 activation is quantised
  /// to FP8 1x32 (both DeepSeek V4 recipe), exactly as the kernels do; the
  /// GEMMs still accumulate in double. For tight stage-by-stage comparison.
  QuantFaithful,
};

/// Layer dimensions. `experts` counts routed experts (FHMoE's shared expert
/// is extra); `topk` counts routed slots per token.
struct MoeShape {
  int64_t hidden = 0;       ///< H
  int64_t intermediate = 0; ///< I (per rank / TP-local)
  int64_t experts = 0;      ///< E
  int64_t topk = 0;
};

/// One rank's (or one TP group's) tokens and their routing.
struct TokenBatch {
  int64_t tokens = 0;
  std::vector<uint16_t> hiddenBf16; ///< [tokens, H] BF16 bits
  std::vector<int32_t> topkIds;     ///< [tokens, topk]; -1 or >= E: invalid
  std::vector<float> topkWeights;   ///< [tokens, topk]
};

/// Stage-by-stage results of one layer on one rank. Route-indexed arrays
/// have rows for every route (or receive row); rows not computed (invalid
/// routes, empty slots, padding) are zero.
struct StageResults {
  /// The route list the GEMMs ran over (family 1: over receive rows).
  SortedRoutes routes;
  /// QuantFaithful: the quantised input, [tokens, H] FP8 or [tokens, H/2]
  /// MXFP4 bytes (TpMoeConfig::inputFormat) + [tokens, H/32] scales.
  std::vector<uint8_t> inputCodes, inputScales;
  /// W13 activation (after SwiGLU, before quantisation), [rows, I].
  std::vector<double> activation;
  /// QuantFaithful: the quantised intermediate, [rows, I] FP8 or
  /// [rows, I/2] MXFP4 bytes (TpMoeConfig::intermediateFormat) + [rows, I/32].
  std::vector<uint8_t> intermediateCodes, intermediateScales;
  /// W2 output per row, before the routing weight, [rows, H].
  std::vector<double> downRows;
  /// Combined layer output, [tokens, H]: rounded once to FP32, and once to
  /// BF16 (the kernels' output type), from the double sum.
  std::vector<float> output;
  std::vector<uint16_t> outputBf16;
  /// With `outputTolerance` set in the config (QuantFaithful only): per
  /// element, how far a correct kernel's W2 row ([rows, H], before the
  /// routing weight) and its BF16 layer output ([tokens, H], against
  /// `output`) may be from the oracle's (Tolerance.h).
  std::vector<double> downRowTolerance;
  std::vector<double> outputTolerance;
};

/// Optional per-expert FP32 biases, as AITER's FlyDSL two-stage kernels take
/// them (bias1 / bias2, docs/aiter-tables.md). Rows are indexed by expert id
/// over every expert the layer's weights hold (FHMoE with the shared expert:
/// E + 1 rows, the shared expert last). An empty vector is no bias.
struct ExpertBias {
  /// [experts, 2I]: gate column j at [e, j], up column j at [e, I + j]
  /// whatever W13's gate/up interleave; added to W13's result before the
  /// clamp and the activation (GluConfig::bias).
  std::vector<float> w13;
  /// [experts, H]: added to each route's W2 row before the routing weight
  /// multiplies it in the combine.
  std::vector<float> w2;
};

//===----------------------------------------------------------------------===//
// Family 2: two-stage tensor-parallel fused MoE
//===----------------------------------------------------------------------===//

/// What the fused stage 2 sends back to the source rank's combine
/// (`#moe.peer` payload).
enum class PeerPayload {
  /// The weighted W2 row; the oracle sums weight x row exactly (double)
  /// and rounds once to BF16.
  Bf16,
  /// The weighted row in moec's 1x32 FP8 blocks: per route, the FP32 W2
  /// row times its FP32 weight (one FP32 rounding), quantised with the
  /// activation rule (quantizeFp8Row), dequantised exactly, summed in FP32
  /// in increasing k and rounded once to BF16, as the kernels do.
  Fp8,
};

struct TpMoeConfig {
  MoeShape shape;
  /// M tile of the sorted route list (sort_block_m).
  int64_t mTile = 32;
  /// Gate/up interleave granularity of W13 rows (GluConfig::interleave).
  /// Default 16: blocks of 16 gate rows then 16 up rows.
  int64_t gateUpInterleave = 16;
  /// SwiGLU clamp; 0 = plain SiLU (the family's default).
  double swigluLimit = 0.0;
  /// GPT-OSS's SwiGLU (AITER's ActivationType.Swiglu, clamp swigluLimit,
  /// AITER's default 7) instead of SiLU (GluConfig::gptOssSwiglu).
  bool gptOssSwiglu = false;
  /// SiTUv2 (AITER's ActivationType.Situv2) with its betas instead of
  /// SiLU (GluConfig::situV2).
  bool situV2 = false;
  double situBeta = 4.0, situLinearBeta = 25.0;
  ExpertBias bias;
  OracleMode mode = OracleMode::QuantFaithful;
  /// QuantFaithful: the format the BF16 input is quantised to (FP8: A8W4,
  /// MXFP4: A4W4, AITER's scale rule) and the format of the intermediate
  /// between the GEMMs (an A4W4 stage-1 kernel name's `_fp4` / `_fp8`).
  ActivationFormat inputFormat = ActivationFormat::Fp8E4M3;
  ActivationFormat intermediateFormat = ActivationFormat::Fp8E4M3;
  /// Also compute StageResults::downRowTolerance and outputTolerance (one
  /// more array of the size of the W2 rows; QuantFaithful only).
  bool outputTolerance = false;
  /// The routes' rows as the combine sums them. A fused MegaMoE layer is
  /// this layer on each rank's own tokens, so the self-test models one
  /// with `payload = fp8` by Fp8 here (the unfused pipeline is Bf16).
  PeerPayload payload = PeerPayload::Bf16;
  int numThreads = 0;
};

/// Family 2. w13: [E, 2I, H] (interleaved per config), w2: [E, H, I].
/// Stage 1 applies no routing weight; the combine multiplies by it.
Status runTpMoe(const TpMoeConfig &config, const WeightSource &w13,
                const WeightSource &w2, const TokenBatch &batch,
                StageResults &results);

//===----------------------------------------------------------------------===//
// Family 3: FHMoE (routed MXFP4 experts + one FP8 shared expert)
//===----------------------------------------------------------------------===//

/// The shared expert in native FP8 E4M3FN with E8M0 1x32 scales.
struct SharedExpertWeights {
  const uint8_t *w13Codes = nullptr;  ///< [2I, H], same gate/up interleave
  const uint8_t *w13Scales = nullptr; ///< [2I, H / 32]
  const uint8_t *w2Codes = nullptr;   ///< [H, I]
  const uint8_t *w2Scales = nullptr;  ///< [H, I / 32]
};

struct FhMoeConfig {
  /// Routed shape, tiling, activation and mode, as family 2.
  TpMoeConfig tp;
  /// With the shared expert, every token gets one extra route in slot
  /// k = topk (the last), expert id E, routing weight exactly 1.0; the
  /// layer then has E + 1 experts and topk + 1 routes per token (DSV4 Pro:
  /// 385 and 7). Routed slots stay valid only for ids in [0, E) (an id of E
  /// in a routed slot is invalid, as in family 2). Without the shared
  /// expert, the layer is family 2 unchanged.
  bool includeSharedExpert = true;
};

/// Family 3. Routed weights as family 2; `shared` may be null only when
/// includeSharedExpert is false. Route ids in the results count topk + 1
/// slots per token when the shared expert is included.
Status runFhMoe(const FhMoeConfig &config, const WeightSource &routedW13,
                const WeightSource &routedW2, const SharedExpertWeights *shared,
                const TokenBatch &batch, StageResults &results);

//===----------------------------------------------------------------------===//
// Family 1: MegaMoE, expert-parallel
//===----------------------------------------------------------------------===//

/// How routes travel to the rank owning their expert.
enum class Transport {
  /// Every local expert owns a fixed number of receive slots; no count
  /// exchange. More routes than slots is an error (never dropped).
  FixedSlot,
  /// Count exchange + plan: each expert's rows contiguous, sources in rank
  /// order inside it, each expert padded to the M tile.
  Compact,
};

struct MegaMoeConfig {
  MoeShape shape;
  /// The peer payload of the combine rows (fused stage 2 -> combine).
  PeerPayload payload = PeerPayload::Bf16;
  /// EP size; rank r owns experts [r * E / ep, (r + 1) * E / ep).
  int64_t ep = 1;
  Transport transport = Transport::FixedSlot;
  int64_t mTile = 32;
  /// Fixed-slot receive slots per local expert; 0 picks
  /// roundup(ep * max tokens per rank, 32) (enough unless a token routes
  /// twice to one expert).
  int64_t slotCapacity = 0;
  /// Compact: limit on a rank's planned receive rows (0 = no limit);
  /// exceeding it is reported as an error.
  int64_t compactCapacity = 0;
  /// Clamped SwiGLU limit (DeepSeek V4: 10); W13 is gate rows then up rows.
  double swigluLimit = 10.0;
  /// GPT-OSS's SwiGLU instead of SiLU, as for family 2.
  bool gptOssSwiglu = false;
  /// Indexed by global expert id, as the weights.
  ExpertBias bias;
  OracleMode mode = OracleMode::QuantFaithful;
  /// As TpMoeConfig::outputTolerance.
  bool outputTolerance = false;
  int numThreads = 0;
};

/// Where the routes received by one rank sit in its receive buffer.
struct ReceivePlan {
  /// Receive rows (fixed-slot: local experts x capacity; compact: planned).
  int64_t numRows = 0;
  /// Per receive row: the source rank and its route id there
  /// (token * topk + k); -1 for empty slots and padding rows.
  std::vector<int32_t> sourceRank;
  std::vector<int32_t> sourceRoute;
  /// Routes received per local expert.
  std::vector<int64_t> expertCounts;
  /// Compact: first receive row of each local expert (fixed-slot: e * cap).
  std::vector<int64_t> expertBase;
  /// The GEMM list over receive rows: "route ids" are receive rows, the
  /// sentinel is numRows, tile expert ids are global expert ids.
  SortedRoutes rows;
};

/// Plans the dispatch of every rank's routes (deterministic: within an
/// expert, source ranks in increasing order, routes in increasing id).
/// Fails with a one-line message on a fixed-slot overflow or a compact
/// capacity overflow, naming the rank and expert.
Status planDispatch(const MegaMoeConfig &config,
                    const std::vector<TokenBatch> &ranks,
                    std::vector<ReceivePlan> &plans);

/// Per-rank results of family 1: `stages.routes` is the receive-row list,
/// activation / intermediate / downRows are indexed by receive row, and
/// inputCodes / output by the rank's own tokens.
struct MegaMoeRankResult {
  ReceivePlan plan;
  StageResults stages;
};

/// Family 1 over ep simulated ranks (ranks.size() == ep). w13: [E, 2I, H]
/// gate rows then up rows; w2: [E, H, I]; both indexed by global expert id.
Status runMegaMoe(const MegaMoeConfig &config, const WeightSource &w13,
                  const WeightSource &w2, const std::vector<TokenBatch> &ranks,
                  std::vector<MegaMoeRankResult> &results);

/// Checks a batch's array sizes against the shape (message names the field).
Status validateBatch(const TokenBatch &batch, const MoeShape &shape,
                     const std::string &what);

} // namespace moec::ref

#endif // MOEC_REFERENCE_FAMILIES_H
