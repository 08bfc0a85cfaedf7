//===- DeviceTimer.cpp - `moec tune --device N`'s candidate timer ---------===//

#include "moec/Harness/DeviceTimer.h"
#include "moec/Harness/LaunchRecorder.h"
#include "moec/Harness/LayerSetup.h"

#include "moec/bundle.h"
#include "moec/hip_loader.h"
#include "moec/layer.h"
#include "moec/reference/Families.h"
#include "moec/reference/Generate.h"

#include <algorithm>
#include <cctype>
#include <ctime>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <tuple>

namespace moec::harness {

std::string deviceToken(const std::string &name, int ordinal) {
  std::string token;
  for (char c : name) {
    const bool keep = std::isalnum(static_cast<unsigned char>(c)) || c == '.' ||
                      c == '_' || c == '-';
    if (keep)
      token += c;
    else if (!token.empty() && token.back() != '-')
      token += '-';
  }
  while (!token.empty() && token.back() == '-')
    token.pop_back();
  if (token.empty())
    token = "hip-device";
  return token + "-gpu" + std::to_string(ordinal);
}

std::string timingMethodToken(const DeviceTimerOptions &options) {
  std::string flush = "noflush";
  if (options.flushBytes) {
    const uint64_t mib = options.flushBytes >> 20;
    flush = mib << 20 == options.flushBytes
                ? "flush" + std::to_string(mib) + "M"
                : "flush" + std::to_string(options.flushBytes) + "B";
  }
  const std::string statistic =
      options.meanOfPassMedians ? "mean-of-pass-medians" : "median";
  return "hip-graph-" + statistic + "-" + flush + "-" +
         std::to_string(options.passes) + "pass-reversed-" +
         (options.shuffleReversedPasses ? "shuffled-" : "") +
         std::to_string(options.passes * options.samplesPerPass) + "samples" +
         (options.replaysPerSample > 1
              ? "-" + std::to_string(options.replaysPerSample) + "replays"
              : "");
}

namespace {

constexpr const char *kEmulatedMessage =
    "timings are not available on moec's emulated device";

std::string todayUtc() {
  std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[16];
  std::strftime(text, sizeof(text), "%Y-%m-%d", &utc);
  return text;
}

double median(std::vector<double> values) {
  if (values.empty())
    return -1.0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

/// One device the timer uses: its stream, a pair of events and the flush
/// buffer, for the whole call.
struct DeviceContext {
  std::unique_ptr<rt::HipDevice> device;
  std::unique_ptr<DeviceMemory> memory;
  rt::hip::Stream stream = nullptr;
  rt::hip::Event start = nullptr, stop = nullptr;
  void *flush = nullptr;

  const rt::HipTimingSymbols &timing() const {
    return *device->library().timing();
  }
  ~DeviceContext() {
    if (!device)
      return;
    std::string ignored;
    (void)device->makeCurrent(ignored);
    const rt::HipTimingSymbols &t = timing();
    if (start)
      (void)t.hipEventDestroy(start);
    if (stop)
      (void)t.hipEventDestroy(stop);
    if (stream)
      (void)t.hipStreamDestroy(stream);
    memory.reset();
  }
};

/// A configuration as every pass sees it.
struct ConfigState {
  rt::TableHandle table;
  std::string name; ///< "flash ep4 ws1024"
  TableFacts facts;
  /// The devices of the ranks timed: every rank of a fused table, rank 0
  /// alone of an unfused one (an unfused rank is an independent layer).
  std::vector<int> ordinals;
  bool skipped = false;
  std::vector<std::vector<double>> samples; ///< per key
  std::vector<std::vector<double>> passMedians; ///< per key
  /// Per key, per stage: the stage and its median of every pass.
  std::vector<std::vector<StageTime>> stages;
  std::vector<std::vector<std::vector<double>>> stagePassMedians;
  std::vector<bool> stagesFailed;
};

/// The layer ranks of one configuration in one pass.
struct ConfigSetUp {
  std::vector<Rank> ranks;
  std::vector<std::unique_ptr<DeviceMemory>> memory;
  std::vector<DeviceContext *> contexts;
  uint32_t maxTokens = 0;
};

class Timer {
public:
  Timer(int device, const DeviceTimerOptions &options)
      : first_(device), options_(options) {}

  bool run(const std::string &bundlePath, const std::vector<TimedConfig> &configs,
           DeviceTimings &timings, std::string &error);

private:
  /// Loads the HIP library for one more device; refuses the emulated
  /// device and a library without the timing table.
  std::unique_ptr<rt::HipLibrary> loadLibrary(std::string &error) const;
  DeviceContext *context(int ordinal, std::string &error);
  bool place(const TimedConfig &config, ConfigState &state,
             std::string &skip) const;
  bool setUp(const TimedConfig &config, ConfigState &state, ConfigSetUp &out,
             std::string &error);
  const HostLayerWeights &hostWeights(const TableFacts &facts);
  const ref::TokenBatch &batch(const TableFacts &facts, uint32_t rank);
  /// Times `state` at key `m` for one pass: appends samples or fails.
  bool timeKey(ConfigState &state, ConfigSetUp &setUp, uint32_t m,
               std::vector<double> &samples, std::string &error);
  /// Each stage of the forward at `m` alone, for one pass: the stages in
  /// launch order and each one's samples.
  bool timeStages(ConfigSetUp &setUp, uint32_t m,
                  std::vector<StageTime> &stages,
                  std::vector<std::vector<double>> &samples,
                  std::string &error);
  /// Captures what `issue(r)` puts on rank r's stream in one graph per
  /// rank, replays them once (the upload) and `warmups` times, then takes
  /// a pass of samples, one flush before each; a sample is the slowest
  /// rank's time. Every rank's replay is queued before any is waited on:
  /// fused ranks wait on each other's kernels, and their launch epoch is
  /// in device memory, so a replayed graph serves any number of launches.
  bool sampleCaptured(ConfigSetUp &setUp,
                      const std::function<bool(size_t, std::string &)> &issue,
                      unsigned warmups, std::vector<double> &samples,
                      std::string &error);
  /// timeStages for key `k` in this pass, its pass medians kept in
  /// `state`; a failure is a `skipped` line and leaves the key's layer
  /// time alone.
  void timeKeyStages(ConfigState &state, ConfigSetUp &setUp, size_t k,
                     uint32_t m, DeviceTimings &timings);
  /// The stage times of every key timed in every pass.
  void collectStageTimes(const std::vector<TimedConfig> &configs,
                         const std::vector<ConfigState> &states,
                         const DeviceTimings &timings, StageTimings &out) const;
  bool syncAll(ConfigSetUp &setUp, std::string &error);
  bool flushAll(ConfigSetUp &setUp, std::string &error);
  /// Every rank's forward (the warm-ups before a key is captured).
  bool forwardAll(ConfigSetUp &setUp, uint32_t m, std::string &error);
  bool check(const rt::HipDevice &device, rt::hip::Error status,
             const char *what, std::string &error) const {
    if (status == rt::hip::kSuccess)
      return true;
    error = std::string(what) + " failed: " + device.library().describe(status);
    return false;
  }

  int first_;
  DeviceTimerOptions options_;
  int deviceCount_ = 0;
  std::unique_ptr<rt::Bundle> bundle_;
  std::map<int, std::unique_ptr<DeviceContext>> contexts_;
  std::map<std::tuple<int64_t, int64_t, int64_t, bool, bool>, HostLayerWeights>
      weights_;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, uint32_t>,
           ref::TokenBatch>
      batches_;
  uint32_t batchTokens_ = 0;
};

std::unique_ptr<rt::HipLibrary> Timer::loadLibrary(std::string &error) const {
  std::unique_ptr<rt::HipLibrary> library = rt::HipLibrary::load(
      options_.libraries.empty() ? rt::defaultHipLibraryCandidates()
                                 : options_.libraries,
      error);
  if (!library)
    return nullptr;
  // The emulated device runs kernel IR on the CPU: its times say nothing
  // about the chip. It is known by the entry point only it exports.
  if (library->exports("moecEmulatedRegisterKernelIr")) {
    error = kEmulatedMessage;
    return nullptr;
  }
  if (!library->timing()) {
    error = "timings are not available: " + library->timingError();
    return nullptr;
  }
  return library;
}

DeviceContext *Timer::context(int ordinal, std::string &error) {
  if (auto it = contexts_.find(ordinal); it != contexts_.end())
    return it->second.get();
  auto context = std::make_unique<DeviceContext>();
  std::unique_ptr<rt::HipLibrary> library = loadLibrary(error);
  if (!library)
    return nullptr;
  context->device = rt::HipDevice::create(std::move(library), ordinal, error);
  if (!context->device)
    return nullptr;
  const rt::HipDevice &device = *context->device;
  const rt::HipTimingSymbols &t = context->timing();
  context->memory = std::make_unique<DeviceMemory>(device);
  if (!device.makeCurrent(error) ||
      !check(device, t.hipStreamCreate(&context->stream), "hipStreamCreate",
             error) ||
      !check(device, t.hipEventCreate(&context->start), "hipEventCreate", error) ||
      !check(device, t.hipEventCreate(&context->stop), "hipEventCreate", error))
    return nullptr;
  if (options_.flushBytes &&
      !(context->flush = context->memory->allocate(options_.flushBytes, error)))
    return nullptr;
  return (contexts_[ordinal] = std::move(context)).get();
}

bool Timer::place(const TimedConfig &config, ConfigState &state,
                  std::string &skip) const {
  state.ordinals.clear();
  auto ordinal = [&](uint32_t r) {
    return options_.devices.empty()                ? first_ + int(r)
           : r < options_.devices.size() ? options_.devices[r]
                                                   : -1;
  };
  if (!state.facts.fused) {
    state.ordinals.push_back(ordinal(0));
    return true;
  }
  // Fused ranks wait on each other's kernels: one device each.
  if (options_.devices.empty() && first_ + int64_t(config.ep) > deviceCount_) {
    skip = state.name + ": fused ranks need a device each: " +
           std::to_string(config.ep) + " devices (" + std::to_string(first_) +
           " to " + std::to_string(first_ + int(config.ep) - 1) +
           "), the HIP library reports " + std::to_string(deviceCount_);
    return false;
  }
  for (uint32_t r = 0; r < config.ep; ++r) {
    if (ordinal(r) < 0 || ordinal(r) >= deviceCount_) {
      skip = state.name + ": fused ranks need a device each: rank " +
             std::to_string(r) + " has none of the " +
             std::to_string(deviceCount_) + " devices (--device lists " +
             std::to_string(options_.devices.size()) + ")";
      return false;
    }
    state.ordinals.push_back(ordinal(r));
  }
  return true;
}

const HostLayerWeights &Timer::hostWeights(const TableFacts &facts) {
  const int64_t H = facts.problem.hidden, I = facts.problem.intermediate;
  const int64_t E = facts.problem.experts;
  auto key = std::make_tuple(H, I, E, facts.shared, facts.bias);
  if (auto it = weights_.find(key); it != weights_.end())
    return it->second;
  // One generated expert, repeated over every local expert: the times do
  // not depend on the values, and a real-shape layer's every expert would
  // take minutes to generate.
  HostLayerWeights &host = weights_[key];
  host.experts = 1;
  const uint64_t seed = options_.seed;
  ref::materializeWeights(
      ref::GeneratedMxfp4Weights(seed, 13, 1, 2 * I, H,
                                 ref::defaultScaleExponent(H)),
      host.w13, host.w13Scales);
  ref::materializeWeights(
      ref::GeneratedMxfp4Weights(seed, 2, 1, H, I, ref::defaultScaleExponent(I)),
      host.w2, host.w2Scales);
  if (facts.shared) {
    ref::generateFp8Expert(seed, 113, 2 * I, H, host.sharedW13,
                           host.sharedW13Scales);
    ref::generateFp8Expert(seed, 112, H, I, host.sharedW2, host.sharedW2Scales);
  }
  if (facts.bias)
    generateBiases(seed, E + (facts.shared ? 1 : 0), H, I, host.w13Bias,
                   host.w2Bias);
  return host;
}

const ref::TokenBatch &Timer::batch(const TableFacts &facts, uint32_t rank) {
  const rt::LayerProblem &p = facts.problem;
  auto key = std::make_tuple(int64_t(p.hidden), int64_t(p.intermediate),
                             int64_t(p.experts), int64_t(p.topK), rank);
  if (auto it = batches_.find(key); it != batches_.end())
    return it->second;
  // Every key's tokens are the first M rows of one batch: all routes valid
  // and spread over every expert (an unfused rank serves its share).
  ref::MoeShape shape{int64_t(p.hidden), int64_t(p.intermediate),
                      int64_t(p.experts), int64_t(p.topK)};
  return batches_[key] = ref::generateBatch(options_.seed, rank, batchTokens_,
                                            shape, ref::RoutingOptions());
}

bool Timer::setUp(const TimedConfig &config, ConfigState &state,
                  ConfigSetUp &out, std::string &error) {
  const TableFacts &facts = state.facts;
  const size_t ranks = state.ordinals.size();
  out.ranks.resize(ranks);
  for (size_t r = 0; r < ranks; ++r) {
    DeviceContext *ctx = context(state.ordinals[r], error);
    if (!ctx)
      return false;
    out.contexts.push_back(ctx);
    Rank &rank = out.ranks[r];
    rank.loader = std::make_unique<rt::KernelLoader>(*ctx->device, *bundle_);
    rt::LayerProblem problem = facts.problem;
    problem.epRank = uint32_t(r);
    problem.maxTokens = config.maxTokens;
    if (!ctx->device->makeCurrent(error) ||
        !(rank.layer =
              rt::Layer::create(*rank.loader, state.table, problem, error)))
      return false;
    out.memory.push_back(std::make_unique<DeviceMemory>(*ctx->device));
  }
  const rt::LayerMemory &layerMemory = out.ranks[0].layer->memory();
  out.maxTokens = layerMemory.maxTokens;
  const HostLayerWeights &host = hostWeights(facts);
  for (size_t r = 0; r < ranks; ++r)
    if (!setUpRank(out.ranks[r], *out.memory[r], facts, config.ep, uint32_t(r),
                   host, layerMemory, error))
      return false;
  if (layerMemory.peerBytes && !bindRankPeers(out.ranks, error))
    return false;
  // The tokens: rank r of a fused table its own batch, else rank 0's.
  const uint64_t H = facts.problem.hidden, K = facts.problem.topK;
  for (size_t r = 0; r < ranks; ++r) {
    const ref::TokenBatch &tokens = batch(facts, facts.fused ? uint32_t(r) : 0);
    const uint64_t rows = std::min<uint64_t>(uint64_t(tokens.tokens),
                                             layerMemory.maxTokens);
    Rank &rank = out.ranks[r];
    DeviceMemory &mem = *out.memory[r];
    if (!out.contexts[r]->device->makeCurrent(error) ||
        !mem.upload(rank.hidden, tokens.hiddenBf16.data(), rows * H * 2, error) ||
        !mem.upload(rank.ids, tokens.topkIds.data(), rows * K * 4, error) ||
        !mem.upload(rank.weights, tokens.topkWeights.data(), rows * K * 4, error))
      return false;
  }
  return true;
}

bool Timer::forwardAll(ConfigSetUp &setUp, uint32_t m, std::string &error) {
  // Every rank's forward is queued before any is waited on: fused ranks
  // wait on each other's kernels.
  for (size_t r = 0; r < setUp.ranks.size(); ++r) {
    Rank &rank = setUp.ranks[r];
    DeviceContext &ctx = *setUp.contexts[r];
    if (!ctx.device->makeCurrent(error))
      return false;
    if (rank.layer->forward(rankInputs(rank, m), ctx.stream, error) !=
        rt::Layer::ForwardStatus::Ok) {
      error = "forward: " + error;
      return false;
    }
  }
  return true;
}

bool Timer::syncAll(ConfigSetUp &setUp, std::string &error) {
  for (DeviceContext *ctx : setUp.contexts)
    if (!ctx->device->makeCurrent(error) ||
        !check(*ctx->device,
               ctx->device->hipApi().hipStreamSynchronize(ctx->stream),
               "hipStreamSynchronize", error))
      return false;
  return true;
}

bool Timer::flushAll(ConfigSetUp &setUp, std::string &error) {
  if (!options_.flushBytes)
    return true;
  for (DeviceContext *ctx : setUp.contexts)
    if (!ctx->device->makeCurrent(error) ||
        !ctx->memory->fill(ctx->flush, 0, options_.flushBytes, error,
                           ctx->stream))
      return false;
  return true;
}

bool Timer::timeKey(ConfigState &state, ConfigSetUp &setUp, uint32_t m,
                    std::vector<double> &samples, std::string &error) {
  if (m == 0 || m > setUp.maxTokens) {
    error = "m=" + std::to_string(m) + " outside the layer's 1.." +
            std::to_string(setUp.maxTokens) + " tokens";
    return false;
  }
  for (unsigned w = 0; w < options_.warmups; ++w)
    if (!forwardAll(setUp, m, error))
      return false;
  if (!syncAll(setUp, error))
    return false;

  // Every rank (rank 0 alone of an unfused table): its forward captured
  // right before its samples, so the replay's arguments are this key's.
  return sampleCaptured(
      setUp,
      [&](size_t r, std::string &why) {
        Rank &rank = setUp.ranks[r];
        if (rank.layer->forward(rankInputs(rank, m), setUp.contexts[r]->stream,
                                why) == rt::Layer::ForwardStatus::Ok)
          return true;
        why = "forward under capture: " + why;
        return false;
      },
      0, samples, error);
}

bool Timer::timeStages(ConfigSetUp &setUp, uint32_t m,
                       std::vector<StageTime> &stages,
                       std::vector<std::vector<double>> &samples,
                       std::string &error) {
  DeviceContext &ctx = *setUp.contexts[0];
  Rank &rank = setUp.ranks[0];
  const rt::LayerInputs inputs = rankInputs(rank, m);
  // One forward, launched for real (its data feeds the stages replayed
  // below) and recorded; then each stage's operations on their own.
  std::vector<RecordedOp> ops;
  if (!ctx.device->makeCurrent(error) ||
      !recordForward(
          *ctx.device,
          [&](std::string &why) {
            if (rank.layer->forward(inputs, ctx.stream, why) ==
                rt::Layer::ForwardStatus::Ok)
              return true;
            why = "forward: " + why;
            return false;
          },
          ops, error) ||
      !syncAll(setUp, error))
    return false;
  const rt::Manifest &manifest = bundle_->manifest();
  std::vector<StageOps> stageOps;
  if (!splitByStage(ops, manifest,
                    manifest.configs[rank.layer->lastForward().config],
                    stageOps, error))
    return false;
  stages.clear();
  samples.assign(stageOps.size(), {});
  for (size_t s = 0; s < stageOps.size(); ++s) {
    stages.push_back({rt::stageName(stageOps[s].stage), stageOps[s].kernels});
    if (!sampleCaptured(
            setUp,
            [&](size_t, std::string &why) {
              return issueOps(*ctx.device, stageOps[s].ops, ctx.stream, why);
            },
            options_.warmups, samples[s], error)) {
      error = stages.back().stage + ": " + error;
      return false;
    }
  }
  return true;
}

bool Timer::sampleCaptured(
    ConfigSetUp &setUp, const std::function<bool(size_t, std::string &)> &issue,
    unsigned warmups, std::vector<double> &samples, std::string &error) {
  const size_t ranks = setUp.ranks.size();
  std::vector<rt::hip::Graph> graphs(ranks, nullptr);
  std::vector<rt::hip::GraphExec> execs(ranks, nullptr);
  struct Cleanup {
    ConfigSetUp &setUp;
    std::vector<rt::hip::Graph> &graphs;
    std::vector<rt::hip::GraphExec> &execs;
    ~Cleanup() {
      for (size_t r = 0; r < graphs.size(); ++r) {
        const rt::HipTimingSymbols &t = setUp.contexts[r]->timing();
        if (execs[r])
          (void)t.hipGraphExecDestroy(execs[r]);
        if (graphs[r])
          (void)t.hipGraphDestroy(graphs[r]);
      }
    }
  } cleanup{setUp, graphs, execs};
  for (size_t r = 0; r < ranks; ++r) {
    DeviceContext &ctx = *setUp.contexts[r];
    const rt::HipDevice &device = *ctx.device;
    const rt::HipTimingSymbols &t = ctx.timing();
    if (!device.makeCurrent(error) ||
        !check(device,
               t.hipStreamBeginCapture(ctx.stream,
                                       rt::hip::kStreamCaptureModeGlobal),
               "hipStreamBeginCapture", error))
      return false;
    std::string issueError;
    const bool issued = issue(r, issueError);
    // The capture ends whatever the issue did, or the stream stays in it.
    const rt::hip::Error ended = t.hipStreamEndCapture(ctx.stream, &graphs[r]);
    if (!issued) {
      error = issueError;
      return false;
    }
    char log[256] = {};
    rt::hip::GraphNode errorNode = nullptr;
    if (!check(device, ended, "hipStreamEndCapture", error) ||
        !check(device,
               t.hipGraphInstantiate(&execs[r], graphs[r], &errorNode, log,
                                     sizeof(log)),
               "hipGraphInstantiate", error))
      return false;
  }
  // Every rank's replays, between its events when `timed`.
  auto replayAll = [&](unsigned count, bool timed) {
    for (size_t r = 0; r < ranks; ++r) {
      DeviceContext &ctx = *setUp.contexts[r];
      const rt::HipDevice &device = *ctx.device;
      const rt::HipTimingSymbols &t = ctx.timing();
      if (!device.makeCurrent(error) ||
          (timed && !check(device, t.hipEventRecord(ctx.start, ctx.stream),
                           "hipEventRecord", error)))
        return false;
      for (unsigned i = 0; i < count; ++i)
        if (!check(device, t.hipGraphLaunch(execs[r], ctx.stream),
                   "hipGraphLaunch", error))
          return false;
      if (timed && !check(device, t.hipEventRecord(ctx.stop, ctx.stream),
                          "hipEventRecord", error))
        return false;
    }
    return true;
  };
  // The first replay uploads the graph; it is not a sample.
  if (!replayAll(1 + warmups, false) || !syncAll(setUp, error))
    return false;
  for (unsigned s = 0; s < options_.samplesPerPass; ++s) {
    if (!flushAll(setUp, error) ||
        !replayAll(options_.replaysPerSample, true))
      return false;
    double slowest = 0.0;
    for (size_t r = 0; r < ranks; ++r) {
      DeviceContext &ctx = *setUp.contexts[r];
      const rt::HipTimingSymbols &t = ctx.timing();
      float ms = 0.0f;
      if (!ctx.device->makeCurrent(error) ||
          !check(*ctx.device, t.hipEventSynchronize(ctx.stop),
                 "hipEventSynchronize", error) ||
          !check(*ctx.device, t.hipEventElapsedTime(&ms, ctx.start, ctx.stop),
                 "hipEventElapsedTime", error))
        return false;
      slowest = std::max(slowest, double(ms) * 1000.0 /
                                      double(options_.replaysPerSample));
    }
    samples.push_back(slowest);
  }
  return syncAll(setUp, error);
}

bool Timer::run(const std::string &bundlePath,
                const std::vector<TimedConfig> &configs, DeviceTimings &timings,
                std::string &error) {
  timings = DeviceTimings();
  if (options_.passes == 0 || options_.samplesPerPass == 0) {
    error = "the timer needs at least one pass and one sample";
    return false;
  }
  // The first device: refusals (no HIP, the emulated device, no timing
  // entry points, no such device) end the call before anything is timed.
  DeviceContext *first = context(first_, error);
  if (!first)
    return false;
  const rt::HipDevice &device = *first->device;
  if (!check(device, device.hipApi().hipGetDeviceCount(&deviceCount_),
             "hipGetDeviceCount", error))
    return false;
  char name[256] = {};
  if (!check(device, first->timing().hipDeviceGetName(name, sizeof(name) - 1, first_),
             "hipDeviceGetName", error))
    return false;
  timings.device = deviceToken(name, first_);
  timings.date = todayUtc();
  if (!(bundle_ = rt::Bundle::open(bundlePath, error)))
    return false;

  std::vector<ConfigState> states(configs.size());
  timings.us.assign(configs.size(), {});
  for (size_t c = 0; c < configs.size(); ++c) {
    const TimedConfig &config = configs[c];
    ConfigState &state = states[c];
    state.name = rt::describeTableKey(config.network, config.ep, config.workspace);
    state.samples.assign(config.keys.size(), {});
    state.passMedians.assign(config.keys.size(), {});
    state.stages.assign(config.keys.size(), {});
    state.stagePassMedians.assign(config.keys.size(), {});
    state.stagesFailed.assign(config.keys.size(), false);
    timings.us[c].assign(config.keys.size(), -1.0);
    std::string reason;
    if (!bundle_->selector().resolveTable(config.network, config.ep,
                                          config.workspace, state.table, reason) ||
        !tableFacts(bundle_->manifest(),
                    bundle_->selector().tables()[state.table.index], state.facts,
                    reason)) {
      state.skipped = true;
      timings.skipped.push_back(state.name + ": " + reason);
      continue;
    }
    if (!place(config, state, reason)) {
      state.skipped = true;
      timings.skipped.push_back(reason);
      continue;
    }
    for (int64_t m : config.keys)
      batchTokens_ = std::max(batchTokens_, uint32_t(std::max<int64_t>(m, 0)));
  }
  timings.method = timingMethodToken(options_);

  std::mt19937_64 shuffler(options_.seed);
  bool stopped = false;
  for (unsigned pass = 0; pass < options_.passes && !stopped; ++pass) {
    for (size_t i = 0; i < configs.size() && !stopped; ++i) {
      // Every other pass in reversed order: what the device carries from
      // one configuration to the next (clocks, heat) falls on both sides.
      const size_t c = pass % 2 ? configs.size() - 1 - i : i;
      ConfigState &state = states[c];
      if (state.skipped)
        continue;
      if (options_.progress)
        options_.progress("pass " + std::to_string(pass + 1) + "/" +
                          std::to_string(options_.passes) + ": " + state.name);
      ConfigSetUp setUp;
      std::string reason;
      if (!this->setUp(configs[c], state, setUp, reason)) {
        state.skipped = true;
        timings.skipped.push_back(state.name + ": set-up: " + reason);
        continue;
      }
      std::vector<size_t> keyOrder(configs[c].keys.size());
      for (size_t k = 0; k < keyOrder.size(); ++k)
        keyOrder[k] = k;
      if (pass % 2 && options_.shuffleReversedPasses)
        std::shuffle(keyOrder.begin(), keyOrder.end(), shuffler);
      for (size_t k : keyOrder) {
        if (options_.stop && options_.stop()) {
          stopped = true;
          break;
        }
        std::vector<double> &samples = state.samples[k];
        if (pass > 0 && samples.empty())
          continue; // failed in an earlier pass
        const uint32_t m = uint32_t(configs[c].keys[k]);
        std::vector<double> taken;
        if (!timeKey(state, setUp, m, taken, reason)) {
          if (pass == 0 || !samples.empty())
            timings.skipped.push_back(state.name + " m=" + std::to_string(m) +
                                      ": " + reason);
          samples.clear();
          continue;
        }
        samples.insert(samples.end(), taken.begin(), taken.end());
        state.passMedians[k].push_back(median(taken));
        if (options_.stageTimes && !state.facts.fused)
          timeKeyStages(state, setUp, k, m, timings);
      }
    }
  }
  for (size_t c = 0; c < configs.size(); ++c)
    if (!states[c].skipped)
      for (size_t k = 0; k < configs[c].keys.size(); ++k) {
        const std::vector<double> &medians = states[c].passMedians[k];
        // A key the stop left without every pass is not reported.
        if (medians.size() != options_.passes)
          continue;
        timings.us[c][k] =
            options_.meanOfPassMedians
                ? std::accumulate(medians.begin(), medians.end(), 0.0) /
                      double(medians.size())
                : median(states[c].samples[k]);
      }
  if (options_.stageTimes)
    collectStageTimes(configs, states, timings, *options_.stageTimes);
  return true;
}

void Timer::timeKeyStages(ConfigState &state, ConfigSetUp &setUp, size_t k,
                          uint32_t m, DeviceTimings &timings) {
  if (state.stagesFailed[k])
    return;
  std::vector<StageTime> stages;
  std::vector<std::vector<double>> taken;
  std::string reason = "the stages differ between passes";
  if (!timeStages(setUp, m, stages, taken, reason) ||
      (!state.stages[k].empty() && stages.size() != state.stages[k].size())) {
    timings.skipped.push_back(state.name + " m=" + std::to_string(m) +
                              ": stages not timed: " + reason);
    state.stagesFailed[k] = true;
    state.stages[k].clear();
    return;
  }
  state.stages[k] = stages;
  state.stagePassMedians[k].resize(stages.size());
  for (size_t s = 0; s < stages.size(); ++s)
    state.stagePassMedians[k][s].push_back(median(taken[s]));
}

void Timer::collectStageTimes(const std::vector<TimedConfig> &configs,
                              const std::vector<ConfigState> &states,
                              const DeviceTimings &timings,
                              StageTimings &out) const {
  out.assign(configs.size(), {});
  for (size_t c = 0; c < configs.size(); ++c) {
    out[c].assign(configs[c].keys.size(), {});
    for (size_t k = 0; k < configs[c].keys.size(); ++k) {
      // Only keys whose layer time is reported, with every pass's stages.
      if (timings.us[c][k] < 0 || states[c].stages[k].empty())
        continue;
      std::vector<StageTime> stages = states[c].stages[k];
      bool complete = true;
      for (size_t s = 0; s < stages.size(); ++s) {
        const std::vector<double> &medians = states[c].stagePassMedians[k][s];
        complete &= medians.size() == options_.passes;
        stages[s].us = options_.meanOfPassMedians
                           ? std::accumulate(medians.begin(), medians.end(),
                                             0.0) /
                                 double(std::max<size_t>(medians.size(), 1))
                           : median(medians);
      }
      if (complete)
        out[c][k] = std::move(stages);
    }
  }
}

} // namespace

CandidateTimer makeDeviceTimer(int device, DeviceTimerOptions options) {
  return [device, options](const std::string &bundlePath,
                           const std::vector<TimedConfig> &configs,
                           DeviceTimings &timings, std::string &error) {
    Timer timer(device, options);
    return timer.run(bundlePath, configs, timings, error);
  };
}

} // namespace moec::harness
