//===- PeerHarness.cpp - a MegaMoE layer over emulated EP ranks -----------===//

#include "moec/Harness/PeerHarness.h"

#include "moec/grid_rule.h"
#include "moec/abi/peer_protocol.h"
#include "moec/reference/Families.h"
#include "moec/reference/Formats.h"
#include "moec/reference/Npy.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <sstream>

using namespace mlir;

namespace moec::emu {
namespace {

/// The problem and transport of the fused stages, read from the stage 1
/// spec and checked against the other two.
struct PeerShape {
  StageShape stage1;
  int64_t hidden = 0, intermediate = 0, experts = 0, topK = 0, ep = 1;
  int64_t localExperts = 0, tileM = 0, capacity = 0, maxTokens = 0;
  int64_t workgroups1 = 0, workgroups2 = 0, combineWaves = 4;
  double swigluLimit = 0.0;
  bool compact = false;
  /// Stage 2 sends, and the combine reads, FP8 1x32 rows (payload = fp8).
  bool fp8Payload = false;
  /// Receive rows of one rank.
  int64_t rows() const { return compact ? capacity : localExperts * capacity; }
  /// Where the regions of a rank's symmetric buffer lie (peer_protocol.h).
  peer::BufferLayout layout() const {
    return peer::bufferLayout(localExperts, ep, rows(), hidden, topK, maxTokens);
  }
};

/// Workgroups of a persistent fused kernel: its ABI's fixed grid (the
/// builder's own value), else `fallback`.
int64_t fixedGrid(const BuiltKernel &kernel, int64_t fallback) {
  const int64_t grid =
      std::strtoll(kernel.description.abi.gridX.c_str(), nullptr, 10);
  return grid > 0 ? grid : fallback;
}

LogicalResult parsePeerShape(const BuiltKernel &stage1, const BuiltKernel &stage2,
                             const BuiltKernel &combine, PeerShape &shape,
                             std::string &error) {
  const std::string &symbol1 = stage1.description.symbol;
  StageShape s1, s2, c;
  for (auto [kernel, out] : {std::pair{&stage1, &s1}, std::pair{&stage2, &s2},
                             std::pair{&combine, &c}})
    if (ref::Status status = parseStageShape(*kernel, *out); !status) {
      error = "peer harness: " + kernel->description.symbol + ": " +
              status.message();
      return failure();
    }
  if (!s1.fused || !s2.fused || s1.capacity <= 0 || s1.workgroups <= 0 ||
      s2.workgroups <= 0) {
    error = "peer harness: " + symbol1 + " / " + stage2.description.symbol +
            " are not fused peer stages (transport = fixed_slot or compact)";
    return failure();
  }
  shape.stage1 = s1;
  shape.hidden = s1.hidden;
  shape.intermediate = s1.intermediate;
  shape.experts = s1.experts;
  shape.topK = s1.topK;
  shape.ep = s1.ep;
  shape.localExperts = s1.localExperts;
  shape.tileM = s1.tileM;
  shape.capacity = s1.capacity;
  shape.maxTokens = s1.maxTokens;
  shape.workgroups1 = fixedGrid(stage1, s1.workgroups);
  shape.workgroups2 = fixedGrid(stage2, s2.workgroups);
  shape.combineWaves = c.waves;
  shape.swigluLimit = s1.swigluLimit;
  shape.compact = s1.compact;
  for (const StageShape *other : {&s2, &c})
    if (other->hidden != s1.hidden || other->intermediate != s1.intermediate ||
        other->experts != s1.experts || other->topK != s1.topK ||
        other->ep != s1.ep) {
      error = "peer harness: the problem of " +
              (other == &s2 ? stage2 : combine).description.symbol +
              " differs from " + symbol1;
      return failure();
    }
  if (s2.capacity != shape.capacity || s2.maxTokens != shape.maxTokens ||
      !c.peerRows) {
    error = "peer harness: stage 2 must share stage 1's capacity and "
            "max_tokens, and the combine must read peer_rows";
    return failure();
  }
  if (s2.fp8PeerRows != c.fp8PeerRows) {
    error = "peer harness: " + stage2.description.symbol + " sends " +
            (s2.fp8PeerRows ? "FP8" : "BF16") + " combine rows (payload), but " +
            combine.description.symbol + " reads " +
            (c.fp8PeerRows ? "FP8" : "BF16") + " rows (fp8_peer_rows)";
    return failure();
  }
  shape.fp8Payload = s2.fp8PeerRows;
  return success();
}

/// One rank's buffers in the shared global memory (`x`: the BF16 tokens a
/// quant kernel reads; `symmetric`: its symmetric buffer, whose regions
/// PeerShape::layout places).
struct RankBuffers {
  unsigned x, a, aScale, ids, weights, w13, w13Scale, w2, w2Scale;
  unsigned symmetric, inter, interScale, out;
};

/// Counts the token codes and scales the quant kernel wrote on each rank
/// that differ from the oracle's input quantisation, and those it left
/// unwritten. Run before stage 1, which reads (and the dispatch sends) them.
void checkInputQuantisation(const GlobalMemory &memory,
                            const std::vector<RankBuffers> &buffers,
                            const std::vector<ref::TokenBatch> &batches,
                            const std::vector<ref::MegaMoeRankResult> &oracle,
                            int64_t hidden, PeerLayerOutcome &outcome) {
  for (size_t r = 0; r < buffers.size(); ++r) {
    const ref::StageResults &want = oracle[r].stages;
    const size_t codes = size_t(batches[r].tokens * hidden);
    const size_t scales = codes / 32;
    for (size_t i = 0; i < codes; ++i) {
      outcome.inputUnwritten += !memory.written(buffers[r].a)[i];
      outcome.inputMismatches +=
          memory.data(buffers[r].a)[i] != want.inputCodes[i];
    }
    for (size_t i = 0; i < scales; ++i) {
      outcome.inputUnwritten += !memory.written(buffers[r].aScale)[i];
      outcome.inputMismatches +=
          memory.data(buffers[r].aScale)[i] != want.inputScales[i];
    }
  }
}

/// The kernels of one run: the three fused stages and the optional
/// separate dispatch and leading quant kernels.
struct PeerKernels {
  const BuiltKernel &stage1, &stage2, &combine;
  const BuiltKernel *dispatch, *quant;
};

/// Every launch's tokens up front: only experts some route names are
/// generated and copied in; the others stay poisoned, so a kernel that
/// reads them is a finding (and real shapes stay affordable). `used` gets
/// the experts some route names.
std::vector<std::vector<ref::TokenBatch>>
generateLaunches(const PeerShape &shape, const PeerLayerOptions &options,
                 std::vector<bool> &used) {
  const int64_t ep = shape.ep, K = shape.topK;
  std::vector<std::vector<ref::TokenBatch>> launches(size_t(options.epochs));
  used.assign(size_t(shape.experts), false);
  ref::RoutingOptions routing;
  routing.invalidFraction = options.invalidFraction;
  if (options.hotRank >= 0) {
    routing.ep = ep;
    routing.hotRank = options.hotRank;
  }
  for (int epoch = 1; epoch <= options.epochs; ++epoch) {
    std::vector<ref::TokenBatch> &batches = launches[size_t(epoch - 1)];
    batches.resize(size_t(ep));
    for (int64_t r = 0; r < ep; ++r) {
      const int tokensOf = options.repeatTokens ? 1 : epoch;
      batches[r] = generateTokens(options.seed + uint64_t(tokensOf) * 7919,
                                  /*stream=*/uint64_t(r),
                                  options.tokensPerRank[r], shape.stage1,
                                  routing);
      // Duplicate ids: a fixed, seeded choice of tokens.
      uint64_t state = options.seed * 6364136223846793005ull + uint64_t(r);
      for (int64_t t = 0; K >= 2 && t < batches[r].tokens; ++t) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        if (double(state >> 11) * 0x1.0p-53 < options.duplicateFraction)
          batches[r].topkIds[size_t(t * K + 1)] = batches[r].topkIds[size_t(t * K)];
      }
      for (int32_t id : batches[r].topkIds)
        if (id >= 0 && id < shape.experts)
          used[size_t(id)] = true;
    }
  }
  return launches;
}

/// Sums of one epoch's comparison over the ranks.
struct EpochErrors {
  double interErr = 0, interRef = 0, outErr = 0, outRef = 0;
  int64_t overTolerance = 0;
};

/// One run of the fused layer: the ranks' buffers in one global memory,
/// and per epoch the oracle, the launches and the comparison.
class PeerLayerRun {
public:
  PeerLayerRun(const PeerShape &shape, const PeerLayerOptions &options,
               const ref::WeightSource &w13, const ref::WeightSource &w2,
               PeerLayerOutcome &outcome)
      : shape(shape), options(options), w13(w13), w2(w2), outcome(outcome) {}

  /// Every rank's buffers: the weights of its `used` experts written,
  /// the control words zeroed, the rest allocated.
  void allocate(const std::vector<bool> &used);
  /// The oracle of launch `epoch`; with a fixed-slot capacity too small for
  /// the routing, planned with room for every route (the kernels must then
  /// report overflow).
  LogicalResult runOracle(int epoch, const std::vector<ref::TokenBatch> &batches,
                          std::vector<ref::MegaMoeRankResult> &oracle,
                          std::string &error);
  /// Inputs: the BF16 tokens for the quant kernel, or else the oracle's
  /// quantised tokens (the source-side 1x32 step that precedes stage 1);
  /// receive rows, outputs and combine rows poisoned.
  void writeInputs(const std::vector<ref::TokenBatch> &batches,
                   const std::vector<ref::MegaMoeRankResult> &oracle,
                   bool quant);
  /// The launches of `epoch` in three phases: quant; dispatch and stage 1;
  /// stage 2 and combine.
  LogicalResult planLaunches(int epoch,
                             const std::vector<ref::TokenBatch> &batches,
                             const PeerKernels &kernels,
                             std::vector<KernelLaunch> (&phases)[3],
                             std::string &error);
  /// Runs the phases in order, summing stats and findings; checks the quant
  /// kernel's tokens after phase 0.
  LogicalResult runPhases(int epoch, std::vector<KernelLaunch> (&phases)[3],
                          const std::vector<ref::TokenBatch> &batches,
                          const std::vector<ref::MegaMoeRankResult> &oracle,
                          std::string &error);
  /// Compares rank `r`'s receive counts, intermediate rows and output with
  /// the oracle.
  void compareRank(int epoch, int64_t r, int64_t tokens,
                   const ref::MegaMoeRankResult &want, EpochErrors &errors);
  /// The last epoch's tokens and outputs per rank (outcome.ranks).
  void recordRankIo(const std::vector<ref::TokenBatch> &batches,
                    const std::vector<ref::MegaMoeRankResult> &oracle,
                    bool quant);
  /// options.saveDir: each rank's receive metadata and intermediate.
  LogicalResult saveRankArrays(std::string &error);
  /// Rank r's output bytes (`tokens` BF16 rows).
  std::vector<uint8_t> outputBytes(int64_t r, int64_t tokens) {
    const uint8_t *out = memory.data(buffers[size_t(r)].out);
    return std::vector<uint8_t>(out, out + size_t(tokens * shape.hidden * 2));
  }
  /// The overflow words of every rank, summed.
  int64_t overflowWords() {
    int64_t sum = 0;
    for (const RankBuffers &rb : buffers)
      sum += reinterpret_cast<const int32_t *>(memory.data(rb.symmetric) +
                                               shape.layout().control)[peer::kOverflow];
    return sum;
  }

  std::ostringstream summary;

private:
  /// Rows per local expert as the kernels counted them in launch `epoch`,
  /// and where each expert's rows start (compact: packed in expert order).
  void receiveCounts(int epoch, const int32_t *control,
                     std::vector<int64_t> &counts,
                     std::vector<int64_t> &firstRow) const;
  LaunchConfig launchOf(int64_t grid) const {
    LaunchConfig launch;
    launch.grid = {grid, 1, 1};
    launch.maxResidentWorkgroups = options.maxResidentWorkgroups
                                       ? options.maxResidentWorkgroups
                                       : unsigned(grid);
    return launch;
  }

  const PeerShape &shape;
  const PeerLayerOptions &options;
  const ref::WeightSource &w13, &w2;
  PeerLayerOutcome &outcome;
  GlobalMemory memory;
  std::vector<RankBuffers> buffers;
};

void PeerLayerRun::allocate(const std::vector<bool> &used) {
  const int64_t H = shape.hidden, I = shape.intermediate, ep = shape.ep;
  const int64_t L = shape.localExperts, K = shape.topK;
  const int64_t rows = shape.rows();
  auto addBuffer = [&](const std::string &name, size_t bytes) {
    // Empty ranks still pass valid pointers.
    return memory.addBuffer(name, std::max<size_t>(bytes, 16));
  };
  buffers.resize(size_t(ep));
  for (int64_t r = 0; r < ep; ++r) {
    RankBuffers &rb = buffers[r];
    const std::string p = "rank" + std::to_string(r) + ".";
    const size_t w13Bytes = size_t(L * 2 * I * H / 2),
                 w13ScaleBytes = size_t(L * 2 * I * H / 32);
    const size_t w2Bytes = size_t(L * H * I / 2), w2ScaleBytes = size_t(L * H * I / 32);
    rb.w13 = addBuffer(p + "w13", w13Bytes);
    rb.w13Scale = addBuffer(p + "w13_scale", w13ScaleBytes);
    rb.w2 = addBuffer(p + "w2", w2Bytes);
    rb.w2Scale = addBuffer(p + "w2_scale", w2ScaleBytes);
    ref::WeightScratch scratch;
    for (int64_t e = 0; e < L; ++e) {
      if (!used[size_t(r * L + e)])
        continue;
      ref::ExpertRows gateUp = w13.expertRows(r * L + e, 0, 2 * I, scratch);
      memory.write(rb.w13, size_t(e) * w13Bytes / L, gateUp.elements, w13Bytes / L);
      memory.write(rb.w13Scale, size_t(e) * w13ScaleBytes / L, gateUp.scales,
                   w13ScaleBytes / L);
      ref::ExpertRows down = w2.expertRows(r * L + e, 0, H, scratch);
      memory.write(rb.w2, size_t(e) * w2Bytes / L, down.elements, w2Bytes / L);
      memory.write(rb.w2Scale, size_t(e) * w2ScaleBytes / L, down.scales,
                   w2ScaleBytes / L);
    }
    rb.x = addBuffer(p + "x", size_t(shape.maxTokens * H * 2));
    rb.a = addBuffer(p + "a", size_t(shape.maxTokens * H));
    rb.aScale = addBuffer(p + "a_scale", size_t(shape.maxTokens * H / 32));
    rb.ids = addBuffer(p + "topk_ids", size_t(shape.maxTokens * K * 4));
    rb.weights = addBuffer(p + "topk_weights", size_t(shape.maxTokens * K * 4));
    // One allocation per rank holds its control words, combine rows and
    // receive rows, as an engine's symmetric buffer does.
    const peer::BufferLayout layout = shape.layout();
    rb.symmetric = addBuffer(p + "symmetric", size_t(layout.bytes));
    rb.inter = addBuffer(p + "intermediate", size_t(rows * I));
    rb.interScale = addBuffer(p + "intermediate_scale", size_t(rows * I / 32));
    const size_t controlBytes = size_t(peer::controlWords(L, ep) * 4);
    std::vector<uint8_t> zeros(controlBytes, 0);
    memory.write(rb.symmetric, size_t(layout.control), zeros.data(), controlBytes);
    rb.out = addBuffer(p + "out", size_t(shape.maxTokens * H * 2));
  }
}

LogicalResult
PeerLayerRun::runOracle(int epoch, const std::vector<ref::TokenBatch> &batches,
                        std::vector<ref::MegaMoeRankResult> &oracle,
                        std::string &error) {
  ref::MegaMoeConfig config;
  config.shape = ref::MoeShape{shape.hidden, shape.intermediate, shape.experts,
                               shape.topK};
  config.ep = shape.ep;
  config.transport =
      shape.compact ? ref::Transport::Compact : ref::Transport::FixedSlot;
  config.mTile = shape.tileM;
  if (!shape.compact)
    config.slotCapacity = shape.capacity;
  config.swigluLimit = shape.swigluLimit;
  config.mode = ref::OracleMode::QuantFaithful;
  config.payload =
      shape.fp8Payload ? ref::PeerPayload::Fp8 : ref::PeerPayload::Bf16;
  ref::Status status = ref::runMegaMoe(config, w13, w2, batches, oracle);
  if (!status && !shape.compact) {
    // The kernels' capacity is too small for this routing: plan the
    // oracle with room for every route; the kernels must report overflow.
    summary << "epoch " << epoch << ": fixed-slot capacity " << shape.capacity
            << " is too small for this routing (" << status.message()
            << "): the kernels must report overflow\n";
    config.slotCapacity = shape.ep * shape.maxTokens * shape.topK;
    status = ref::runMegaMoe(config, w13, w2, batches, oracle);
  }
  if (!status) {
    error = "peer harness: oracle: " + status.message();
    return failure();
  }
  return success();
}

void PeerLayerRun::writeInputs(const std::vector<ref::TokenBatch> &batches,
                               const std::vector<ref::MegaMoeRankResult> &oracle,
                               bool quant) {
  for (int64_t r = 0; r < shape.ep; ++r) {
    RankBuffers &rb = buffers[r];
    const ref::StageResults &st = oracle[r].stages;
    const ref::TokenBatch &batch = batches[r];
    for (unsigned id : {rb.x, rb.a, rb.aScale, rb.ids, rb.weights, rb.inter,
                        rb.interScale, rb.out})
      memory.poison(id);
    // The symmetric buffer's receive and combine rows too, but not its
    // control words, which carry over from launch to launch.
    const size_t controlBytes =
        size_t(peer::controlWords(shape.localExperts, shape.ep) * 4);
    const size_t controlAt = size_t(shape.layout().control);
    std::vector<uint8_t> control(memory.data(rb.symmetric) + controlAt,
                                 memory.data(rb.symmetric) + controlAt +
                                     controlBytes);
    memory.poison(rb.symmetric);
    memory.write(rb.symmetric, controlAt, control.data(), controlBytes);
    if (batch.tokens > 0) {
      if (quant) {
        memory.write(rb.x, 0, batch.hiddenBf16.data(),
                     batch.hiddenBf16.size() * 2);
      } else {
        memory.write(rb.a, 0, st.inputCodes.data(), st.inputCodes.size());
        memory.write(rb.aScale, 0, st.inputScales.data(),
                     st.inputScales.size());
      }
      memory.write(rb.ids, 0, batch.topkIds.data(), batch.topkIds.size() * 4);
      memory.write(rb.weights, 0, batch.topkWeights.data(),
                   batch.topkWeights.size() * 4);
    }
  }
}

LogicalResult
PeerLayerRun::planLaunches(int epoch, const std::vector<ref::TokenBatch> &batches,
                           const PeerKernels &kernels,
                           std::vector<KernelLaunch> (&phases)[3],
                           std::string &error) {
  const int64_t H = shape.hidden, ep = shape.ep;
  auto func = [](const BuiltKernel &kernel) {
    return cast<gpu::GPUFuncOp>(kernel.func);
  };
  auto buffer = [](unsigned id) { return KernelArgValue::makeBuffer(id); };
  auto scalar = [](int64_t v) { return KernelArgValue::makeScalar(v); };
  for (int64_t r = 0; r < ep; ++r) {
    const RankBuffers &rb = buffers[r];
    const std::string rank = "rank " + std::to_string(r);
    if (kernels.quant) {
      // Every rank launches it, also without tokens (grid >= 1).
      const rt::RuleVariable variables[] = {{"num_tokens", batches[r].tokens},
                                            {"H", H}};
      int64_t grid = 0;
      if (!rt::evaluateGridRule(kernels.quant->description.abi.gridX, variables,
                                std::size(variables), grid, error))
        return failure();
      phases[0].push_back({func(*kernels.quant),
                           {buffer(rb.x), buffer(rb.a), buffer(rb.aScale),
                            scalar(batches[r].tokens)},
                           launchOf(grid), rank + " quant"});
    }
    KernelLaunch s1{func(kernels.stage1),
                    {buffer(rb.a), buffer(rb.aScale), buffer(rb.ids),
                     buffer(rb.weights), buffer(rb.w13), buffer(rb.w13Scale),
                     buffer(rb.inter), buffer(rb.interScale),
                     buffer(rb.symmetric), scalar(batches[r].tokens),
                     scalar(r)},
                    launchOf(shape.workgroups1), rank};
    for (int64_t d = 0; d < ep; ++d)
      s1.args.push_back(buffer(buffers[d].symmetric));
    if (kernels.dispatch) {
      // The separate dispatch kernel: the same arguments, its own grid.
      KernelLaunch d = s1;
      d.func = func(*kernels.dispatch);
      d.label = rank + " dispatch";
      d.launch = launchOf(fixedGrid(*kernels.dispatch, 1));
      phases[1].push_back(std::move(d));
    }
    phases[1].push_back(std::move(s1));

    KernelLaunch s2{func(kernels.stage2),
                    {buffer(rb.inter), buffer(rb.interScale), buffer(rb.w2),
                     buffer(rb.w2Scale), buffer(rb.symmetric)},
                    launchOf(shape.workgroups2), rank};
    for (int64_t s = 0; s < ep; ++s)
      s2.args.push_back(buffer(buffers[s].symmetric));
    phases[2].push_back(std::move(s2));
    // A rank without tokens launches no combine workgroup (grid 0).
    if (batches[r].tokens > 0)
      phases[2].push_back(
          {func(kernels.combine),
           {buffer(rb.symmetric), buffer(rb.ids), buffer(rb.weights),
            buffer(rb.out), scalar(batches[r].tokens)},
           launchOf((batches[r].tokens + shape.combineWaves - 1) /
                    shape.combineWaves),
           rank + " combine"});
  }
  return success();
}

LogicalResult
PeerLayerRun::runPhases(int epoch, std::vector<KernelLaunch> (&phases)[3],
                        const std::vector<ref::TokenBatch> &batches,
                        const std::vector<ref::MegaMoeRankResult> &oracle,
                        std::string &error) {
  for (std::vector<KernelLaunch> &phase : phases) {
    if (phase.empty())
      continue;
    if (options.scheduleSeed) {
      // The scheduler visits launches in vector order each round; a seeded
      // permutation changes which rank's waves run first.
      std::mt19937_64 order(options.scheduleSeed * 1000003u + uint64_t(epoch));
      std::shuffle(phase.begin(), phase.end(), order);
    }
    FailureOr<RunResult> run = runKernels(phase, memory, error);
    if (failed(run)) {
      error = "epoch " + std::to_string(epoch) + ": " + error;
      return failure();
    }
    accumulate(outcome.stats, run->stats);
    for (size_t i = 0; i < phase.size(); ++i)
      addKernelStats(outcome.kernelStats, phase[i].func.getName().str(),
                     run->launchStats[i]);
    outcome.findings += run->totalFindings();
    if (run->totalFindings() && !run->findings.empty())
      summary << "finding: " << run->findings.front().str() << "\n";
    if (&phase == &phases[0])
      checkInputQuantisation(memory, buffers, batches, oracle, shape.hidden,
                             outcome);
  }
  return success();
}

void PeerLayerRun::receiveCounts(int epoch, const int32_t *control,
                                 std::vector<int64_t> &counts,
                                 std::vector<int64_t> &firstRow) const {
  const int64_t L = shape.localExperts, ep = shape.ep;
  counts.assign(static_cast<size_t>(L), 0);
  firstRow.assign(static_cast<size_t>(L), 0);
  int64_t packedRows = 0;
  for (int64_t e = 0; e < L; ++e) {
    if (shape.compact) {
      for (int64_t s = 0; s < ep; ++s)
        counts[e] += control[peer::sourceCountWord(epoch, s, e, L, ep)];
      firstRow[e] = packedRows;
      packedRows += counts[e];
    } else {
      counts[e] = control[peer::countBank(epoch, L) + e];
      firstRow[e] = e * shape.capacity;
    }
  }
}

void PeerLayerRun::compareRank(int epoch, int64_t r, int64_t tokens,
                               const ref::MegaMoeRankResult &want,
                               EpochErrors &errors) {
  const int64_t H = shape.hidden, I = shape.intermediate;
  const int64_t L = shape.localExperts, C = shape.capacity;
  const int64_t rows = shape.rows();
  const RankBuffers &rb = buffers[r];
  const peer::BufferLayout layout = shape.layout();
  const int32_t *control = reinterpret_cast<const int32_t *>(
      memory.data(rb.symmetric) + layout.control);
  if (control[peer::kOverflow] != 0)
    ++outcome.overflows;
  if (control[peer::kEpoch] != epoch || control[peer::kStage1Arrivals] != 0)
    ++outcome.epochMismatches;
  std::map<std::pair<int32_t, int32_t>, int64_t> oracleRow;
  for (int64_t row = 0; row < want.plan.numRows; ++row)
    if (want.plan.sourceRank[row] >= 0)
      oracleRow[{want.plan.sourceRank[row], want.plan.sourceRoute[row]}] = row;
  const int32_t *meta =
      reinterpret_cast<const int32_t *>(memory.data(rb.symmetric) +
                                        layout.recv_meta);
  const uint8_t *codes = memory.data(rb.inter);
  const uint8_t *scales = memory.data(rb.interScale);
  const int64_t routesPerRank = shape.maxTokens * shape.topK;
  std::vector<int64_t> counts, firstRow;
  receiveCounts(epoch, control, counts, firstRow);
  for (int64_t e = 0; e < L; ++e) {
    const int64_t count = counts[e];
    if (count != want.plan.expertCounts[e])
      ++outcome.countMismatches;
    const int64_t used = shape.compact ? std::min(count, rows - firstRow[e])
                                       : std::min(count, C);
    for (int64_t slot = 0; slot < used; ++slot) {
      const int64_t row = firstRow[e] + slot;
      const int32_t packed = meta[row * peer::kMetaWords + 1] - 1;
      auto it = oracleRow.find({int32_t(packed / routesPerRank),
                                int32_t(packed % routesPerRank)});
      if (packed < 0 || it == oracleRow.end()) {
        ++outcome.unknownRows;
        continue;
      }
      const int64_t oRow = it->second;
      for (int64_t c = 0; c < I; ++c) {
        const double scale = ref::decodeE8M0(scales[row * I / 32 + c / 32]);
        const double got = ref::decodeFp8E4M3(codes[row * I + c]) * scale;
        const double act = want.stages.activation[oRow * I + c];
        errors.interErr += (got - act) * (got - act);
        errors.interRef += act * act;
        ++outcome.codesCompared;
        outcome.codesEqual +=
            codes[row * I + c] == want.stages.intermediateCodes[oRow * I + c];
        if (std::fabs(got - act) > ulpFp8(act, scale))
          ++errors.overTolerance;
      }
    }
  }
  const uint16_t *out = reinterpret_cast<const uint16_t *>(memory.data(rb.out));
  const uint8_t *written = memory.written(rb.out);
  for (int64_t i = 0; i < tokens * H; ++i) {
    if (!written[2 * i] || !written[2 * i + 1]) {
      ++outcome.outputUnwritten;
      continue;
    }
    const double got = ref::decodeBf16(out[i]);
    const double ref = want.stages.output[i];
    errors.outErr += (got - ref) * (got - ref);
    errors.outRef += ref * ref;
  }
}

void PeerLayerRun::recordRankIo(const std::vector<ref::TokenBatch> &batches,
                                const std::vector<ref::MegaMoeRankResult> &oracle,
                                bool quant) {
  const int64_t H = shape.hidden;
  for (int64_t r = 0; r < shape.ep; ++r) {
    RankLayerIo &io = outcome.ranks[size_t(r)];
    io.batch = batches[r];
    const int64_t tokens = batches[r].tokens;
    // The tokens stage 1 read: the quant kernel's, else the oracle's.
    if (quant) {
      const uint8_t *codes = memory.data(buffers[r].a);
      const uint8_t *scales = memory.data(buffers[r].aScale);
      io.tokens.codes.assign(codes, codes + tokens * H);
      io.tokens.scales.assign(scales, scales + tokens * H / 32);
    } else {
      io.tokens.codes = oracle[r].stages.inputCodes;
      io.tokens.scales = oracle[r].stages.inputScales;
    }
    io.outBits.resize(size_t(tokens * H));
    std::memcpy(io.outBits.data(), memory.data(buffers[r].out),
                io.outBits.size() * 2);
    io.oracleOut.assign(oracle[r].stages.output.begin(),
                        oracle[r].stages.output.end());
  }
}

LogicalResult PeerLayerRun::saveRankArrays(std::string &error) {
  const int64_t I = shape.intermediate, rows = shape.rows();
  std::error_code ec;
  std::filesystem::create_directories(options.saveDir, ec);
  auto bytesOf = [&](unsigned id, size_t size) {
    return std::vector<uint8_t>(memory.data(id), memory.data(id) + size);
  };
  for (int64_t r = 0; r < shape.ep; ++r) {
    const RankBuffers &rb = buffers[r];
    std::vector<int32_t> meta(size_t(rows * peer::kMetaWords));
    std::memcpy(meta.data(),
                memory.data(rb.symmetric) + shape.layout().recv_meta,
                meta.size() * 4);
    if (ref::Status status = saveArrays(
            options.saveDir, "rank" + std::to_string(r) + "_",
            {{"recv_meta", npyOf({rows, peer::kMetaWords}, meta)},
             {"intermediate_codes",
              npyOf({rows, I}, bytesOf(rb.inter, size_t(rows * I)))},
             {"intermediate_scales",
              npyOf({rows, I / 32},
                    bytesOf(rb.interScale, size_t(rows * I / 32)))}});
        !status) {
      error = "peer harness: " + status.message();
      return failure();
    }
  }
  return success();
}

/// Checks that options.tokensPerRank has one count per rank, each within
/// max_tokens.
LogicalResult checkTokensPerRank(const PeerShape &shape,
                                 const PeerLayerOptions &options,
                                 std::string &error) {
  if (int64_t(options.tokensPerRank.size()) != shape.ep) {
    error = "peer harness: tokensPerRank has " +
            std::to_string(options.tokensPerRank.size()) + " entries, ep is " +
            std::to_string(shape.ep);
    return failure();
  }
  for (int64_t tokens : options.tokensPerRank)
    if (tokens < 0 || tokens > shape.maxTokens) {
      error = "peer harness: " + std::to_string(tokens) +
              " tokens on a rank exceed max_tokens " +
              std::to_string(shape.maxTokens);
      return failure();
    }
  return success();
}

} // namespace

LogicalResult runPeerLayer(const BuiltKernel &stage1, const BuiltKernel &stage2,
                           const BuiltKernel &combine,
                           const PeerLayerOptions &options,
                           PeerLayerOutcome &outcome, std::string &error,
                           const BuiltKernel *dispatch,
                           const BuiltKernel *quant) {
  outcome = PeerLayerOutcome();
  PeerShape shape;
  if (failed(parsePeerShape(stage1, stage2, combine, shape, error)) ||
      failed(checkTokensPerRank(shape, options, error)))
    return failure();

  // Weights over all experts; rank r holds experts [r L, (r + 1) L).
  const LayerWeights weights(options.seed, shape.stage1);
  std::vector<bool> used;
  const std::vector<std::vector<ref::TokenBatch>> launches =
      generateLaunches(shape, options, used);
  PeerLayerRun run(shape, options, weights.w13(), weights.w2(), outcome);
  run.allocate(used);
  const PeerKernels kernels{stage1, stage2, combine, dispatch, quant};

  bool pass = true;
  outcome.ranks.resize(size_t(shape.ep));
  std::vector<std::vector<uint8_t>> firstOutputs(size_t(shape.ep));
  for (int epoch = 1; epoch <= options.epochs; ++epoch) {
    const std::vector<ref::TokenBatch> &batches = launches[size_t(epoch - 1)];
    if (!shape.compact) {
      // Routes past their expert's fixed-slot capacity, from the routing.
      std::vector<int64_t> routesOf(size_t(shape.experts), 0);
      for (const ref::TokenBatch &batch : batches)
        for (int32_t id : batch.topkIds)
          if (id >= 0 && id < shape.experts)
            ++routesOf[size_t(id)];
      for (int64_t routes : routesOf)
        outcome.expectedOverflowRoutes += std::max<int64_t>(0, routes - shape.capacity);
    }
    std::vector<ref::MegaMoeRankResult> oracle;
    if (failed(run.runOracle(epoch, batches, oracle, error)))
      return failure();
    run.writeInputs(batches, oracle, quant != nullptr);
    std::vector<KernelLaunch> phases[3];
    if (failed(run.planLaunches(epoch, batches, kernels, phases, error)) ||
        failed(run.runPhases(epoch, phases, batches, oracle, error)))
      return failure();

    EpochErrors errors;
    for (int64_t r = 0; r < shape.ep; ++r)
      run.compareRank(epoch, r, batches[r].tokens, oracle[r], errors);
    if (epoch == options.epochs)
      run.recordRankIo(batches, oracle, quant != nullptr);
    if (options.repeatTokens)
      for (int64_t r = 0; r < shape.ep; ++r) {
        std::vector<uint8_t> out = run.outputBytes(r, batches[r].tokens);
        if (epoch == 1) {
          firstOutputs[size_t(r)] = std::move(out);
          continue;
        }
        const std::vector<uint8_t> &first = firstOutputs[size_t(r)];
        for (size_t i = 0; i < out.size(); ++i)
          outcome.repeatMismatches += i >= first.size() || out[i] != first[i];
      }
    if (!options.saveDir.empty() && epoch == options.epochs &&
        failed(run.saveRankArrays(error)))
      return failure();
    const double interRel = relativeL2(errors.interErr, errors.interRef);
    const double outRel = relativeL2(errors.outErr, errors.outRef);
    outcome.intermediateRelL2 = std::max(outcome.intermediateRelL2, interRel);
    outcome.outputRelL2 = std::max(outcome.outputRelL2, outRel);
    const bool epochPass =
        outcome.findings == 0 && outcome.overflows == 0 &&
        outcome.countMismatches == 0 && outcome.unknownRows == 0 &&
        outcome.epochMismatches == 0 && outcome.outputUnwritten == 0 &&
        outcome.inputMismatches == 0 && outcome.inputUnwritten == 0 &&
        errors.overTolerance == 0 &&
        interRel <= kW13RelL2Bound && outRel <= kPeerOutputRelL2Bound;
    pass &= epochPass;
    run.summary << "epoch " << epoch << ": intermediate rel L2 " << interRel
                << " (" << errors.overTolerance
                << " elements over one FP8 ulp), output rel L2 " << outRel
                << " (bound " << kPeerOutputRelL2Bound << ")"
                << (epochPass ? " PASS" : " FAIL") << "\n";
  }
  outcome.overflowRoutes = run.overflowWords();
  std::ostringstream &summary = run.summary;
  if (quant)
    summary << "quant: " << outcome.inputMismatches
            << " token codes and scales differ from the oracle's, "
            << outcome.inputUnwritten << " unwritten\n";
  if (outcome.countMismatches || outcome.unknownRows || outcome.overflows ||
      outcome.outputUnwritten || outcome.findings || outcome.epochMismatches)
    summary << "count mismatches " << outcome.countMismatches
            << ", epoch words wrong " << outcome.epochMismatches
            << ", unknown receive rows " << outcome.unknownRows
            << ", overflow words " << outcome.overflows
            << ", unwritten output elements " << outcome.outputUnwritten
            << ", findings " << outcome.findings << "\n";
  outcome.pass = pass;
  outcome.summary = summary.str();
  return success();
}

} // namespace moec::emu
