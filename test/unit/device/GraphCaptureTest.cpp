//===- GraphCaptureTest.cpp - HIP graphs on the emulated device -----------===//
//
// Stream capture and graph replay on libmoec_emulated_hip.so: every capture
// rule HIP enforces fails the capture with HIP's error, recorded work runs
// only when replayed and reads the buffers' contents at replay time, and a
// layer forward of every family (unfused, fused peers at EP2 with a device
// per rank, TP, FHMoE) captured through the runtime's layer API replays to
// the eager forward's output bit for bit and matches the oracle, with the
// inputs changed between replays. Engines (vLLM, SGLang) capture MoE layers
// in HIP graphs; this is what they rely on.
//
//===----------------------------------------------------------------------===//

#include "moec/Harness/LayerSetup.h"
#include "moec/Selftest/Oracle.h"
#include "moec/bundle.h"
#include "moec/hip_loader.h"
#include "moec/layer.h"
#include "moec/reference/Generate.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <dlfcn.h>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace {

using moec::harness::DeviceMemory;
using moec::harness::Rank;
using moec::harness::TableFacts;
namespace rt = moec::rt;
namespace ref = moec::ref;

/// HIP's statuses the capture rules return (hip_runtime_api.h).
constexpr int kStreamCaptureUnsupported = 900;
constexpr int kStreamCaptureInvalidated = 901;
constexpr int kStreamCaptureImplicit = 906;
constexpr int kIllegalState = 401;
constexpr int kCaptureModeGlobal = 0, kCaptureModeRelaxed = 2;

/// The emulated device's HIP library, with the entry points outside the
/// runtime's tables looked up by name.
struct EmulatedHip {
  std::unique_ptr<rt::HipDevice> device;
  const rt::HipSymbols *api = nullptr;
  const rt::HipTimingSymbols *timing = nullptr;
  void *handle = nullptr;
  int (*hipMemset)(void *, int, size_t) = nullptr;
  int (*hipStreamIsCapturing)(void *, int *) = nullptr;

  explicit EmulatedHip(int ordinal = 0) {
    std::string error;
    auto library = rt::HipLibrary::load({MOEC_EMULATED_HIP_LIBRARY}, error);
    REQUIRE(library);
    REQUIRE(library->timing());
    device = rt::HipDevice::create(std::move(library), ordinal, error);
    REQUIRE(device);
    api = &device->hipApi();
    timing = device->library().timing();
    handle = dlopen(MOEC_EMULATED_HIP_LIBRARY, RTLD_NOW | RTLD_NOLOAD);
    REQUIRE(handle);
    hipMemset = reinterpret_cast<int (*)(void *, int, size_t)>(
        dlsym(handle, "hipMemset"));
    hipStreamIsCapturing = reinterpret_cast<int (*)(void *, int *)>(
        dlsym(handle, "hipStreamIsCapturing"));
    REQUIRE(hipMemset);
    REQUIRE(hipStreamIsCapturing);
  }
  ~EmulatedHip() {
    if (handle)
      dlclose(handle);
  }
};

std::vector<uint8_t> download(const EmulatedHip &hip, const void *source,
                              size_t bytes) {
  std::vector<uint8_t> host(bytes);
  REQUIRE(hip.api->hipMemcpy(host.data(), source, bytes,
                             rt::hip::kMemcpyDeviceToHost) == 0);
  return host;
}

} // namespace

TEST_CASE("work on a capturing stream is recorded and runs when replayed",
          "[capture]") {
  EmulatedHip hip;
  const size_t bytes = 256;
  void *source = nullptr, *target = nullptr;
  REQUIRE(hip.api->hipMalloc(&source, bytes) == 0);
  REQUIRE(hip.api->hipMalloc(&target, bytes) == 0);
  REQUIRE(hip.hipMemset(source, 0x11, bytes) == 0);
  REQUIRE(hip.hipMemset(target, 0x00, bytes) == 0);
  rt::hip::Stream stream = nullptr;
  REQUIRE(hip.timing->hipStreamCreate(&stream) == 0);

  REQUIRE(hip.timing->hipStreamBeginCapture(stream, kCaptureModeGlobal) == 0);
  int capturing = 0;
  REQUIRE(hip.hipStreamIsCapturing(stream, &capturing) == 0);
  CHECK(capturing == 1);
  CHECK(hip.timing->hipStreamBeginCapture(stream, kCaptureModeGlobal) ==
        kIllegalState);
  // A fill of the first half, then a copy of the whole source: recorded.
  REQUIRE(hip.api->hipMemsetAsync(target, 0x22, bytes / 2, stream) == 0);
  REQUIRE(hip.api->hipMemcpy2DAsync(target, bytes, source, bytes, bytes / 4, 1,
                                    rt::hip::kMemcpyDeviceToDevice,
                                    stream) == 0);
  rt::hip::Graph graph = nullptr;
  REQUIRE(hip.timing->hipStreamEndCapture(stream, &graph) == 0);
  REQUIRE(graph);
  REQUIRE(hip.hipStreamIsCapturing(stream, &capturing) == 0);
  CHECK(capturing == 0);
  // Nothing ran.
  CHECK(download(hip, target, bytes) == std::vector<uint8_t>(bytes, 0x00));

  rt::hip::GraphExec exec = nullptr;
  REQUIRE(hip.timing->hipGraphInstantiate(&exec, graph, nullptr, nullptr, 0) == 0);
  REQUIRE(hip.timing->hipGraphLaunch(exec, stream) == 0);
  REQUIRE(hip.api->hipStreamSynchronize(stream) == 0);
  std::vector<uint8_t> want(bytes, 0x00);
  std::fill(want.begin(), want.begin() + bytes / 2, 0x22);
  std::fill(want.begin(), want.begin() + bytes / 4, 0x11);
  CHECK(download(hip, target, bytes) == want);

  // A replay reads the source as it is now.
  REQUIRE(hip.hipMemset(source, 0x33, bytes) == 0);
  REQUIRE(hip.timing->hipGraphLaunch(exec, stream) == 0);
  REQUIRE(hip.api->hipStreamSynchronize(stream) == 0);
  std::fill(want.begin(), want.begin() + bytes / 4, 0x33);
  CHECK(download(hip, target, bytes) == want);

  CHECK(hip.timing->hipGraphExecDestroy(exec) == 0);
  CHECK(hip.timing->hipGraphDestroy(graph) == 0);
  CHECK(hip.timing->hipGraphDestroy(graph) != 0);
  CHECK(hip.timing->hipStreamDestroy(stream) == 0);
  CHECK(hip.api->hipFree(source) == 0);
  CHECK(hip.api->hipFree(target) == 0);
}

TEST_CASE("a call HIP forbids during capture fails and invalidates the "
          "capture",
          "[capture]") {
  EmulatedHip hip;
  const size_t bytes = 64;
  void *buffer = nullptr;
  REQUIRE(hip.api->hipMalloc(&buffer, bytes) == 0);
  std::vector<uint8_t> host(bytes, 0);
  rt::hip::Stream stream = nullptr;
  REQUIRE(hip.timing->hipStreamCreate(&stream) == 0);

  struct Rule {
    const char *name;
    int expected;
    std::function<int()> call;
  };
  void *allocated = nullptr;
  const std::vector<Rule> rules = {
      {"hipMalloc", kStreamCaptureUnsupported,
       [&] { return hip.api->hipMalloc(&allocated, bytes); }},
      {"hipMemcpy", kStreamCaptureImplicit,
       [&] {
         return hip.api->hipMemcpy(buffer, host.data(), bytes,
                                   rt::hip::kMemcpyHostToDevice);
       }},
      {"hipMemset", kStreamCaptureImplicit,
       [&] { return hip.hipMemset(buffer, 0, bytes); }},
      {"hipStreamSynchronize", kStreamCaptureUnsupported,
       [&] { return hip.api->hipStreamSynchronize(stream); }},
      {"hipDeviceSynchronize", kStreamCaptureUnsupported,
       [&] { return hip.api->hipDeviceSynchronize(); }},
      {"hipMemsetAsync on the null stream", kStreamCaptureImplicit,
       [&] { return hip.api->hipMemsetAsync(buffer, 0, bytes, nullptr); }},
  };
  for (const Rule &rule : rules) {
    INFO(rule.name);
    REQUIRE(hip.timing->hipStreamBeginCapture(stream, kCaptureModeGlobal) == 0);
    REQUIRE(hip.api->hipMemsetAsync(buffer, 1, bytes, stream) == 0);
    CHECK(rule.call() == rule.expected);
    CHECK(allocated == nullptr);
    int capturing = 0;
    REQUIRE(hip.hipStreamIsCapturing(stream, &capturing) == 0);
    CHECK(capturing == 2); // hipStreamCaptureStatusInvalidated
    // Work after the violation is refused too, and no graph comes out.
    CHECK(hip.api->hipMemsetAsync(buffer, 2, bytes, stream) ==
          kStreamCaptureInvalidated);
    rt::hip::Graph graph = reinterpret_cast<rt::hip::Graph>(&host);
    CHECK(hip.timing->hipStreamEndCapture(stream, &graph) ==
          kStreamCaptureInvalidated);
    CHECK(graph == nullptr);
    // The stream is usable again.
    CHECK(hip.api->hipStreamSynchronize(stream) == 0);
  }

  SECTION("relaxed mode allows an allocation") {
    REQUIRE(hip.timing->hipStreamBeginCapture(stream, kCaptureModeRelaxed) == 0);
    CHECK(hip.api->hipMalloc(&allocated, bytes) == 0);
    rt::hip::Graph graph = nullptr;
    CHECK(hip.timing->hipStreamEndCapture(stream, &graph) == 0);
    CHECK(graph != nullptr);
    CHECK(hip.timing->hipGraphDestroy(graph) == 0);
    CHECK(hip.api->hipFree(allocated) == 0);
  }
  SECTION("the null stream cannot be captured") {
    CHECK(hip.timing->hipStreamBeginCapture(nullptr, kCaptureModeGlobal) ==
          kStreamCaptureUnsupported);
  }
  CHECK(hip.timing->hipStreamDestroy(stream) == 0);
  CHECK(hip.api->hipFree(buffer) == 0);
}

namespace {

/// One table's ranks with their streams, for capturing a layer forward.
struct CapturedTable {
  std::unique_ptr<rt::Bundle> bundle;
  TableFacts facts;
  uint32_t ep = 1;
  std::vector<Rank> ranks;
  std::vector<std::unique_ptr<DeviceMemory>> memory;
  std::vector<rt::hip::Stream> streams;
  moec::selftest::SelftestWeights weights;

  const rt::HipTimingSymbols &timing(size_t r) const {
    return *ranks[r].device->library().timing();
  }
  ~CapturedTable() {
    for (size_t r = 0; r < streams.size(); ++r)
      if (streams[r])
        (void)timing(r).hipStreamDestroy(streams[r]);
  }
};

/// Opens table `tableIndex` of `bundlePath`: a rank per EP rank (fused: on
/// device r, unfused: all on device 0), seeded weights, a stream each.
void openTable(const char *bundlePath, uint32_t tableIndex, uint32_t maxTokens,
               CapturedTable &table) {
  std::string error;
  table.bundle = rt::Bundle::open(bundlePath, error);
  REQUIRE(table.bundle);
  const rt::SelectionTable &selection =
      table.bundle->selector().tables().at(tableIndex);
  REQUIRE(moec::harness::tableFacts(table.bundle->manifest(), selection,
                                    table.facts, error));
  table.ep = selection.ep;
  table.ranks.resize(table.ep);
  for (uint32_t r = 0; r < table.ep; ++r) {
    Rank &rank = table.ranks[r];
    auto library = rt::HipLibrary::load({MOEC_EMULATED_HIP_LIBRARY}, error);
    REQUIRE(library);
    rank.device = rt::HipDevice::create(std::move(library),
                                        table.facts.fused ? int(r) : 0, error);
    INFO(error);
    REQUIRE(rank.device);
    rank.loader = std::make_unique<rt::KernelLoader>(*rank.device, *table.bundle);
    table.memory.push_back(std::make_unique<DeviceMemory>(*rank.device));
    rt::LayerProblem problem = table.facts.problem;
    problem.epRank = r;
    problem.maxTokens = std::min(maxTokens, selection.workspace);
    REQUIRE(rank.device->makeCurrent(error));
    rank.layer = rt::Layer::create(*rank.loader, rt::TableHandle{tableIndex},
                                   problem, error);
    INFO(error);
    REQUIRE(rank.layer);
  }
  moec::harness::HostLayerWeights host;
  moec::selftest::generateWeights(7, table.facts, table.weights, host);
  const rt::LayerMemory &layerMemory = table.ranks[0].layer->memory();
  for (uint32_t r = 0; r < table.ep; ++r) {
    INFO(error);
    REQUIRE(moec::harness::setUpRank(table.ranks[r], *table.memory[r],
                                     table.facts, table.ep, r, host,
                                     layerMemory, error));
  }
  if (layerMemory.peerBytes)
    REQUIRE(moec::harness::bindRankPeers(table.ranks, error));
  table.streams.assign(table.ep, nullptr);
  for (uint32_t r = 0; r < table.ep; ++r) {
    REQUIRE(table.ranks[r].device->makeCurrent(error));
    REQUIRE(table.timing(r).hipStreamCreate(&table.streams[r]) == 0);
  }
}

/// The batches of one case: a fused rank its own, unfused ranks one shared.
std::vector<ref::TokenBatch> makeBatches(const CapturedTable &table,
                                         uint64_t seed, uint32_t m) {
  const rt::LayerProblem &p = table.facts.problem;
  const ref::MoeShape shape{int64_t(p.hidden), int64_t(p.intermediate),
                            int64_t(p.experts), int64_t(p.topK)};
  ref::RoutingOptions routing;
  routing.invalidFraction = 0.05;
  std::vector<ref::TokenBatch> batches;
  for (uint32_t r = 0; r < (table.facts.fused ? table.ep : 1); ++r) {
    batches.push_back(ref::generateBatch(seed, r, m, shape, routing));
    // FHMoE: the layer gives the shared expert id E in its own slot, so an
    // invalid routed id must be -1 or above E.
    if (table.facts.shared)
      for (int32_t &id : batches.back().topkIds)
        if (id == int32_t(p.experts))
          id = int32_t(p.experts) + 1;
  }
  return batches;
}

void uploadInputs(CapturedTable &table,
                  const std::vector<ref::TokenBatch> &batches) {
  std::string error;
  const uint64_t H = table.facts.problem.hidden, K = table.facts.problem.topK;
  for (uint32_t r = 0; r < table.ep; ++r) {
    const ref::TokenBatch &batch = batches[table.facts.fused ? r : 0];
    const uint64_t m = uint64_t(batch.tokens);
    Rank &rank = table.ranks[r];
    DeviceMemory &memory = *table.memory[r];
    REQUIRE(rank.device->makeCurrent(error));
    REQUIRE(memory.upload(rank.hidden, batch.hiddenBf16.data(), m * H * 2, error));
    REQUIRE(memory.upload(rank.ids, batch.topkIds.data(), m * K * 4, error));
    REQUIRE(memory.upload(rank.weights, batch.topkWeights.data(), m * K * 4,
                          error));
    // Poisoned, so an output the replay did not write shows.
    REQUIRE(memory.fill(rank.out, 0xFF, m * H * 2, error));
  }
}

std::vector<std::vector<uint16_t>> downloadOutputs(CapturedTable &table,
                                                   uint32_t m) {
  std::string error;
  const uint64_t H = table.facts.problem.hidden;
  std::vector<std::vector<uint16_t>> outputs(table.ep);
  for (uint32_t r = 0; r < table.ep; ++r) {
    REQUIRE(table.ranks[r].device->makeCurrent(error));
    REQUIRE(table.ranks[r].device->hipApi().hipStreamSynchronize(
                table.streams[r]) == 0);
  }
  for (uint32_t r = 0; r < table.ep; ++r) {
    outputs[r].resize(m * H);
    REQUIRE(table.memory[r]->download(outputs[r].data(), table.ranks[r].out,
                                      m * H * 2, error));
  }
  return outputs;
}

/// Every rank's forward, queued before any is waited on (fused ranks wait
/// on each other's kernels).
void forwardAll(CapturedTable &table, uint32_t m) {
  std::string error;
  for (uint32_t r = 0; r < table.ep; ++r) {
    Rank &rank = table.ranks[r];
    REQUIRE(rank.device->makeCurrent(error));
    INFO(error);
    REQUIRE(rank.layer->forward(moec::harness::rankInputs(rank, m),
                                table.streams[r], error) ==
            rt::Layer::ForwardStatus::Ok);
  }
}

void checkOracle(const CapturedTable &table,
                 const std::vector<ref::TokenBatch> &batches,
                 const std::vector<std::vector<uint16_t>> &outputs) {
  moec::selftest::OracleCase oracle;
  oracle.facts = &table.facts;
  oracle.weights = &table.weights;
  oracle.gptOssSwiglu = table.facts.gptOssSwiglu;
  oracle.ep = table.ep;
  moec::selftest::OracleComparison comparison;
  REQUIRE(moec::selftest::compareWithOracle(oracle, batches, outputs,
                                            comparison)
              .ok());
  INFO("relative L2 " << comparison.distance.relL2 << ", unwritten "
                      << comparison.unwritten << ", nonzero empty rows "
                      << comparison.zeroRowsWrong);
  CHECK(comparison.pass);
}

/// Captures one forward of every rank into a graph, replays it with one
/// set of inputs (and, with `replayAgain`, then with another, and then the
/// first again) and checks each replay against the eager forward of the
/// same inputs (bit for bit) and against the oracle.
void captureAndReplay(const char *bundlePath, uint32_t tableIndex,
                      bool wantFused, bool replayAgain = true) {
  CapturedTable table;
  openTable(bundlePath, tableIndex, 64, table);
  REQUIRE(table.facts.fused == wantFused);
  const uint32_t kM = std::min(24u, table.ranks[0].layer->memory().maxTokens);
  const std::vector<ref::TokenBatch> first = makeBatches(table, 11, kM);
  const std::vector<ref::TokenBatch> second = makeBatches(table, 12, kM);

  uploadInputs(table, first);
  forwardAll(table, kM);
  const auto eagerFirst = downloadOutputs(table, kM);
  checkOracle(table, first, eagerFirst);
  uploadInputs(table, second);
  forwardAll(table, kM);
  const auto eagerSecond = downloadOutputs(table, kM);

  std::vector<rt::hip::Graph> graphs(table.ep, nullptr);
  std::vector<rt::hip::GraphExec> execs(table.ep, nullptr);
  std::string error;
  for (uint32_t r = 0; r < table.ep; ++r) {
    const rt::HipTimingSymbols &t = table.timing(r);
    REQUIRE(table.ranks[r].device->makeCurrent(error));
    REQUIRE(t.hipStreamBeginCapture(table.streams[r], kCaptureModeGlobal) == 0);
    INFO(error);
    REQUIRE(table.ranks[r].layer->forward(
                moec::harness::rankInputs(table.ranks[r], kM), table.streams[r],
                error) == rt::Layer::ForwardStatus::Ok);
    REQUIRE(t.hipStreamEndCapture(table.streams[r], &graphs[r]) == 0);
    REQUIRE(t.hipGraphInstantiate(&execs[r], graphs[r], nullptr, nullptr, 0) ==
            0);
  }
  auto replayAll = [&]() {
    for (uint32_t r = 0; r < table.ep; ++r) {
      REQUIRE(table.ranks[r].device->makeCurrent(error));
      REQUIRE(table.timing(r).hipGraphLaunch(execs[r], table.streams[r]) == 0);
    }
  };

  // Each replay: new inputs, the eager forward's output bit for bit.
  auto replayWith = [&](const std::vector<ref::TokenBatch> &inputs,
                        const std::vector<std::vector<uint16_t>> &eager) {
    uploadInputs(table, inputs);
    replayAll();
    const auto replayed = downloadOutputs(table, kM);
    CHECK(replayed == eager);
    checkOracle(table, inputs, replayed);
    return replayed;
  };
  const auto replayFirst = replayWith(first, eagerFirst);
  if (replayAgain) {
    CHECK(replayWith(second, eagerSecond) != replayFirst);
    replayWith(first, eagerFirst);
  }

  for (uint32_t r = 0; r < table.ep; ++r) {
    CHECK(table.timing(r).hipGraphExecDestroy(execs[r]) == 0);
    CHECK(table.timing(r).hipGraphDestroy(graphs[r]) == 0);
  }
}

/// The first table of `bundlePath` that is (not) fused.
uint32_t findTable(const char *bundlePath, bool fused) {
  std::string error;
  auto bundle = rt::Bundle::open(bundlePath, error);
  REQUIRE(bundle);
  const auto &tables = bundle->selector().tables();
  for (uint32_t t = 0; t < tables.size(); ++t) {
    TableFacts facts;
    if (moec::harness::tableFacts(bundle->manifest(), tables[t], facts, error) &&
        facts.fused == fused)
      return t;
  }
  FAIL("no " << (fused ? "fused" : "unfused") << " table in " << bundlePath);
  return 0;
}

} // namespace

TEST_CASE("a captured layer forward replays like the eager one: unfused EP2",
          "[capture][layer]") {
  captureAndReplay(MOEC_EP2_SMALL_BUNDLE,
                   findTable(MOEC_EP2_SMALL_BUNDLE, false), false);
}

TEST_CASE("a captured layer forward replays like the eager one: fused EP2 "
          "peers, a device per rank, once",
          "[capture][layer][fused]") {
  captureAndReplay(MOEC_EP2_SMALL_BUNDLE, findTable(MOEC_EP2_SMALL_BUNDLE, true),
                   true, /*replayAgain=*/false);
}

// The fused kernels count their launch epoch in the control buffer
// (peer_protocol.h, MOEC_PEER_EPOCH), so a captured forward replays any
// number of times.
TEST_CASE("a captured fused EP2 forward replays again with new inputs",
          "[capture][layer][fused]") {
  captureAndReplay(MOEC_EP2_SMALL_BUNDLE, findTable(MOEC_EP2_SMALL_BUNDLE, true),
                   true);
}

TEST_CASE("a captured layer forward replays like the eager one: TP4",
          "[capture][layer]") {
  captureAndReplay(MOEC_TP4_SMALL_BUNDLE,
                   findTable(MOEC_TP4_SMALL_BUNDLE, false), false);
}

TEST_CASE("a captured layer forward replays like the eager one: FHMoE",
          "[capture][layer]") {
  captureAndReplay(MOEC_FHMOE_SMALL_BUNDLE,
                   findTable(MOEC_FHMOE_SMALL_BUNDLE, false), false);
}
