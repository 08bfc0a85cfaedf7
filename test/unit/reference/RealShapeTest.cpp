// The real DeepSeek V4.1 Flash shape (H 5120, I 2304, E 384, top-6) through
// the MegaMoE oracle at EP4 with M = 6 tokens per rank, multi-threaded.
// Hidden by default ([.real]); run with: moec-reference-tests "[.real]"

#include "NaiveOracle.h"

#include "moec/reference/Families.h"
#include "moec/reference/Generate.h"
#include "moec/reference/Parallel.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <sys/resource.h>

using namespace moec::ref;

TEST_CASE("real Flash shape, EP4, M = 6 per rank", "[.real]") {
  const ShapePreset *preset = findShapePreset("flash");
  REQUIRE(preset);
  const MoeShape shape = preset->shape;
  GeneratedMxfp4Weights w13(1, 13, shape.experts, 2 * shape.intermediate,
                            shape.hidden, defaultScaleExponent(shape.hidden));
  GeneratedMxfp4Weights w2(1, 2, shape.experts, shape.hidden, shape.intermediate,
                           defaultScaleExponent(shape.intermediate));
  std::vector<TokenBatch> ranks;
  for (int64_t rank = 0; rank < 4; ++rank)
    ranks.push_back(generateBatch(1, rank, 6, shape, RoutingOptions{}));
  MegaMoeConfig config;
  config.shape = shape;
  config.ep = 4;
  config.transport = Transport::FixedSlot;
  config.mode = OracleMode::QuantFaithful;
  auto cpuSeconds = [] {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
           1e-6 * (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
  };
  double cpuStart = cpuSeconds();
  auto start = std::chrono::steady_clock::now();
  std::vector<MegaMoeRankResult> results;
  REQUIRE(runMegaMoe(config, w13, w2, ranks, results).ok());
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::printf("flash EP4 M=6 fixed-slot faithful: %.2f s wall, %.2f s CPU, "
              "%d threads, peak RSS %.0f MiB\n",
              seconds, cpuSeconds() - cpuStart, resolveThreadCount(0),
              usage.ru_maxrss / 1024.0);

  // Token 0 of rank 0, recomputed by the naive formulation from its experts'
  // rows materialised on their own.
  const TokenBatch &batch = ranks[0];
  naive::Layer layer;
  layer.hidden = shape.hidden;
  layer.intermediate = shape.intermediate;
  layer.clampLimit = 10.0;
  layer.quantize = true;
  layer.w13.resize(shape.experts);
  layer.w2.resize(shape.experts);
  for (int64_t k = 0; k < shape.topk; ++k) {
    int32_t expert = batch.topkIds[k];
    WeightScratch scratch;
    ExpertRows rows13 = w13.expertRows(expert, 0, 2 * shape.intermediate, scratch);
    std::vector<uint8_t> p13(rows13.elements,
                             rows13.elements + 2 * shape.intermediate * shape.hidden / 2);
    std::vector<uint8_t> s13(rows13.scales,
                             rows13.scales + 2 * shape.intermediate * shape.hidden / 32);
    layer.w13[expert] = naive::fromMxfp4(p13, s13, 0, 2 * shape.intermediate, shape.hidden);
    ExpertRows rows2 = w2.expertRows(expert, 0, shape.hidden, scratch);
    std::vector<uint8_t> p2(rows2.elements,
                            rows2.elements + shape.hidden * shape.intermediate / 2);
    std::vector<uint8_t> s2(rows2.scales,
                            rows2.scales + shape.hidden * shape.intermediate / 32);
    layer.w2[expert] = naive::fromMxfp4(p2, s2, 0, shape.hidden, shape.intermediate);
  }
  TokenBatch first;
  first.tokens = 1;
  first.hiddenBf16.assign(batch.hiddenBf16.begin(), batch.hiddenBf16.begin() + shape.hidden);
  first.topkIds.assign(batch.topkIds.begin(), batch.topkIds.begin() + shape.topk);
  first.topkWeights.assign(batch.topkWeights.begin(), batch.topkWeights.begin() + shape.topk);
  std::vector<double> expected = naive::runLayer(layer, first.hiddenBf16, first.topkIds,
                                                 first.topkWeights, 1, shape.topk);
  double errorSquares = 0, referenceSquares = 0;
  for (int64_t n = 0; n < shape.hidden; ++n) {
    double difference = results[0].stages.output[n] - expected[n];
    errorSquares += difference * difference;
    referenceSquares += expected[n] * expected[n];
  }
  CHECK(referenceSquares > 0);
  CHECK(std::sqrt(errorSquares / referenceSquares) < 1e-6);
  for (const MegaMoeRankResult &result : results)
    for (float value : result.stages.output)
      REQUIRE(std::isfinite(value));
}
