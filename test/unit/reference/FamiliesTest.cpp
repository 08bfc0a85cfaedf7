// The three family oracles against the naive formulation (NaiveOracle.cpp)
// at small shapes, for both modes and both MegaMoE transports, plus the edge
// cases: invalid routes, wholly invalid rows, empty ranks, unequal batches,
// hot-rank routing, M-tile padding boundaries, overflow, zero W2, and the
// FHMoE / family 2 bit-for-bit identity.

#include "NaiveOracle.h"
#include "TestData.h"

#include "moec/reference/Families.h"
#include "moec/reference/Generate.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

using namespace moec::ref;
using testdata::compareWithNaive;
using testdata::DenseLayer;
using testdata::rankBatches;

namespace {

std::vector<double> naiveFor(const DenseLayer &layer, const TokenBatch &batch,
                             bool quantize) {
  naive::Layer copy = layer.naiveLayer;
  copy.quantize = quantize;
  return naive::runLayer(copy, batch.hiddenBf16, batch.topkIds,
                         batch.topkWeights, batch.tokens, layer.shape.topk);
}

const char *modeName(OracleMode mode) {
  return mode == OracleMode::Exact ? "exact" : "faithful";
}

/// Makes every slot of `token` invalid and gives those slots NaN weights,
/// which must not leak into the output.
void invalidateToken(TokenBatch &batch, int64_t topk, int64_t token,
                     int64_t experts) {
  for (int64_t k = 0; k < topk; ++k) {
    batch.topkIds[token * topk + k] =
        k % 2 ? -1 : static_cast<int32_t>(experts + k);
    batch.topkWeights[token * topk + k] = std::numeric_limits<float>::quiet_NaN();
  }
}

void requireZeroRow(const StageResults &results, int64_t token, int64_t hidden) {
  for (int64_t n = 0; n < hidden; ++n) {
    REQUIRE(testdata::bitsOf(results.output[token * hidden + n]) == 0u);
    REQUIRE(results.outputBf16[token * hidden + n] == 0);
  }
}

} // namespace

TEST_CASE("family 2 (TP fused MoE) matches the naive formulation", "[families]") {
  const MoeShape shape{128, 64, 8, 3};
  for (OracleMode mode : {OracleMode::QuantFaithful, OracleMode::Exact}) {
    for (int64_t interleave : {16, 1, 0}) {
      for (double limit : {0.0, 2.0}) {
        DYNAMIC_SECTION(modeName(mode) << " interleave " << interleave
                                       << " limit " << limit) {
          GluConfig glu{interleave, limit};
          DenseLayer layer(shape, glu, 100 + interleave, /*scaleOffset=*/1);
          RoutingOptions routing;
          routing.invalidFraction = 0.15;
          TokenBatch batch = generateBatch(7, 0, 21, shape, routing);
          invalidateToken(batch, shape.topk, 4, shape.experts);
          TpMoeConfig config;
          config.shape = shape;
          config.mTile = 4;
          config.gateUpInterleave = interleave;
          config.swigluLimit = limit;
          config.mode = mode;
          config.numThreads = 2;
          StageResults results;
          REQUIRE(runTpMoe(config, *layer.w13, *layer.w2, batch, results).ok());
          compareWithNaive(results.output, results.outputBf16,
                           naiveFor(layer, batch, mode == OracleMode::QuantFaithful));
          requireZeroRow(results, 4, shape.hidden);
          // Stage arrays have the documented extents.
          CHECK(results.activation.size() ==
                size_t(batch.tokens * shape.topk * shape.intermediate));
          CHECK(results.downRows.size() ==
                size_t(batch.tokens * shape.topk * shape.hidden));
          CHECK(results.intermediateCodes.size() ==
                (mode == OracleMode::QuantFaithful
                     ? size_t(batch.tokens * shape.topk * shape.intermediate)
                     : 0u));
        }
      }
    }
  }
}

TEST_CASE("family 2 A4W4: MXFP4 input, FP4 or FP8 intermediate, matches the "
          "naive formulation",
          "[families]") {
  const MoeShape shape{128, 64, 8, 3};
  for (ActivationFormat intermediate :
       {ActivationFormat::Mxfp4, ActivationFormat::Fp8E4M3}) {
    const bool fp4 = intermediate == ActivationFormat::Mxfp4;
    DYNAMIC_SECTION("intermediate " << (fp4 ? "fp4" : "fp8")) {
      GluConfig glu{16, 0.0};
      DenseLayer layer(shape, glu, 140, /*scaleOffset=*/1);
      TokenBatch batch = generateBatch(9, 0, 19, shape, RoutingOptions{});
      TpMoeConfig config;
      config.shape = shape;
      config.mTile = 4;
      config.gateUpInterleave = 16;
      config.inputFormat = ActivationFormat::Mxfp4;
      config.intermediateFormat = intermediate;
      config.outputTolerance = true;
      config.numThreads = 2;
      StageResults results;
      REQUIRE(runTpMoe(config, *layer.w13, *layer.w2, batch, results).ok());
      naive::Layer copy = layer.naiveLayer;
      copy.quantize = true;
      copy.fp4Input = true;
      copy.fp4Intermediate = fp4;
      compareWithNaive(results.output, results.outputBf16,
                       naive::runLayer(copy, batch.hiddenBf16, batch.topkIds,
                                       batch.topkWeights, batch.tokens,
                                       shape.topk));
      // MXFP4 rows are half the bytes of FP8 rows.
      CHECK(results.inputCodes.size() == size_t(batch.tokens * shape.hidden / 2));
      CHECK(results.intermediateCodes.size() ==
            size_t(batch.tokens * shape.topk * shape.intermediate / (fp4 ? 2 : 1)));
      // The per-element tolerance exists for every output element.
      CHECK(results.outputTolerance.size() == results.output.size());
      // A4W4 moves the output away from the A8W4 oracle by far more than the
      // output's own rounding: the quantisation is really MXFP4.
      TpMoeConfig a8w4 = config;
      a8w4.inputFormat = ActivationFormat::Fp8E4M3;
      a8w4.intermediateFormat = ActivationFormat::Fp8E4M3;
      StageResults fp8Results;
      REQUIRE(runTpMoe(a8w4, *layer.w13, *layer.w2, batch, fp8Results).ok());
      double diff = 0, norm = 0;
      for (size_t i = 0; i < results.output.size(); ++i) {
        diff += std::pow(double(results.output[i]) - fp8Results.output[i], 2);
        norm += std::pow(double(fp8Results.output[i]), 2);
      }
      CHECK(std::sqrt(diff / norm) > 0x1p-6);
    }
  }
}

TEST_CASE("family 2: the M tile changes nothing but the padding", "[families]") {
  const MoeShape shape{64, 32, 4, 2};
  DenseLayer layer(shape, GluConfig{16, 0}, 5);
  TokenBatch batch = generateBatch(8, 0, 16, shape, RoutingOptions{});
  // Force one expert to receive exactly 8 routes and another 9 (tile
  // boundaries at M tile 8, 4, 3 and 1).
  for (int64_t t = 0; t < 8; ++t)
    batch.topkIds[t * 2] = 0;
  for (int64_t t = 0; t < 8; ++t)
    batch.topkIds[t * 2 + 1] = 1;
  batch.topkIds[8 * 2] = 1;
  batch.topkIds[8 * 2 + 1] = 2;
  TpMoeConfig config;
  config.shape = shape;
  config.gateUpInterleave = 16;
  std::vector<float> first;
  for (int64_t mTile : {8, 4, 3, 1, 64}) {
    config.mTile = mTile;
    StageResults results;
    REQUIRE(runTpMoe(config, *layer.w13, *layer.w2, batch, results).ok());
    CHECK(results.routes.routeIds.size() % mTile == 0);
    if (first.empty())
      first = results.output;
    else
      REQUIRE(results.output == first);
  }
}

TEST_CASE("family 2: zero W2 gives exactly zero output", "[families]") {
  const MoeShape shape{64, 32, 4, 2};
  DenseLayer layer(shape, GluConfig{16, 0}, 6);
  std::fill(layer.w2Packed.begin(), layer.w2Packed.end(), 0);
  TokenBatch batch = generateBatch(9, 0, 10, shape, RoutingOptions{});
  for (OracleMode mode : {OracleMode::QuantFaithful, OracleMode::Exact}) {
    TpMoeConfig config;
    config.shape = shape;
    config.mode = mode;
    StageResults results;
    REQUIRE(runTpMoe(config, *layer.w13, *layer.w2, batch, results).ok());
    for (int64_t t = 0; t < batch.tokens; ++t)
      requireZeroRow(results, t, shape.hidden);
  }
}

TEST_CASE("family 3 (FHMoE) matches the naive formulation with the shared expert",
          "[families]") {
  const MoeShape shape{128, 64, 6, 2};
  GluConfig glu{16, 0};
  DenseLayer layer(shape, glu, 300);
  std::vector<uint8_t> s13Codes, s13Scales, s2Codes, s2Scales;
  generateFp8Expert(300, 1, 2 * shape.intermediate, shape.hidden, s13Codes, s13Scales);
  generateFp8Expert(300, 2, shape.hidden, shape.intermediate, s2Codes, s2Scales);
  SharedExpertWeights shared{s13Codes.data(), s13Scales.data(), s2Codes.data(),
                             s2Scales.data()};
  DenseLayer withShared(shape, glu, 300); // naive copy gets the shared expert
  withShared.naiveLayer.w13.push_back(
      naive::fromFp8(s13Codes, s13Scales, 2 * shape.intermediate, shape.hidden));
  withShared.naiveLayer.w2.push_back(
      naive::fromFp8(s2Codes, s2Scales, shape.hidden, shape.intermediate));

  RoutingOptions routing;
  routing.invalidFraction = 0.1;
  TokenBatch batch = generateBatch(10, 0, 13, shape, routing);
  invalidateToken(batch, shape.topk, 2, shape.experts);
  // The naive formulation routes every token to expert E with weight 1 in an
  // extra last slot, written out here.
  TokenBatch naiveBatch = batch;
  naiveBatch.topkIds.clear();
  naiveBatch.topkWeights.clear();
  for (int64_t t = 0; t < batch.tokens; ++t) {
    for (int64_t k = 0; k < shape.topk; ++k) {
      int32_t id = batch.topkIds[t * shape.topk + k];
      // Routed slots are valid only for ids below E.
      naiveBatch.topkIds.push_back(id < shape.experts ? id : -1);
      naiveBatch.topkWeights.push_back(batch.topkWeights[t * shape.topk + k]);
    }
    naiveBatch.topkIds.push_back(static_cast<int32_t>(shape.experts));
    naiveBatch.topkWeights.push_back(1.0f);
  }
  for (OracleMode mode : {OracleMode::QuantFaithful, OracleMode::Exact}) {
    DYNAMIC_SECTION(modeName(mode)) {
      FhMoeConfig config;
      config.tp.shape = shape;
      config.tp.gateUpInterleave = glu.interleave;
      config.tp.mode = mode;
      config.tp.mTile = 8;
      StageResults results;
      REQUIRE(runFhMoe(config, *layer.w13, *layer.w2, &shared, batch, results).ok());
      naive::Layer naiveLayer = withShared.naiveLayer;
      naiveLayer.quantize = mode == OracleMode::QuantFaithful;
      std::vector<double> expected =
          naive::runLayer(naiveLayer, naiveBatch.hiddenBf16, naiveBatch.topkIds,
                          naiveBatch.topkWeights, batch.tokens, shape.topk + 1);
      compareWithNaive(results.output, results.outputBf16, expected);
      // The token whose routed slots are all invalid still gets the shared
      // expert, so its row is not zero.
      bool nonZero = false;
      for (int64_t n = 0; n < shape.hidden; ++n)
        nonZero |= results.output[2 * shape.hidden + n] != 0.0f;
      CHECK(nonZero);
      CHECK(results.routes.numRoutes == batch.tokens * (shape.topk + 1));
    }
  }
}

TEST_CASE("family 3 without the shared expert equals family 2 bit for bit",
          "[families]") {
  const MoeShape shape{128, 64, 8, 3};
  GluConfig glu{16, 0};
  DenseLayer layer(shape, glu, 400);
  RoutingOptions routing;
  routing.invalidFraction = 0.1;
  TokenBatch batch = generateBatch(11, 0, 17, shape, routing);
  std::vector<uint8_t> s13Codes, s13Scales, s2Codes, s2Scales;
  generateFp8Expert(400, 1, 2 * shape.intermediate, shape.hidden, s13Codes, s13Scales);
  generateFp8Expert(400, 2, shape.hidden, shape.intermediate, s2Codes, s2Scales);
  for (OracleMode mode : {OracleMode::QuantFaithful, OracleMode::Exact}) {
    TpMoeConfig tp;
    tp.shape = shape;
    tp.mode = mode;
    StageResults family2;
    REQUIRE(runTpMoe(tp, *layer.w13, *layer.w2, batch, family2).ok());

    FhMoeConfig config;
    config.tp = tp;
    config.includeSharedExpert = false;
    StageResults omitted;
    REQUIRE(runFhMoe(config, *layer.w13, *layer.w2, nullptr, batch, omitted).ok());
    REQUIRE(omitted.output == family2.output);
    REQUIRE(omitted.outputBf16 == family2.outputBf16);
    REQUIRE(omitted.intermediateCodes == family2.intermediateCodes);

    // A shared expert whose W2 is all zero adds exactly +0 to every output:
    // the routed part must still be bit-identical although the route list,
    // the route numbering (topk + 1 slots) and the tiles all differ.
    std::vector<uint8_t> zeroCodes(s2Codes.size(), 0);
    SharedExpertWeights zeroShared{s13Codes.data(), s13Scales.data(),
                                   zeroCodes.data(), s2Scales.data()};
    config.includeSharedExpert = true;
    StageResults zeroSharedResults;
    REQUIRE(runFhMoe(config, *layer.w13, *layer.w2, &zeroShared, batch,
                     zeroSharedResults)
                .ok());
    REQUIRE(zeroSharedResults.output == family2.output);
    REQUIRE(zeroSharedResults.outputBf16 == family2.outputBf16);
    // Missing shared weights are reported, not dereferenced.
    CHECK_FALSE(runFhMoe(config, *layer.w13, *layer.w2, nullptr, batch, omitted).ok());
  }
}

namespace {

struct MegaCase {
  int64_t ep;
  Transport transport;
  OracleMode mode;
};

void checkMegaAgainstNaive(const DenseLayer &layer, const MegaMoeConfig &config,
                           const std::vector<TokenBatch> &ranks,
                           std::vector<MegaMoeRankResult> &results) {
  REQUIRE(runMegaMoe(config, *layer.w13, *layer.w2, ranks, results).ok());
  REQUIRE(results.size() == ranks.size());
  for (size_t rank = 0; rank < ranks.size(); ++rank) {
    INFO("rank " << rank);
    compareWithNaive(results[rank].stages.output, results[rank].stages.outputBf16,
                     naiveFor(layer, ranks[rank],
                              config.mode == OracleMode::QuantFaithful));
  }
}

} // namespace

TEST_CASE("family 1 (MegaMoE EP) matches the naive formulation", "[families]") {
  const MoeShape shape{128, 64, 16, 4};
  GluConfig glu{0, 10.0};
  DenseLayer layer(shape, glu, 500, /*scaleOffset=*/3); // activations hit the clamp
  for (MegaCase c : {MegaCase{2, Transport::FixedSlot, OracleMode::QuantFaithful},
                     MegaCase{2, Transport::Compact, OracleMode::QuantFaithful},
                     MegaCase{4, Transport::FixedSlot, OracleMode::QuantFaithful},
                     MegaCase{4, Transport::Compact, OracleMode::QuantFaithful},
                     MegaCase{4, Transport::FixedSlot, OracleMode::Exact},
                     MegaCase{2, Transport::Compact, OracleMode::Exact}}) {
    DYNAMIC_SECTION("EP" << c.ep << (c.transport == Transport::FixedSlot ? " fixed-slot " : " compact ")
                         << modeName(c.mode)) {
      MegaMoeConfig config;
      config.shape = shape;
      config.ep = c.ep;
      config.transport = c.transport;
      config.mode = c.mode;
      config.mTile = 4;
      config.numThreads = 2;
      RoutingOptions routing;
      routing.invalidFraction = 0.1;
      // Unequal local batches, one rank empty.
      std::vector<int64_t> tokens = {9, 0, 5, 12};
      std::vector<TokenBatch> ranks = rankBatches(shape, c.ep, tokens, routing, 50);
      invalidateToken(ranks[0], shape.topk, 3, shape.experts);
      std::vector<MegaMoeRankResult> results;
      checkMegaAgainstNaive(layer, config, ranks, results);
      requireZeroRow(results[0].stages, 3, shape.hidden);
      CHECK(results[1].stages.output.empty());
      // Every valid route was received exactly once somewhere.
      int64_t valid = 0, received = 0;
      for (const TokenBatch &batch : ranks)
        for (int32_t id : batch.topkIds)
          valid += isValidExpert(id, shape.experts);
      for (const MegaMoeRankResult &result : results)
        for (int64_t count : result.plan.expertCounts)
          received += count;
      CHECK(received == valid);
    }
  }
}

TEST_CASE("family 1: transports agree bit for bit and equal family 2 per rank",
          "[families]") {
  const MoeShape shape{128, 64, 16, 4};
  DenseLayer layer(shape, GluConfig{0, 10.0}, 600, 2);
  std::vector<TokenBatch> ranks =
      rankBatches(shape, 4, {7, 3, 0, 8}, RoutingOptions{0, 0, 0.05}, 60);
  MegaMoeConfig config;
  config.shape = shape;
  config.ep = 4;
  config.mTile = 8;
  std::vector<MegaMoeRankResult> fixedSlot, compact;
  config.transport = Transport::FixedSlot;
  REQUIRE(runMegaMoe(config, *layer.w13, *layer.w2, ranks, fixedSlot).ok());
  config.transport = Transport::Compact;
  REQUIRE(runMegaMoe(config, *layer.w13, *layer.w2, ranks, compact).ok());
  for (int64_t rank = 0; rank < 4; ++rank) {
    REQUIRE(fixedSlot[rank].stages.output == compact[rank].stages.output);
    TpMoeConfig tp;
    tp.shape = shape;
    tp.gateUpInterleave = 0;
    tp.swigluLimit = 10.0;
    StageResults family2;
    REQUIRE(runTpMoe(tp, *layer.w13, *layer.w2, ranks[rank], family2).ok());
    REQUIRE(fixedSlot[rank].stages.output == family2.output);
    REQUIRE(fixedSlot[rank].stages.outputBf16 == family2.outputBf16);
  }
  // Compact plan: each expert's rows are contiguous, padded to the M tile,
  // sources in rank order inside an expert.
  for (const MegaMoeRankResult &result : compact) {
    const ReceivePlan &plan = result.plan;
    CHECK(plan.numRows % config.mTile == 0);
    for (size_t local = 0; local < plan.expertBase.size(); ++local) {
      int64_t base = plan.expertBase[local];
      CHECK(base % config.mTile == 0);
      for (int64_t i = 1; i < plan.expertCounts[local]; ++i) {
        int64_t row = base + i;
        bool ordered = plan.sourceRank[row - 1] < plan.sourceRank[row] ||
                       (plan.sourceRank[row - 1] == plan.sourceRank[row] &&
                        plan.sourceRoute[row - 1] < plan.sourceRoute[row]);
        REQUIRE(ordered);
      }
    }
  }
}

TEST_CASE("family 1: hot-rank routing, and overflow is reported, never dropped",
          "[families]") {
  const MoeShape shape{64, 32, 16, 4};
  DenseLayer layer(shape, GluConfig{0, 10.0}, 700);
  RoutingOptions hot;
  hot.ep = 4;
  hot.hotRank = 2; // every route goes to rank 2's experts 8..11
  std::vector<TokenBatch> ranks = rankBatches(shape, 4, {8, 8, 6, 8}, hot, 70);
  for (Transport transport : {Transport::FixedSlot, Transport::Compact}) {
    MegaMoeConfig config;
    config.shape = shape;
    config.ep = 4;
    config.transport = transport;
    std::vector<MegaMoeRankResult> results;
    checkMegaAgainstNaive(layer, config, ranks, results);
    for (int64_t rank = 0; rank < 4; ++rank) {
      int64_t received = 0;
      for (int64_t count : results[rank].plan.expertCounts)
        received += count;
      CHECK(received == (rank == 2 ? 30 * 4 : 0));
      if (rank != 2)
        CHECK(results[rank].stages.routes.routeIds.empty());
    }
  }
  // Each of the 4 hot experts receives all 30 tokens: 8 slots overflow.
  MegaMoeConfig config;
  config.shape = shape;
  config.ep = 4;
  config.transport = Transport::FixedSlot;
  config.slotCapacity = 8;
  std::vector<MegaMoeRankResult> results;
  Status status = runMegaMoe(config, *layer.w13, *layer.w2, ranks, results);
  REQUIRE_FALSE(status.ok());
  CHECK(status.message() ==
        "MegaMoE fixed-slot dispatch overflow: rank 2 expert 8 receives 30 "
        "routes but has 8 slots");
  config.transport = Transport::Compact;
  config.compactCapacity = 64;
  status = runMegaMoe(config, *layer.w13, *layer.w2, ranks, results);
  REQUIRE_FALSE(status.ok());
  CHECK(status.message().find("compact dispatch overflow: rank 2") != std::string::npos);
  // Duplicate expert ids in one token are two routes; with the default
  // capacity they can exceed roundup(ep * M, 32) and must be reported.
  std::vector<TokenBatch> duplicates = rankBatches(shape, 2, {16, 16}, {}, 71);
  for (TokenBatch &batch : duplicates)
    std::fill(batch.topkIds.begin(), batch.topkIds.end(), 3);
  config.ep = 2;
  config.transport = Transport::FixedSlot;
  config.slotCapacity = 0;
  status = runMegaMoe(config, *layer.w13, *layer.w2, duplicates, results);
  REQUIRE_FALSE(status.ok());
  CHECK(status.message().find("receives 128 routes but has 32 slots") != std::string::npos);
}

TEST_CASE("families report malformed inputs naming the field", "[families]") {
  const MoeShape shape{64, 32, 4, 2};
  DenseLayer layer(shape, GluConfig{16, 0}, 800);
  TokenBatch batch = generateBatch(12, 0, 3, shape, RoutingOptions{});
  batch.topkWeights.pop_back();
  TpMoeConfig config;
  config.shape = shape;
  StageResults results;
  Status status = runTpMoe(config, *layer.w13, *layer.w2, batch, results);
  REQUIRE_FALSE(status.ok());
  CHECK(status.message() == "TP MoE: topk weights hold 5 values, expected 3 x 2");
  config.shape.hidden = 96;
  status = runTpMoe(config, *layer.w13, *layer.w2, batch, results);
  CHECK_FALSE(status.ok());
  MegaMoeConfig mega;
  mega.shape = shape;
  mega.ep = 3; // does not divide E = 4
  std::vector<MegaMoeRankResult> megaResults;
  std::vector<TokenBatch> ranks(3);
  status = runMegaMoe(mega, *layer.w13, *layer.w2, ranks, megaResults);
  REQUIRE_FALSE(status.ok());
  CHECK(status.message().find("EP size 3") != std::string::npos);
}

TEST_CASE("quantisation-faithful output stays within the end-to-end error bar of exact",
          "[families]") {
  // The FP8 1x32 input and intermediate quantisation alone (E4M3: 3
  // mantissa bits, about 2^-4 / sqrt(3) rms relative per element) must
  // keep the layer output well inside the seeds' relative-L2 bar of 0.10,
  // and must not vanish (it would mean a path skipped quantisation).
  const MoeShape shape{512, 256, 8, 4};
  DenseLayer layer(shape, GluConfig{0, 10.0}, 900);
  std::vector<TokenBatch> ranks = rankBatches(shape, 2, {16, 16}, {}, 90);
  MegaMoeConfig config;
  config.shape = shape;
  config.ep = 2;
  std::vector<MegaMoeRankResult> faithful, exact;
  REQUIRE(runMegaMoe(config, *layer.w13, *layer.w2, ranks, faithful).ok());
  config.mode = OracleMode::Exact;
  REQUIRE(runMegaMoe(config, *layer.w13, *layer.w2, ranks, exact).ok());
  for (int64_t rank = 0; rank < 2; ++rank) {
    double error = 0, reference = 0;
    for (size_t i = 0; i < exact[rank].stages.output.size(); ++i) {
      double d = faithful[rank].stages.output[i] - exact[rank].stages.output[i];
      error += d * d;
      reference += double(exact[rank].stages.output[i]) * exact[rank].stages.output[i];
    }
    double relativeL2 = std::sqrt(error / reference);
    INFO("rank " << rank << " relative L2 " << relativeL2);
    CHECK(relativeL2 < 0.10);
    CHECK(relativeL2 > 0.005);
  }
}

TEST_CASE("families accept empty batches", "[families]") {
  const MoeShape shape{64, 32, 4, 2};
  DenseLayer layer(shape, GluConfig{16, 0}, 950);
  TokenBatch empty;
  TpMoeConfig config;
  config.shape = shape;
  StageResults results;
  REQUIRE(runTpMoe(config, *layer.w13, *layer.w2, empty, results).ok());
  CHECK(results.output.empty());
  CHECK(results.routes.routeIds.empty());
  FhMoeConfig fh;
  fh.tp = config;
  fh.includeSharedExpert = false;
  REQUIRE(runFhMoe(fh, *layer.w13, *layer.w2, nullptr, empty, results).ok());
  CHECK(results.output.empty());
  MegaMoeConfig mega;
  mega.shape = shape;
  mega.ep = 2;
  std::vector<MegaMoeRankResult> megaResults;
  REQUIRE(runMegaMoe(mega, *layer.w13, *layer.w2, {empty, empty}, megaResults).ok());
  CHECK(megaResults[0].stages.output.empty());
  CHECK(megaResults[1].plan.rows.routeIds.empty());
}

TEST_CASE("family 1: M tile, capacity and thread count change no output bit",
          "[families]") {
  const MoeShape shape{64, 32, 8, 2};
  DenseLayer layer(shape, GluConfig{0, 10.0}, 960, 2);
  std::vector<TokenBatch> ranks = rankBatches(shape, 2, {12, 7}, RoutingOptions{0, 0, 0.1}, 96);
  // Rank 0's first 8 tokens all name expert 1 in slot 0: with M tiles of 8
  // and 4 that expert's count sits exactly on tile boundaries.
  for (int64_t t = 0; t < 8; ++t)
    ranks[0].topkIds[t * 2] = 1;
  MegaMoeConfig config;
  config.shape = shape;
  config.ep = 2;
  std::vector<MegaMoeRankResult> first;
  REQUIRE(runMegaMoe(config, *layer.w13, *layer.w2, ranks, first).ok());
  struct Variant {
    Transport transport;
    int64_t mTile, capacity;
    int threads;
  };
  for (Variant v : {Variant{Transport::FixedSlot, 1, 0, 1}, Variant{Transport::FixedSlot, 8, 64, 3},
                    Variant{Transport::Compact, 4, 0, 2}, Variant{Transport::Compact, 3, 0, 1},
                    Variant{Transport::Compact, 128, 0, 4}}) {
    config.transport = v.transport;
    config.mTile = v.mTile;
    config.slotCapacity = v.capacity;
    config.numThreads = v.threads;
    std::vector<MegaMoeRankResult> results;
    REQUIRE(runMegaMoe(config, *layer.w13, *layer.w2, ranks, results).ok());
    for (int64_t rank = 0; rank < 2; ++rank) {
      REQUIRE(results[rank].stages.output == first[rank].stages.output);
      const ReceivePlan &plan = results[rank].plan;
      CHECK(plan.rows.routeIds.size() % v.mTile == 0);
      if (v.transport == Transport::FixedSlot)
        CHECK(plan.numRows == 4 * (v.capacity ? v.capacity : 32));
    }
  }
}
