//===- W13Harness.h - the W13 stage on the emulator vs the oracle -*- C++ -*-===//
///
/// \file
/// Like W2Harness.h for the W13 stage (gate/up GEMM, clamped SwiGLU, FP8 1x32
/// quantisation of the intermediate): seeded FP8 tokens and MXFP4 W13
/// weights, a run with poisoned outputs, and a comparison of the kernel's
/// FP8 codes and E8M0 scales with the reference W13 stage.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_EMULATOR_W13HARNESS_H
#define MOEC_EMULATOR_W13HARNESS_H

#include "moec/Emulator/W2Harness.h"

namespace moec::emu {

struct W13Shape {
  int64_t hidden = 0, intermediate = 0, experts = 0, topK = 0, ep = 1;
  int64_t localExperts = 0;
  int64_t tileM = 0, tileN = 0, mfmaK = 0;
  /// Gate/up row interleave G (0: gate rows then up rows) and SwiGLU clamp.
  int64_t interleave = 0;
  double swigluLimit = 0.0;
  /// FHMoE: the last local expert is a shared FP8 expert (b_shared).
  bool sharedFp8 = false;
  /// tile.persist_cu (see W2Shape).
  int64_t persistCu = 0;
};

ref::Status parseW13Shape(const StageDescription &description, W13Shape &shape);

/// One W13 batch in device layout.
struct W13Data {
  int64_t tokens = 0, numRoutes = 0;
  std::vector<int32_t> topkIds;
  /// [tokens, H] FP8 + [tokens, H/32] E8M0: the generated BF16 tokens
  /// quantised with the activation recipe.
  std::vector<uint8_t> aCodes, aScales;
  /// [localExperts, 2I, H/2] packed E2M1 + [localExperts, 2I, H/32] E8M0
  /// (one expert fewer with a shared FP8 expert).
  std::vector<uint8_t> bPacked, bScales;
  /// The shared expert: [2I, H] FP8 + [2I, H/32] E8M0 (sharedFp8 only).
  std::vector<uint8_t> sharedCodes, sharedScales;
  /// Optional, one flag per MXFP4 expert of bPacked: experts without a flag
  /// were never generated and stay poisoned in the emulator, so a kernel
  /// that reads an expert no tile selects is a finding.
  std::vector<uint8_t> bExpertsPresent;
  ref::SortedRoutes sorted;
};

/// Uses W2DataOptions (seed, tokens, invalid fraction, hot rank, zero
/// experts, empty tiles) with the same meaning.
ref::Status generateW13Data(const W13Shape &shape, const W2DataOptions &options,
                            W13Data &data);

struct W13Outcome {
  RunResult run;
  bool launched = false;
  /// [numRoutes, I] FP8 codes and [numRoutes, I/32] scales as the kernel
  /// left them, with per-byte written flags.
  std::vector<uint8_t> outCodes, outScales, codesWritten, scalesWritten;
  /// Oracle: activation before quantisation and its quantised form.
  std::vector<double> activation;
  std::vector<uint8_t> oracleCodes, oracleScales;

  double relL2 = 0.0;
  double worstErrorOverTolerance = 0.0;
  int64_t elementsChecked = 0, elementsOverTolerance = 0;
  int64_t codesEqual = 0, scalesChecked = 0, scalesEqual = 0;
  int64_t nonFinite = 0;
  int64_t listedRowsUnwritten = 0, unlistedRowsWritten = 0;
  int64_t zeroExpertNonZero = 0;
  bool pass = false;
  std::string summary;
};

/// Relative L2 bound of the dequantised W13 output against the oracle's
/// activation before quantisation: the FP8 E4M3 unit roundoff 2^-4.
constexpr double kW13RelL2Bound = 1.0 / 16.0;

mlir::LogicalResult runW13(mlir::Operation *func, const W13Shape &shape,
                           const W13Data &data, const LaunchConfig &launch,
                           W13Outcome &outcome, std::string &error);

/// One FP8 E4M3 ulp at magnitude |x| for block scale `scale`: 3 mantissa
/// bits, normal exponents down to -6 (below that the subnormal step 2^-9).
double ulpFp8(double x, double scale);

/// Per element: |dequant(emu) - activation| <= one FP8 ulp at the kernel's
/// block scale (half an ulp of quantisation, the rest for FP32-vs-double
/// activation differences at a rounding tie); scales may differ from the
/// oracle's only where that holds; relL2 <= kW13RelL2Bound; listed rows
/// written, unlisted untouched, zero-weight experts exactly zero, no
/// findings.
void compareW13(const W13Shape &shape, const W13Data &data,
                const W2DataOptions &options, W13Outcome &outcome);

/// PREFIX{a_codes,a_scales,b_packed,b_scales,topk_ids,sorted_route_ids,
/// tile_experts,out_codes,out_scales,oracle_activation}.npy in `dir`.
ref::Status saveW13Arrays(const std::string &dir, const std::string &prefix,
                          const W13Shape &shape, const W13Data &data,
                          const W13Outcome &outcome);

/// The oracle's view of a route list: tiles without a valid expert (which
/// must hold only padding) dropped. Fails when such a tile lists a route.
ref::Status oracleRoutes(const ref::SortedRoutes &sorted, int64_t tileM,
                         int64_t localExperts, ref::SortedRoutes &view);

} // namespace moec::emu

#endif // MOEC_EMULATOR_W13HARNESS_H
