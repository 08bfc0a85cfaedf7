//===- Oracle.cpp - a case's output against the oracle --------------------===//

#include "moec/Selftest/Oracle.h"

#include "moec/reference/Formats.h"
#include "moec/reference/Routing.h"

#include <algorithm>
#include <cmath>

namespace moec::selftest {

void generateWeights(uint64_t seed, const harness::TableFacts &facts,
                     SelftestWeights &weights, harness::HostLayerWeights &host) {
  const int64_t H = facts.problem.hidden, I = facts.problem.intermediate;
  const int64_t E = facts.problem.experts;
  weights.w13 = std::make_unique<ref::GeneratedMxfp4Weights>(
      seed, 13, E, 2 * I, H, ref::defaultScaleExponent(H));
  weights.w2 = std::make_unique<ref::GeneratedMxfp4Weights>(
      seed, 2, E, H, I, ref::defaultScaleExponent(I));
  host = harness::HostLayerWeights();
  host.experts = E;
  ref::materializeWeights(*weights.w13, host.w13, host.w13Scales);
  ref::materializeWeights(*weights.w2, host.w2, host.w2Scales);
  if (facts.shared) {
    ref::generateFp8Expert(seed, 113, 2 * I, H, weights.sharedW13,
                           weights.sharedW13Scales);
    ref::generateFp8Expert(seed, 112, H, I, weights.sharedW2,
                           weights.sharedW2Scales);
    host.sharedW13 = weights.sharedW13;
    host.sharedW13Scales = weights.sharedW13Scales;
    host.sharedW2 = weights.sharedW2;
    host.sharedW2Scales = weights.sharedW2Scales;
  }
  weights.bias = ref::ExpertBias();
  const int64_t biasRows = E + (facts.shared ? 1 : 0);
  if (facts.bias) {
    harness::generateBiases(seed, biasRows, H, I, weights.bias.w13,
                            weights.bias.w2);
    host.w13Bias = weights.bias.w13;
    host.w2Bias = weights.bias.w2;
  }
}

namespace {

/// The oracle layer (TPMoE, or FHMoE with the shared expert) on one batch.
ref::Status runOracle(const OracleCase &oracle, const ref::TpMoeConfig &config,
                      const ref::TokenBatch &batch, ref::StageResults &results) {
  const SelftestWeights &w = *oracle.weights;
  if (!oracle.facts->shared)
    return ref::runTpMoe(config, *w.w13, *w.w2, batch, results);
  ref::FhMoeConfig fh;
  fh.tp = config;
  ref::SharedExpertWeights shared{w.sharedW13.data(), w.sharedW13Scales.data(),
                                  w.sharedW2.data(), w.sharedW2Scales.data()};
  return ref::runFhMoe(fh, *w.w13, *w.w2, &shared, batch, results);
}

/// Counts the finite elements of `got` farther from `want` than `bound`
/// allows (non-finite ones are outputDistance's to count), and the largest
/// error / bound.
void countOverBound(const std::vector<double> &got, const std::vector<float> &want,
                    const std::vector<double> &bound,
                    OracleComparison &comparison) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]))
      continue;
    const double error = std::fabs(got[i] - double(want[i]));
    if (!(error <= bound[i]))
      ++comparison.overBound;
    const double ratio =
        bound[i] > 0 ? error / bound[i] : (error > 0 ? INFINITY : 0.0);
    comparison.worstOverBound = std::max(comparison.worstOverBound, ratio);
  }
}

} // namespace

ref::Status compareWithOracle(const OracleCase &oracle,
                              const std::vector<ref::TokenBatch> &batches,
                              const std::vector<std::vector<uint16_t>> &got,
                              OracleComparison &comparison) {
  const harness::TableFacts &facts = *oracle.facts;
  const int64_t H = facts.problem.hidden, E = facts.problem.experts;
  const int64_t K = facts.problem.topK;
  const int64_t M = int64_t(batches.front().topkIds.size()) / K;
  ref::TpMoeConfig tp;
  tp.shape = {H, int64_t(facts.problem.intermediate), E, K};
  tp.mTile = 16;
  tp.gateUpInterleave = facts.interleave;
  tp.swigluLimit = facts.swigluLimit;
  tp.gptOssSwiglu = oracle.gptOssSwiglu;
  tp.situV2 = oracle.situV2;
  tp.situBeta = facts.situBeta;
  tp.situLinearBeta = facts.situLinearBeta;
  tp.bias = oracle.weights->bias;
  tp.mode = ref::OracleMode::QuantFaithful;
  tp.inputFormat = oracle.tokensFp4 ? ref::ActivationFormat::Mxfp4
                                    : ref::ActivationFormat::Fp8E4M3;
  tp.intermediateFormat = oracle.intermediateFp4
                              ? ref::ActivationFormat::Mxfp4
                              : ref::ActivationFormat::Fp8E4M3;
  if (oracle.bf16)
    tp.inputFormat = tp.intermediateFormat = ref::ActivationFormat::Bf16;
  tp.outputTolerance = true;
  // A fused table whose stage 2 sends FP8 rows: the oracle rounds them too.
  tp.payload = facts.fp8PeerPayload ? ref::PeerPayload::Fp8
                                    : ref::PeerPayload::Bf16;

  comparison = OracleComparison();
  comparison.unclampedRelL2 = oracle.clampCase ? INFINITY : 0.0;
  const bool ownBatches = facts.fused;
  const uint32_t oracleRuns = ownBatches ? oracle.ep : 1;
  for (uint32_t r = 0; r < oracleRuns; ++r) {
    ref::StageResults results;
    if (ref::Status status = runOracle(oracle, tp, batches[r], results);
        !status.ok())
      return status;
    // The kernels' output: this rank's, or the sum of every rank's partial;
    // each partial was rounded to BF16 on its own, half a BF16 ulp (2^-8 of
    // its magnitude) each beyond the oracle's one rounding.
    std::vector<double> out(size_t(M * H), 0.0);
    std::vector<double> bound = results.outputTolerance;
    const uint32_t parts = ownBatches ? 1 : oracle.ep;
    for (uint32_t p = 0; p < parts; ++p) {
      const std::vector<uint16_t> &bits = got[ownBatches ? r : p];
      for (size_t i = 0; i < out.size(); ++i) {
        if (bits[i] == 0xFFFF)
          ++comparison.unwritten;
        const double value = ref::decodeBf16(bits[i]);
        out[i] += value;
        if (parts > 1)
          bound[i] += 0x1p-8 * std::fabs(value);
      }
    }
    countOverBound(out, results.output, bound, comparison);
    for (int64_t t = 0; t < M; ++t) {
      bool anyValid = facts.shared;
      for (int64_t k = 0; k < K; ++k)
        anyValid |= ref::isValidExpert(batches[r].topkIds[size_t(t * K + k)], E);
      if (!anyValid)
        for (int64_t h = 0; h < H; ++h)
          comparison.zeroRowsWrong += out[size_t(t * H + h)] != 0.0;
    }
    comparison.distance.merge(emu::outputDistance(out, results.output));
    // The output's distance from the oracle run with `config` instead.
    auto distanceFrom = [&](ref::TpMoeConfig config, double &relL2) {
      config.outputTolerance = false;
      ref::StageResults other;
      ref::Status status = runOracle(oracle, config, batches[r], other);
      if (status.ok())
        relL2 = emu::outputDistance(out, other.output).relL2;
      return status;
    };
    double relL2 = 0.0;
    if (oracle.clampCase) {
      ref::TpMoeConfig noClamp = tp;
      noClamp.swigluLimit = 0.0;
      if (ref::Status status = distanceFrom(noClamp, relL2); !status.ok())
        return status;
      comparison.unclampedRelL2 = std::min(comparison.unclampedRelL2, relL2);
    }
    if (facts.bias) {
      ref::TpMoeConfig noBias = tp;
      noBias.bias = ref::ExpertBias();
      if (ref::Status status = distanceFrom(noBias, relL2); !status.ok())
        return status;
      comparison.unbiasedRelL2 = std::max(comparison.unbiasedRelL2, relL2);
    }
    comparison.oracleOutputs.push_back(std::move(results.output));
  }
  comparison.pass = comparison.distance.within(kLayerRelL2Bound) &&
                    comparison.overBound == 0 && comparison.zeroRowsWrong == 0 &&
                    comparison.unwritten == 0;
  if (oracle.clampCase)
    comparison.pass = comparison.pass && comparison.unclampedRelL2 > kLayerRelL2Bound;
  if (facts.bias)
    comparison.pass = comparison.pass && comparison.unbiasedRelL2 > kLayerRelL2Bound;
  return ref::Status();
}

} // namespace moec::selftest
