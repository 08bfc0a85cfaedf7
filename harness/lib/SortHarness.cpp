//===- SortHarness.cpp - the routing sort on the emulator vs the oracle ---===//
//
// topk ids -> the tile-padded route list of one rank's experts, compared
// with ref::buildSortedRoutes of the ids shifted to the rank's experts:
// identical entries, tile experts and status; unused tiles -1.
//
//===----------------------------------------------------------------------===//

#include "SharedRoute.h"
#include "StageSupport.h"

#include <algorithm>
#include <cstring>

using namespace mlir;

namespace moec::emu {
namespace {

/// The i-th 32-bit word of a snapshot.
int32_t word(const BufferSnapshot &buffer, int64_t i) {
  int32_t value;
  std::memcpy(&value, buffer.bytes.data() + 4 * i, 4);
  return value;
}

/// topk ids -> one rank's route list.
class SortHarness final : public StageHarness {
public:
  SortHarness(const BuiltKernel &kernel, const StageShape &shape)
      : StageHarness(kernel, shape) {}

  const char *tolerance() const override {
    return "identical list, tile experts and status; unused tiles -1";
  }

  std::vector<std::string> arguments() const override {
    return {"topk_ids",   "sorted_routes", "tile_experts", "status",
            "num_tokens", "expert_offset", "capacity"};
  }

  ref::Status generate(const DataOptions &options, LayerData &data,
                       int64_t rank) const override {
    return ensureBatch(shape_, options, data, rank);
  }

  LogicalResult run(LayerData &data, int64_t rank, const LaunchConfig &launchIn,
                    StageOutcome &outcome, std::string &error) const override {
    const int64_t tileM = shape_.tileM, listCapacity = capacity(data);
    KernelMemory km;
    km.input("topk_ids", data.batch.topkIds);
    km.output("sorted_routes", size_t(listCapacity) * 4);
    km.output("tile_experts", size_t(listCapacity / tileM) * 4);
    km.output("status", 8);
    km.scalar("num_tokens", data.batch.tokens);
    km.scalar("expert_offset", rank * shape_.localExperts);
    km.scalar("capacity", listCapacity);
    LaunchConfig launch = launchIn;
    launch.grid = {1, 1, 1};
    outcome = StageOutcome();
    if (failed(km.run(kernel_, launch, outcome, error)))
      return failure();
    km.snapshot(outcome);
    // The kernel's list, cut to the entries it reports using: ready for W13
    // and W2.
    const BufferSnapshot &routes = outcome.outputs.at("sorted_routes");
    const BufferSnapshot &tiles = outcome.outputs.at("tile_experts");
    const int64_t used =
        std::clamp<int64_t>(word(outcome.outputs.at("status"), 0), 0,
                            listCapacity) /
        tileM * tileM;
    RankData &mine = data.rank(rank);
    mine.sorted = ref::SortedRoutes();
    mine.sorted.numRoutes = data.numRoutes();
    mine.sorted.mTile = tileM;
    for (int64_t i = 0; i < used; ++i)
      mine.sorted.routeIds.push_back(word(routes, i));
    for (int64_t t = 0; t < used / tileM; ++t)
      mine.sorted.tileExperts.push_back(word(tiles, t));
    mine.hasSorted = true;
    return success();
  }

  void compare(LayerData &data, int64_t rank, const DataOptions &,
               StageOutcome &outcome) const override {
    const int64_t tileM = shape_.tileM, listCapacity = capacity(data);
    const int64_t localExperts = shape_.localExperts;
    const int64_t first = rank * localExperts;
    std::vector<int32_t> shifted =
        sharedRuleIds(data.batch.topkIds, data.topK, shape_.experts,
                      shape_.sharedLastRoute);
    for (int32_t &id : shifted)
      id = (id >= first && id < first + localExperts)
               ? static_cast<int32_t>(id - first)
               : -1;
    ref::SortedRoutes want;
    if (ref::Status s =
            ref::buildSortedRoutes(shifted.data(), data.batch.tokens, data.topK,
                                   localExperts, tileM, want);
        !s) {
      outcome.summary = "oracle failed: " + s.message();
      return;
    }
    const BufferSnapshot &status = outcome.outputs.at("status");
    const BufferSnapshot &routes = outcome.outputs.at("sorted_routes");
    const BufferSnapshot &tiles = outcome.outputs.at("tile_experts");
    outcome.used = word(status, 0);
    outcome.needed = word(status, 1);
    const int64_t wantLen = static_cast<int64_t>(want.routeIds.size());
    std::string problem;
    int64_t mismatches = 0, unwritten = 0;
    if (!status.written[0] || !status.written[4])
      problem += "status not written; ";
    if (outcome.used != wantLen || outcome.needed != wantLen)
      problem += "status (" + std::to_string(outcome.used) + ", " +
                 std::to_string(outcome.needed) + ") != (" +
                 std::to_string(wantLen) + ", " + std::to_string(wantLen) +
                 "); ";
    for (int64_t i = 0; i < wantLen && i < listCapacity; ++i) {
      unwritten += !routes.written[size_t(4 * i)];
      mismatches += word(routes, i) != want.routeIds[size_t(i)];
    }
    for (int64_t t = 0; t < listCapacity / tileM; ++t) {
      unwritten += !tiles.written[size_t(4 * t)];
      const int32_t expected =
          t < want.numTiles() ? want.tileExperts[size_t(t)] : -1;
      mismatches += word(tiles, t) != expected;
    }
    if (mismatches)
      problem +=
          std::to_string(mismatches) + " entries differ from the oracle; ";
    if (unwritten)
      problem += std::to_string(unwritten) + " entries unwritten; ";
    outcome.elementsChecked = wantLen;
    outcome.elementsOverTolerance = mismatches;
    outcome.elementsUnwritten = unwritten;
    outcome.pass = problem.empty() && outcome.run.totalFindings() == 0;
    outcome.summary =
        "list of " + std::to_string(outcome.used) + " entries (" +
        std::to_string(want.numTiles()) + " tiles), " +
        (problem.empty() ? std::string("identical to the oracle") : problem) +
        ", " + std::to_string(outcome.run.totalFindings()) + " findings";
  }

  NamedArrays arrays(const LayerData &data, int64_t rank,
                     const StageOutcome &) const override {
    const RankData &mine = data.ranks[size_t(rank)];
    return {
        {"sorted_route_ids",
         npyOf({int64_t(mine.sorted.routeIds.size())}, mine.sorted.routeIds)},
        {"tile_experts",
         npyOf({mine.sorted.numTiles()}, mine.sorted.tileExperts)},
    };
  }

private:
  /// List entries the kernel may use: enough for any routing.
  int64_t capacity(const LayerData &data) const {
    const int64_t tileM = shape_.tileM;
    return (data.numRoutes() + shape_.localExperts * (tileM - 1) + tileM - 1) /
           tileM * tileM;
  }
};

} // namespace

std::unique_ptr<StageHarness> makeSortHarness(const BuiltKernel &kernel,
                                              const StageShape &shape) {
  return std::make_unique<SortHarness>(kernel, shape);
}

} // namespace moec::emu
