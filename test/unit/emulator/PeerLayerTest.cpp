//===- PeerLayerTest.cpp - fused MegaMoE stages over emulated EP ranks ----===//
//
// The fused stage 1 (dispatch + W13), stage 2 (W2 + weighted peer combine)
// and the peer-rows combine, run on ep emulated ranks that share one global
// memory, against ref::runMegaMoe (fixed-slot): every received row's FP8
// intermediate within one FP8 ulp of the oracle's activation, the layer
// output within relative L2 1/128 (kPeerOutputRelL2Bound), receive counts
// equal to the oracle's plan, no overflow, every output element written, no
// detector finding; two launches on the same control buffers.
//
//===----------------------------------------------------------------------===//

#include "TestSupport.h"
#include "moec/Harness/PeerHarness.h"
#include "moec/reference/Formats.h"
#include "moec/reference/Quantize.h"

#include "mlir/IR/MLIRContext.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <utility>
#include <vector>

using namespace moec;
using namespace moec::emu;

namespace {


struct PeerKnobs {
  int64_t ep;
  int64_t m1, n1, m2, n2;
  const char *orientation;
  int64_t capacity, maxTokens, workgroups, dispatchCus;
  const char *transport = "fixed_slot";
  /// tile.async_a on both GEMM stages.
  bool asyncA = false;
  /// peer.work_shards on both GEMM stages (0: static assignment).
  int64_t workShards = 0;
  /// Stage 1's planners (compact) and routes per producer chunk.
  int64_t planCus = 1, chunkRoutes = 1;
  /// Stage 2 sends FP8 1x32 combine rows (payload = fp8, fp8_peer_rows).
  bool fp8Payload = false;
  /// The intermediate size and stage 2's tile.k (0: the ODS default).
  int64_t intermediate = 256, k2 = 0;
};

StageSpec peerSpec(abi::Stage stage, const PeerKnobs &k) {
  StageSpec spec;
  spec.stage = stage;
  spec.fields = {{"hidden", "512"},
                 {"intermediate", std::to_string(k.intermediate)},
                 {"experts", std::to_string(4 * k.ep)},
                 {"top_k", "2"},           {"ep", std::to_string(k.ep)}};
  if (stage == abi::Stage::Combine) {
    spec.fields["waves"] = "4";
    spec.fields["peer_rows"] = "true";
    if (k.fp8Payload)
      spec.fields["fp8_peer_rows"] = "true";
    return spec;
  }
  const bool w13 = stage == abi::Stage::W13;
  spec.fields["m"] = std::to_string(w13 ? k.m1 : k.m2);
  spec.fields["n"] = std::to_string(w13 ? k.n1 : k.n2);
  spec.fields["orientation"] = k.orientation;
  spec.fields["transport"] = k.transport;
  spec.fields["capacity"] = std::to_string(k.capacity);
  spec.fields["max_tokens"] = std::to_string(k.maxTokens);
  spec.fields["workgroups"] = std::to_string(k.workgroups);
  if (k.asyncA)
    spec.fields["async_a"] = "true";
  if (k.workShards > 0)
    spec.fields["work_shards"] = std::to_string(k.workShards);
  if (!w13 && k.fp8Payload)
    spec.fields["payload"] = "fp8";
  if (!w13 && k.k2 > 0)
    spec.fields["k"] = std::to_string(k.k2);
  if (w13) {
    spec.fields["dispatch_cus"] = std::to_string(k.dispatchCus);
    spec.fields["plan_cus"] = std::to_string(k.planCus);
    spec.fields["chunk_routes"] = std::to_string(k.chunkRoutes);
    spec.fields["swiglu_limit"] = "10";
  }
  return spec;
}

/// The fused stage 1, stage 2 and peer-rows combine kernels of `k`.
struct PeerKernels {
  explicit PeerKernels(const PeerKnobs &k) {
    test::buildKernelOrFail(peerSpec(abi::Stage::W13, k), stage1);
    test::buildKernelOrFail(peerSpec(abi::Stage::W2, k), stage2);
    test::buildKernelOrFail(peerSpec(abi::Stage::Combine, k), combine);
  }
  BuiltKernel stage1, stage2, combine;
};

/// A layer that compared codes, matched the oracle and raised no finding.
void checkLayerPasses(const PeerLayerOutcome &outcome) {
  CHECK(outcome.codesCompared > 0);
  CHECK(outcome.findings == 0);
  CHECK(outcome.outputRelL2 <= kPeerOutputRelL2Bound);
  CHECK(outcome.pass);
}

/// Runs the fused layer of `kernels`; fails the test when it cannot run.
PeerLayerOutcome runOutcome(const PeerKernels &kernels,
                            const PeerLayerOptions &options) {
  std::string error;
  PeerLayerOutcome outcome;
  const bool ran = succeeded(runPeerLayer(kernels.stage1, kernels.stage2,
                                          kernels.combine, options, outcome,
                                          error));
  INFO(error);
  REQUIRE(ran);
  return outcome;
}

PeerLayerOutcome runOutcome(const PeerKnobs &k,
                            const PeerLayerOptions &options) {
  return runOutcome(PeerKernels(k), options);
}

/// A routing past the fixed-slot capacity: the oracle needs more slots,
/// the kernels count overflow, and the layer does not pass.
void checkOverflowReported(const PeerKnobs &k,
                           const PeerLayerOptions &options) {
  const PeerLayerOutcome outcome = runOutcome(k, options);
  INFO(outcome.summary);
  CHECK(outcome.summary.find("too small") != std::string::npos);
  CHECK(outcome.overflows > 0);
  CHECK_FALSE(outcome.pass);
}

/// Options for `tokensPerRank` tokens routed from `seed`, `invalidFraction`
/// of the route slots invalid; the other fields keep their defaults.
PeerLayerOptions routing(uint64_t seed, std::vector<int64_t> tokensPerRank,
                         double invalidFraction = 0.0) {
  PeerLayerOptions options;
  options.seed = seed;
  options.tokensPerRank = std::move(tokensPerRank);
  options.invalidFraction = invalidFraction;
  return options;
}

/// Runs a layer that must pass: the oracle, the receive plan, no
/// overflow, every output element written.
PeerLayerOutcome runLayer(const PeerKernels &kernels,
                          const PeerLayerOptions &options) {
  PeerLayerOutcome outcome = runOutcome(kernels, options);
  INFO(outcome.summary);
  checkLayerPasses(outcome);
  CHECK(outcome.countMismatches == 0);
  CHECK(outcome.epochMismatches == 0);
  CHECK(outcome.unknownRows == 0);
  CHECK(outcome.overflows == 0);
  CHECK(outcome.outputUnwritten == 0);
  return outcome;
}

PeerLayerOutcome runLayer(const PeerKnobs &k, const PeerLayerOptions &options) {
  return runLayer(PeerKernels(k), options);
}

} // namespace

TEST_CASE("fused MegaMoE layer at EP2 matches the oracle over two launches",
          "[peer]") {
  PeerKnobs knobs{2, 16, 64, 16, 128, "b_major", 32, 16, 6, 2};
  PeerLayerOptions options = routing(11, {9, 6}, 0.1);
  options.epochs = 2;
  PeerLayerOutcome outcome = runLayer(knobs, options);
  // Both ranks computed something on every launch.
  CHECK(outcome.stats.mfmas > 0);
}

TEST_CASE("fused MegaMoE layer with tile.async_a: the received rows go to "
          "LDS by DMA",
          "[peer]") {
  PeerKnobs knobs{2, 32, 64, 16, 128, "b_major", 32, 16, 6, 2, "fixed_slot",
                  true};
  PeerLayerOptions options = routing(13, {9, 7}, 0.1);
  options.epochs = 2;
  PeerLayerOutcome outcome = runLayer(knobs, options);
  CHECK(outcome.stats.mfmas > 0);
  CHECK(outcome.stats.ldsDmaOps > 0);
}

TEST_CASE("fused MegaMoE stage 2 with a K tail: tile.k 256 at I 384",
          "[peer][ktail]") {
  // The fused stage 2 reduces the receive rows over one whole K step and
  // a tail of 128; BF16 and FP8 combine rows.
  for (bool fp8 : {false, true}) {
    PeerKnobs knobs{2, 16, 64, 16, 128, "b_major", 32, 16, 6, 2};
    knobs.fp8Payload = fp8;
    knobs.intermediate = 384;
    knobs.k2 = 256;
    PeerKernels kernels(knobs);
    PeerLayerOutcome outcome = runLayer(kernels, routing(53, {9, 6}, 0.1));
    INFO((fp8 ? "fp8 payload: " : "bf16 payload: ") << outcome.summary);
    CHECK(outcome.stats.mfmas > 0);
  }
}

TEST_CASE("fused MegaMoE layer at EP4 with an empty rank and few resident "
          "workgroups",
          "[peer]") {
  // a_major, 32-row tiles; only 2 of 6 workgroups resident per rank and
  // kernel: roles go by arrival, so the producers are always resident.
  PeerKnobs knobs{4, 32, 64, 32, 128, "a_major", 64, 8, 6, 2};
  PeerLayerOptions options = routing(5, {5, 0, 8, 3}, 0.05);
  options.epochs = 2;
  options.maxResidentWorkgroups = 2;
  runLayer(knobs, options);
}

TEST_CASE("fused MegaMoE stage 1 with fewer resident workgroups than "
          "producers is reported as a deadlock",
          "[peer]") {
  // dispatch_cus = 2 but one workgroup resident per rank: the first
  // producer waits for the second, which can never start.
  PeerKnobs knobs{2, 16, 64, 16, 128, "b_major", 32, 16, 6, 2};
  PeerKernels kernels(knobs);
  PeerLayerOptions options;
  options.tokensPerRank = {4, 4};
  options.maxResidentWorkgroups = 1;
  PeerLayerOutcome outcome;
  std::string error;
  CHECK(failed(runPeerLayer(kernels.stage1, kernels.stage2, kernels.combine,
                            options, outcome, error)));
  INFO(error);
  CHECK(error.find("epoch 1: emulator: deadlock") == 0);
  CHECK(error.find("rank 0") != std::string::npos);
  CHECK(error.find("not yet resident") != std::string::npos);
}

TEST_CASE("compact MegaMoE layer at EP2 and EP4 matches the oracle", "[peer]") {
  // Compact: capacity counts all receive rows of a rank (every route of
  // every rank could land on one rank: ep x max_tokens x top_k).
  SECTION("EP2, b_major, two launches") {
    PeerKnobs knobs{2, 16, 64, 16, 128, "b_major", 2 * 16 * 2, 16, 6, 2,
                    "compact"};
    PeerLayerOptions options = routing(31, {11, 7}, 0.1);
    runLayer(knobs, options);
  }
  SECTION("EP4, a_major 32-row tiles, an empty rank, 2 resident workgroups") {
    PeerKnobs knobs{4, 32, 64, 32, 128, "a_major", 4 * 8 * 2, 8, 6, 2,
                    "compact"};
    PeerLayerOptions options = routing(37, {6, 8, 0, 3}, 0.05);
    options.maxResidentWorkgroups = 2;
    runLayer(knobs, options);
  }
}

TEST_CASE("fused MegaMoE with duplicate expert ids per token", "[peer]") {
  // A token naming one expert twice sends two rows there; both are summed
  // with their own weights.
  for (const char *transport : {"fixed_slot", "compact"}) {
    INFO(transport);
    const bool compact = std::string(transport) == "compact";
    PeerKnobs knobs{2, 16, 64, 16, 128, "b_major", compact ? 2 * 12 * 2 : 32,
                    12, 6, 2, transport};
    PeerLayerOptions options = routing(41, {12, 10});
    options.duplicateFraction = 0.5;
    options.epochs = 1;
    runLayer(knobs, options);
  }
}

TEST_CASE("a fixed-slot expert past its capacity is reported as overflow, "
          "not dropped silently",
          "[peer]") {
  // Hot-rank routing sends every route to rank 0's 4 experts: 64 routes
  // for 4 x 16 receive rows, more than 16 for some expert.
  PeerKnobs knobs{2, 16, 64, 16, 128, "b_major", 16, 16, 6, 2};
  PeerLayerOptions options = routing(43, {16, 16});
  options.hotRank = 0;
  options.epochs = 1;
  checkOverflowReported(knobs, options);
}

TEST_CASE("fused MegaMoE with a sharded dynamic work queue", "[peer]") {
  // 1 and 3 shards, both transports, few resident workgroups: every item
  // is taken exactly once (a missed or doubled tile changes the output or
  // leaves it unwritten), over two launches on the same counters.
  for (int64_t shards : {1, 3})
    for (const char *transport : {"fixed_slot", "compact"}) {
      INFO(shards << " shards, " << transport);
      const bool compact = std::string(transport) == "compact";
      PeerKnobs knobs{2, 16, 64, 16, 128, "b_major", compact ? 2 * 14 * 2 : 32,
                      14, 6, 2, transport, false, shards};
      PeerLayerOptions options = routing(47, {14, 9}, 0.05);
      options.maxResidentWorkgroups = 3;
      runLayer(knobs, options);
    }
}

TEST_CASE("compact MegaMoE with several planners and chunked producers",
          "[peer]") {
  // 3 planners each count a third of the routes; producers copy 4 routes
  // at a time. EP4, an uneven token split.
  PeerKnobs knobs{4, 16, 64, 16, 128, "b_major", 4 * 10 * 2, 10, 8, 3,
                  "compact", false, 2, /*planCus=*/3, /*chunkRoutes=*/4};
  PeerLayerOptions options = routing(53, {10, 3, 7, 1}, 0.1);
  runLayer(knobs, options);
  // Fixed slot with chunked producers.
  PeerKnobs fixed{2, 16, 64, 16, 128, "a_major", 32, 16, 6, 2, "fixed_slot",
                  false, 0, 1, 8};
  options.tokensPerRank = {16, 5};
  runLayer(fixed, options);
}

TEST_CASE("separate dispatch kernel, then W13, W2 and combine", "[peer]") {
  // The unfused MegaMoE variant: dispatch (every workgroup a producer) and
  // the W13 kernel behind it run at once on every rank; W13 waits for the
  // dispatch kernel's signals. Both transports.
  for (const char *transport : {"fixed_slot", "compact"}) {
    INFO(transport);
    const bool compact = std::string(transport) == "compact";
    PeerKnobs knobs{2, 16, 64, 16, 128, "b_major", compact ? 2 * 12 * 2 : 32,
                    12, 6, 3, transport};
    StageSpec dispatchSpec = peerSpec(abi::Stage::W13, knobs);
    dispatchSpec.fields["dispatch"] = "only";
    dispatchSpec.fields["workgroups"] = "3";
    dispatchSpec.fields["dispatch_cus"] = "3";
    StageSpec w13Spec = peerSpec(abi::Stage::W13, knobs);
    w13Spec.fields["dispatch"] = "none";
    BuiltKernel d, s1, s2, c;
    test::buildKernelOrFail(dispatchSpec, d);
    test::buildKernelOrFail(w13Spec, s1);
    test::buildKernelOrFail(peerSpec(abi::Stage::W2, knobs), s2);
    test::buildKernelOrFail(peerSpec(abi::Stage::Combine, knobs), c);
    PeerLayerOptions options = routing(59, {12, 7}, 0.1);
    options.maxResidentWorkgroups = 3;
    PeerLayerOutcome outcome;
    std::string error;
    const bool ran =
        succeeded(runPeerLayer(s1, s2, c, options, outcome, error, &d));
    INFO(error);
    REQUIRE(ran);
    INFO(outcome.summary);
    checkLayerPasses(outcome);
  }
}

TEST_CASE("fused MegaMoE in the bounded class (256 tokens per rank)",
          "[peer]") {
  // max_tokens 256 (the 256..1024 class), fixed slot with roundup(2 x 256,
  // 32) rows per expert, and compact; full and partial ranks.
  for (const char *transport : {"fixed_slot", "compact"}) {
    INFO(transport);
    const bool compact = std::string(transport) == "compact";
    PeerKnobs knobs{2, 64, 64, 64, 128, "b_major",
                    compact ? 2 * 256 * 2 : 512, 256, 8, 2, transport,
                    false, 2};
    PeerLayerOptions options = routing(61, {256, 200}, 0.05);
    options.epochs = 1;
    PeerLayerOutcome outcome = runLayer(knobs, options);
    CHECK(outcome.codesCompared >= 2 * 200 * 2 * 256 / 2);
  }
}

TEST_CASE("fused MegaMoE layer with a leading quant kernel: stage 1 reads "
          "its FP8 rows",
          "[peer][quant]") {
  PeerKnobs knobs{2, 16, 64, 16, 128, "b_major", 32, 16, 6, 2};
  StageSpec quantSpec = peerSpec(abi::Stage::Combine, knobs);
  quantSpec.stage = moec::abi::Stage::Quant;
  quantSpec.fields.erase("peer_rows");
  quantSpec.fields["waves"] = "1";
  PeerKernels kernels(knobs);
  BuiltKernel quant;
  test::buildKernelOrFail(quantSpec, quant);
  PeerLayerOptions options;
  options.seed = 13;
  // Rank 0: 9 tokens = 144 blocks over 64-lane workgroups (a partial last
  // one); rank 1 has none and still launches its quant kernel.
  options.tokensPerRank = {9, 0};
  options.invalidFraction = 0.1;
  PeerLayerOutcome outcome;
  std::string error;
  const bool ran = succeeded(
      runPeerLayer(kernels.stage1, kernels.stage2, kernels.combine, options,
                   outcome, error, /*dispatch=*/nullptr, &quant));
  INFO(error);
  REQUIRE(ran);
  INFO(outcome.summary);
  CHECK(outcome.summary.find("quant: 0 token codes") != std::string::npos);
  CHECK(outcome.inputMismatches == 0);
  CHECK(outcome.inputUnwritten == 0);
  checkLayerPasses(outcome);
  // The tokens the layer saves are the kernel's, equal to the reference
  // quantisation of the BF16 tokens.
  const RankLayerIo &io = outcome.ranks[0];
  std::vector<uint8_t> codes(size_t(9 * 512)), scales(size_t(9 * 16));
  std::vector<double> row(512);
  for (int64_t t = 0; t < 9; ++t) {
    for (int64_t h = 0; h < 512; ++h)
      row[size_t(h)] = ref::decodeBf16(io.batch.hiddenBf16[size_t(t * 512 + h)]);
    ref::quantizeFp8Row(row.data(), 512, &codes[size_t(t * 512)],
                        &scales[size_t(t * 16)]);
  }
  CHECK(io.tokens.codes == codes);
  CHECK(io.tokens.scales == scales);
}

TEST_CASE("fused MegaMoE at EP8 under randomised rank schedules", "[peer][ep8]") {
  // Eight ranks (4 experts each, top-2) in one scheduler, 16 seeds: per
  // seed another rank order of the launches, another residency cap (2 to 4
  // of the 6 workgroups, the 2 producers always among them), another token
  // split with empty ranks, and every third seed hot-rank routing. Both
  // transports, two launches on the same control buffers; the detectors
  // (races, poison, bounds, deadlock) must stay silent and the layer must
  // match the oracle. Fixed slot holds roundup(8 x 8, 16) rows per expert,
  // compact 8 x 8 x 2 per rank: neither overflows, also with a hot rank.
  constexpr int64_t kEp = 8, kMaxTokens = 8;
  for (const char *transport : {"fixed_slot", "compact"}) {
    const bool compact = std::string(transport) == "compact";
    PeerKnobs knobs{kEp, 16, 64, 16, 128, "b_major",
                    compact ? kEp * kMaxTokens * 2 : kEp * kMaxTokens,
                    kMaxTokens, 6, 2, transport, false,
                    /*workShards=*/compact ? 2 : 0, /*planCus=*/compact ? 2 : 1};
    PeerKernels kernels(knobs);
    for (uint64_t seed = 1; seed <= 16; ++seed) {
      INFO(transport << ", seed " << seed);
      PeerLayerOptions options;
      options.seed = 100 + seed;
      options.scheduleSeed = seed;
      options.maxResidentWorkgroups = unsigned(2 + seed % 3);
      options.invalidFraction = 0.05;
      // Ranks seed % 8 and (seed + 3) % 8 are empty; the rest vary.
      options.tokensPerRank.resize(kEp);
      for (int64_t r = 0; r < kEp; ++r)
        options.tokensPerRank[size_t(r)] =
            (r == int64_t(seed % kEp) || r == int64_t((seed + 3) % kEp))
                ? 0
                : 1 + (r * 5 + int64_t(seed)) % kMaxTokens;
      if (seed % 3 == 0)
        options.hotRank = int64_t(seed % kEp);
      runLayer(kernels, options);
    }
  }
}

TEST_CASE("fused MegaMoE at EP8: a hot rank past the fixed-slot capacity "
          "reports overflow",
          "[peer][ep8]") {
  // Every route of 8 ranks x 8 tokens goes to rank 2's 4 experts: 128
  // routes for 4 x 16 receive rows.
  PeerKnobs knobs{8, 16, 64, 16, 128, "b_major", 16, 8, 6, 2};
  PeerLayerOptions options;
  options.seed = 71;
  options.tokensPerRank.assign(8, 8);
  options.hotRank = 2;
  options.scheduleSeed = 5;
  options.epochs = 1;
  checkOverflowReported(knobs, options);
  // Route by route: the overflow words of all ranks sum to the routes past
  // their expert's 16 rows, counted from the routing alone (here all on
  // rank 2: 128 routes, at most 64 rows).
  const PeerLayerOutcome outcome = runOutcome(knobs, options);
  CHECK(outcome.expectedOverflowRoutes >= 128 - 4 * 16);
  CHECK(outcome.overflowRoutes == outcome.expectedOverflowRoutes);
}

TEST_CASE("fused MegaMoE at EP8: a repeated forward is bit-identical",
          "[peer][ep8]") {
  // Three launches of the same tokens and routes on 8 ranks (a hot rank,
  // two empty ranks), each launch under another rank order and residency
  // cap: receive rows land in another order each time, yet every output
  // byte of launches 2 and 3 equals launch 1's, for both transports.
  constexpr int64_t kEp = 8, kMaxTokens = 8;
  for (const char *transport : {"fixed_slot", "compact"}) {
    const bool compact = std::string(transport) == "compact";
    INFO(transport);
    PeerKnobs knobs{kEp, 16, 64, 16, 128, "b_major",
                    compact ? kEp * kMaxTokens * 2 : kEp * kMaxTokens,
                    kMaxTokens, 6, 2, transport, false,
                    /*workShards=*/compact ? 2 : 0, /*planCus=*/compact ? 2 : 1};
    PeerLayerOptions options;
    options.seed = 907;
    options.scheduleSeed = 13;
    options.maxResidentWorkgroups = 3;
    options.epochs = 3;
    options.repeatTokens = true;
    options.hotRank = 5;
    options.tokensPerRank = {8, 0, 5, 8, 0, 3, 7, 1};
    const PeerLayerOutcome outcome = runLayer(knobs, options);
    CHECK(outcome.repeatMismatches == 0);
  }
}

namespace {

/// Relative L2 distance of BF16 outputs `got` from `want`, and the
/// elements whose bits differ, over every rank.
struct OutputDistance {
  double relL2 = 0;
  int64_t differing = 0, elements = 0;
  /// Elements whose bits equal the oracle's value rounded to BF16.
  int64_t oracleBitsEqual = 0;
};
OutputDistance distance(const PeerLayerOutcome &got,
                        const PeerLayerOutcome &want, bool toOracle) {
  double err = 0, ref = 0;
  OutputDistance d;
  for (size_t r = 0; r < got.ranks.size(); ++r) {
    const RankLayerIo &g = got.ranks[r], &w = want.ranks[r];
    for (size_t i = 0; i < g.outBits.size(); ++i) {
      const double x = ref::decodeBf16(g.outBits[i]);
      const double y =
          toOracle ? w.oracleOut[i] : ref::decodeBf16(w.outBits[i]);
      err += (x - y) * (x - y);
      ref += y * y;
      d.differing += g.outBits[i] != w.outBits[i];
      d.oracleBitsEqual += g.outBits[i] == ref::encodeBf16(w.oracleOut[i]);
      ++d.elements;
    }
  }
  d.relL2 = ref > 0 ? std::sqrt(err / ref) : 0;
  return d;
}

/// Runs the layer of `knobs` with the BF16 and with the FP8 payload on the
/// same tokens and weights. The FP8 run must pass the harness's checks
/// against the FP8-payload oracle (kPeerOutputRelL2Bound) and lie within
/// relative L2 2^-9 of it: that oracle models every rounding of the data
/// path (FP32 row x weight, the 1x32 FP8 blocks, the FP32 sum, BF16), so
/// what may remain is where the kernel's FP32 W2 sums or its intermediate
/// codes put a value on the other side of an FP8 rounding boundary; the
/// relative L2 is then mostly the output's BF16 rounding of the oracle's
/// FP32 sum, small since sums of FP8 values have few significant bits
/// (measured 0.9e-3 to 1.0e-3). At least 99 % of the elements must equal
/// the oracle's BF16 bits (measured: all of them). Against the BF16-payload oracle the bound is 2^-4, the
/// one FP8 rounding the payload adds (E4M3 keeps 3 mantissa bits: relative
/// error at most 2^-4 per normal element), yet the run must be measurably
/// away from it: at least eight times as far as from its own oracle
/// (measured 27 times), with most output elements differing from the BF16
/// run's, so the quantisation really happened.
void checkFp8Payload(PeerKnobs knobs, const PeerLayerOptions &options) {
  knobs.fp8Payload = false;
  const PeerLayerOutcome bf16 = runLayer(knobs, options);
  knobs.fp8Payload = true;
  const PeerLayerOutcome fp8 = runLayer(knobs, options);
  const OutputDistance own = distance(fp8, fp8, /*toOracle=*/true);
  const OutputDistance toBf16Oracle = distance(fp8, bf16, /*toOracle=*/true);
  const OutputDistance toBf16Run = distance(fp8, bf16, /*toOracle=*/false);
  const OutputDistance bf16Own = distance(bf16, bf16, /*toOracle=*/true);
  INFO("fp8 payload vs its oracle " << own.relL2 << ", vs the BF16-payload "
       "oracle " << toBf16Oracle.relL2 << ", vs the BF16 run "
       << toBf16Run.relL2 << " (" << toBf16Run.differing << " of "
       << toBf16Run.elements << " elements differ; " << own.oracleBitsEqual
       << " bit-equal to the FP8-payload oracle); BF16 payload vs its "
       "oracle " << bf16Own.relL2);
  REQUIRE(own.elements > 0);
  CHECK(own.relL2 <= 0x1.0p-9);
  CHECK(own.oracleBitsEqual * 100 >= own.elements * 99);
  CHECK(toBf16Oracle.relL2 <= 0x1.0p-4);
  CHECK(toBf16Oracle.relL2 >= 8 * own.relL2);
  CHECK(toBf16Run.differing * 2 > toBf16Run.elements);
  // The same run without the FP8 rounding stays at the BF16 oracle.
  CHECK(bf16Own.relL2 <= kPeerOutputRelL2Bound);
}

} // namespace

TEST_CASE("fused MegaMoE layer at EP4 with the FP8 peer payload",
          "[peer]") {
  // Fixed slot, a_major, two launches, an empty rank; the combine rows
  // are 512 FP8 codes + 16 scales (528 bytes, not 1,024).
  PeerKnobs knobs{4, 32, 64, 32, 128, "a_major", 64, 8, 6, 2};
  PeerLayerOptions options = routing(23, {7, 0, 8, 5}, 0.05);
  options.epochs = 2;
  checkFp8Payload(knobs, options);
}

TEST_CASE("fused MegaMoE at EP8 with the FP8 peer payload", "[peer][ep8]") {
  // Compact, b_major, work shards, a hot rank, a randomised rank schedule.
  constexpr int64_t kEp = 8, kMaxTokens = 8;
  PeerKnobs knobs{kEp, 16, 64, 16, 128, "b_major", kEp * kMaxTokens * 2,
                  kMaxTokens, 6, 2, "compact", false, /*workShards=*/2,
                  /*planCus=*/2};
  PeerLayerOptions options = routing(211, {8, 3, 0, 6, 8, 1, 5, 7}, 0.05);
  options.scheduleSeed = 7;
  options.maxResidentWorkgroups = 3;
  options.hotRank = 3;
  checkFp8Payload(knobs, options);
}

TEST_CASE("the peer harness refuses a stage 2 and a combine that disagree on "
          "the payload",
          "[peer]") {
  PeerKnobs fp8{2, 16, 64, 16, 128, "b_major", 32, 16, 6, 2};
  fp8.fp8Payload = true;
  PeerKnobs bf16 = fp8;
  bf16.fp8Payload = false;
  const PeerKernels sends(fp8), reads(bf16);
  PeerLayerOptions options = routing(3, {4, 4});
  for (bool fp8Stage2 : {true, false}) {
    const PeerKernels &stage2 = fp8Stage2 ? sends : reads;
    const PeerKernels &combine = fp8Stage2 ? reads : sends;
    PeerLayerOutcome outcome;
    std::string error;
    CHECK(failed(runPeerLayer(stage2.stage1, stage2.stage2, combine.combine,
                              options, outcome, error)));
    INFO(error);
    CHECK(error.find(fp8Stage2 ? "sends FP8 combine rows (payload), but"
                               : "sends BF16 combine rows (payload), but") !=
          std::string::npos);
    CHECK(error.find(fp8Stage2 ? "reads BF16 rows (fp8_peer_rows)"
                               : "reads FP8 rows (fp8_peer_rows)") !=
          std::string::npos);
  }
}
