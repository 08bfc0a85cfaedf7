//===- Oracle.h - a case's output against the oracle ------------*- C++ -*-===//
///
/// \file
/// The self-test's numerics: the weights every case of a table shares, and
/// compareWithOracle(), the one place that decides whether a layer's
/// output matches the reference oracle (docs/emulator.md, "Tolerances").
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_SELFTEST_ORACLE_H
#define MOEC_SELFTEST_ORACLE_H

#include "moec/Harness/LayerSetup.h"
#include "moec/Harness/StageHarness.h"
#include "moec/reference/Families.h"
#include "moec/reference/Generate.h"
#include "moec/reference/Tolerance.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace moec::selftest {

/// The final output's relative L2 bound against the quantisation-faithful
/// oracle: 2^-7, from the BF16 output's rounding (docs/numerics.md, "The
/// final output"); every element must also lie within the oracle's own
/// per-element bound.
inline constexpr double kLayerRelL2Bound = ref::kLayerOutputRelL2Bound;

/// A table's weights, seeded: routed experts in checkpoint numbering
/// (generated on demand), FHMoE's shared expert and, with facts.bias, N(0, 1)
/// FP32 biases, one row per expert of the weights (FHMoE: the shared
/// expert's last).
struct SelftestWeights {
  std::unique_ptr<ref::GeneratedMxfp4Weights> w13, w2;
  std::vector<uint8_t> sharedW13, sharedW13Scales, sharedW2, sharedW2Scales;
  ref::ExpertBias bias;
};

/// Generates a table's weights from `seed` into `weights`, and their host
/// copies in the device layout into `host`.
void generateWeights(uint64_t seed, const harness::TableFacts &facts,
                     SelftestWeights &weights, harness::HostLayerWeights &host);

/// What the oracle is run with for one case.
struct OracleCase {
  const harness::TableFacts *facts = nullptr;
  const SelftestWeights *weights = nullptr;
  /// The oracle's W13 activation: GPT-OSS's SwiGLU, SiTUv2 (with the
  /// table's betas, TableFacts), or SiLU.
  bool gptOssSwiglu = false;
  bool situV2 = false;
  /// The oracle's token rows and intermediate are MXFP4 (A4W4) instead of
  /// FP8 (TpMoeConfig::inputFormat, intermediateFormat).
  bool tokensFp4 = false, intermediateFp4 = false;
  /// A16W4: BF16 token rows and intermediate (both formats Bf16; overrides
  /// the two above).
  bool bf16 = false;
  /// The "clamp" case: also measured against the oracle without the clamp.
  bool clampCase = false;
  uint32_t ep = 1;
};

/// How far a case's output is from the oracle's, and the verdict.
struct OracleComparison {
  bool pass = false;
  /// The largest distance over the ranks (a non-finite element fails).
  emu::OutputDistance distance;
  /// Output elements of tokens with no valid route that are not zero, and
  /// elements the layer left unwritten (still the 0xFFFF poison).
  int64_t zeroRowsWrong = 0, unwritten = 0;
  /// Finite elements outside their own bound (StageResults::outputTolerance,
  /// plus each rank's BF16 rounding when ranks' partial outputs are summed),
  /// and the largest error / bound over all elements.
  int64_t overBound = 0;
  double worstOverBound = 0.0;
  /// The clamp case: the smallest distance from the unclamped oracle, which
  /// must exceed the bound (otherwise it did not exercise the clamp).
  double unclampedRelL2 = 0.0;
  /// With biases: the largest distance from the oracle without them, which
  /// must exceed the bound (a kernel that dropped its bias would not).
  double unbiasedRelL2 = 0.0;
  /// The oracle's output per oracle run: each rank's when the ranks have
  /// their own batches (fused), else one for the shared batch.
  std::vector<std::vector<float>> oracleOutputs;
};

/// Compares the layer's BF16 outputs `got` (per rank, [M, H]) for the
/// tokens `batches` with the quantisation-faithful oracle: each rank's own
/// output (fused) or the sum of every rank's partial output against the
/// oracle, within kLayerRelL2Bound and every element within its own bound,
/// no non-finite element, tokens without a valid route exactly zero, nothing
/// unwritten. Fails (not OK) only when the oracle does.
ref::Status compareWithOracle(const OracleCase &oracle,
                              const std::vector<ref::TokenBatch> &batches,
                              const std::vector<std::vector<uint16_t>> &got,
                              OracleComparison &comparison);

} // namespace moec::selftest

#endif // MOEC_SELFTEST_ORACLE_H
