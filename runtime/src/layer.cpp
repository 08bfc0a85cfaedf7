//===- layer.cpp - a whole MoE layer in one call --------------------------===//
//
// Create: walk the table's configurations, give every kernel argument a
// Source (a workspace region, an engine pointer, a weight, a peer buffer or
// a scalar), size the regions for the largest M, and precompute each
// argument's kernarg offset. Forward: fill a pointer table and the scalars,
// write them at those offsets and launch. Nothing on the forward path
// allocates.
//
//===----------------------------------------------------------------------===//
#include "moec/layer.h"

#include "moec/grid_rule.h"
#include "kernel_attributes.h"
#include "moec/abi/peer_protocol.h"

#include <algorithm>
#include <cstring>
#include <string_view>

namespace moec::rt {
namespace {

using detail::alignUp;
using detail::attribute;
using detail::integerParameter;
using detail::leadingInteger;
using detail::parameter;
using detail::sortedCapacity;

/// Where an argument's value comes from.
enum class Source : uint8_t {
  // Engine pointers of the forward.
  Hidden, TopkIds, TopkWeights, Output,
  // Workspace regions.
  ACodes, AScales, InternalIds, InternalWeights, Sorted, TileExperts,
  SortStatus, Intermediate, IntermediateScales, Rows,
  // Weights.
  W13, W13Scale, W2, W2Scale, SharedW13, SharedW13Scale, SharedW2,
  SharedW2Scale, W13Bias, W2Bias,
  // This rank's symmetric buffer (the kernels find its regions at the
  // offsets of moec_peer_buffer_layout_of).
  Symmetric,
  // Rank `peer`'s symmetric buffer.
  PeerSymmetric,
  // Scalars.
  NumTokens, NumSorted, NumRoutes, ExpertOffset, Capacity, Rank,
};
constexpr size_t kPointerSources = size_t(Source::PeerSymmetric);

struct ArgBinding {
  Source source = Source::Hidden;
  uint8_t peer = 0;
  ArgKind kind = ArgKind::Buffer;
  uint32_t offset = 0; ///< in the kernarg buffer
};

struct Step {
  uint32_t kernel = 0;
  Stage role = Stage::Sort;
  bool peer = false; ///< takes part in the fused protocol: always launched
  std::vector<ArgBinding> args;
  std::vector<uint8_t> kernarg;
};

struct ConfigPlan {
  std::vector<Step> steps;
  /// The sort's M tile (sorted-list padding); 1 without a sort.
  uint32_t sortTile = 1;
  /// Bytes of one route row of W2's output (unfused).
  uint64_t rowBytes = 0;
};

struct Region {
  uint64_t offset = 0, bytes = 0;
};

constexpr uint64_t kRegionAlignment = 256;

/// The fused transport of a kernel's `#moe.peer`.
struct PeerParams {
  bool present = false, compact = false;
  int64_t capacity = 0, maxTokens = 0;
};

PeerParams peerParams(const KernelInfo &kernel) {
  PeerParams params;
  std::string_view peer = attribute(kernel, "peer");
  if (peer.empty())
    return params;
  params.present = true;
  params.compact = parameter(peer, "transport") == "compact";
  params.capacity = integerParameter(peer, "capacity", 0);
  params.maxTokens = integerParameter(peer, "max_tokens", 0);
  return params;
}

/// `peer_symmetric3` -> ("peer_symmetric", 3); false without a trailing
/// number.
bool splitPeerIndex(std::string_view name, std::string_view &base, int &index) {
  size_t digits = name.size();
  while (digits > 0 && name[digits - 1] >= '0' && name[digits - 1] <= '9')
    --digits;
  if (digits == name.size() || name.size() - digits > 2)
    return false;
  base = name.substr(0, digits);
  index = int(leadingInteger(name.substr(digits)));
  return true;
}

/// The Source of argument `name` of a kernel of role `role`.
bool sourceOf(Stage role, bool /*peerKernel*/, std::string_view name,
              ArgBinding &binding) {
  auto set = [&](Source source) {
    binding.source = source;
    return true;
  };
  std::string_view base;
  int index = 0;
  if (name.rfind("peer_", 0) == 0 && splitPeerIndex(name, base, index)) {
    binding.peer = uint8_t(index);
    if (base == "peer_symmetric")
      return set(Source::PeerSymmetric);
    return false;
  }
  // Scalars mean the same in every stage.
  if (name == "num_tokens")
    return set(Source::NumTokens);
  if (name == "num_sorted")
    return set(Source::NumSorted);
  if (name == "num_routes")
    return set(Source::NumRoutes);
  if (name == "expert_offset")
    return set(Source::ExpertOffset);
  if (name == "capacity")
    return set(Source::Capacity);
  if (name == "rank")
    return set(Source::Rank);
  if (name == "symmetric")
    return set(Source::Symmetric);
  if (name == "sorted_routes")
    return set(Source::Sorted);
  if (name == "tile_experts")
    return set(Source::TileExperts);
  switch (role) {
  case Stage::Quant:
    if (name == "x")
      return set(Source::Hidden);
    if (name == "out")
      return set(Source::ACodes);
    if (name == "out_scale")
      return set(Source::AScales);
    return false;
  case Stage::Sort:
    if (name == "topk_ids")
      return set(Source::InternalIds);
    if (name == "status")
      return set(Source::SortStatus);
    return false;
  case Stage::W13:
    if (name == "a")
      return set(Source::ACodes);
    if (name == "a_scale")
      return set(Source::AScales);
    if (name == "b")
      return set(Source::W13);
    if (name == "b_scale")
      return set(Source::W13Scale);
    if (name == "b_shared")
      return set(Source::SharedW13);
    if (name == "b_shared_scale")
      return set(Source::SharedW13Scale);
    if (name == "bias")
      return set(Source::W13Bias);
    if (name == "out")
      return set(Source::Intermediate);
    if (name == "out_scale")
      return set(Source::IntermediateScales);
    if (name == "topk_ids")
      return set(Source::InternalIds);
    if (name == "topk_weights")
      return set(Source::InternalWeights);
    return false;
  case Stage::W2:
    if (name == "a")
      return set(Source::Intermediate);
    if (name == "a_scale")
      return set(Source::IntermediateScales);
    if (name == "b")
      return set(Source::W2);
    if (name == "b_scale")
      return set(Source::W2Scale);
    if (name == "b_shared")
      return set(Source::SharedW2);
    if (name == "b_shared_scale")
      return set(Source::SharedW2Scale);
    if (name == "bias")
      return set(Source::W2Bias);
    if (name == "out")
      return set(Source::Rows);
    return false;
  case Stage::Combine:
    if (name == "rows")
      return set(Source::Rows);
    if (name == "topk_ids")
      return set(Source::InternalIds);
    if (name == "topk_weights")
      return set(Source::InternalWeights);
    if (name == "out")
      return set(Source::Output);
    return false;
  }
  return false;
}

} // namespace

struct Layer::Plan {
  KernelLoader *loader = nullptr;
  TableHandle table;
  LayerProblem problem;
  /// Internal counts: with an FHMoE shared expert, experts + 1 and topK + 1.
  uint32_t experts = 0, topK = 0, localExperts = 0;
  std::vector<ConfigPlan> configs; ///< indexed by Manifest config index
  Region regions[kPointerSources];
  /// Fused: rows of this rank's receive buffer.
  uint64_t receiveRows = 0;
  bool unfusedExpertParallel = false;

  // Bound state.
  uint8_t *workspace = nullptr;
  LayerWeights weights;
  std::vector<uint8_t *> peers;
  /// Forwards launched (the fused kernels count their epoch themselves).
  uint64_t forwards = 0;
  bool workspaceBound = false, weightsBound = false, peersBound = false;
};

namespace {

/// What the kernels of a table's selectable configurations agree on,
/// gathered (and checked against each other) before anything is planned.
struct TableSurvey {
  bool anyFused = false, anyUnfused = false, shared = false;
  /// Internal counts: with an FHMoE shared expert, experts + 1 and topK + 1.
  uint32_t experts = 0, topK = 0;
  int64_t fusedMaxTokens = -1;
  bool fusedCompact = false;
  uint64_t receiveRows = 0;
  std::string w13Layout, w2Layout;
  int64_t interleave13 = -1;
  /// Some quant kernel writes FP8 token rows, some W13 an FP8 intermediate
  /// (otherwise they are MXFP4 rows, A4W4: half the bytes); some W13 a BF16
  /// intermediate (A16W4: two bytes an element).
  bool fp8Tokens = false, fp8Intermediate = false, bf16Intermediate = false;
  /// The first sort or combine without shared_last_route ("" if none): an
  /// FHMoE table needs it, or a routed id of E reaches the shared expert.
  std::string withoutSharedLastRoute;
};

/// The table `table` names, if it serves `problem`'s EP size and rank; its
/// description goes to `tableName`.
const SelectionTable *selectionFor(const Bundle &bundle, TableHandle table,
                                   const LayerProblem &problem,
                                   std::string &tableName, Error &error) {
  const std::vector<SelectionTable> &tables = bundle.selector().tables();
  if (table.index >= tables.size()) {
    error.fail(Status::InvalidArgument, "layer: invalid table handle");
    return nullptr;
  }
  const SelectionTable &selection = tables[table.index];
  tableName = describeTableKey(selection.network, selection.ep, selection.workspace);
  if (problem.epSize != selection.ep) {
    error.fail(Status::InvalidArgument,
               tableName + ": the layer asks for EP size " +
                   std::to_string(problem.epSize) + ", the table serves EP " +
                   std::to_string(selection.ep));
    return nullptr;
  }
  if (problem.epRank >= problem.epSize) {
    error.fail(Status::InvalidArgument,
               tableName + ": EP rank " + std::to_string(problem.epRank) +
                   " out of range for EP size " + std::to_string(problem.epSize));
    return nullptr;
  }
  return &selection;
}

/// Checks the `#moe.problem` of `kernel` against the layer's problem and
/// the table's other kernels (the first sets the survey's counts).
bool surveyProblem(const KernelInfo &kernel, const std::string &where,
                   const LayerProblem &problem, TableSurvey &survey,
                   Error &error) {
  std::string_view problemText = attribute(kernel, "problem");
  const int64_t hidden = integerParameter(problemText, "hidden", -1);
  const int64_t intermediate = integerParameter(problemText, "intermediate", -1);
  const int64_t experts = integerParameter(problemText, "experts", -1);
  const int64_t topK = integerParameter(problemText, "top_k", -1);
  const int64_t ep = integerParameter(problemText, "ep", 1);
  survey.shared = survey.shared || !attribute(kernel, "shared_fp8_expert").empty();
  // Rows of `output = f4E2M1FN` are MXFP4; the workspace fits the widest.
  const bool fp4Output = parameter(problemText, "output") == "f4E2M1FN";
  if (kernel.stage == Stage::Quant && !fp4Output)
    survey.fp8Tokens = true;
  if (kernel.stage == Stage::W13 && !fp4Output)
    survey.fp8Intermediate = true;
  if (kernel.stage == Stage::W13 && parameter(problemText, "output") == "bf16")
    survey.bf16Intermediate = true;
  if ((kernel.stage == Stage::Sort || kernel.stage == Stage::Combine) &&
      attribute(kernel, "shared_last_route").empty() &&
      survey.withoutSharedLastRoute.empty())
    survey.withoutSharedLastRoute = where;
  if (hidden < 0 || intermediate < 0 || experts < 0 || topK < 0)
    return error.fail(Status::InvalidArgument,
                      where + ": no #moe.problem in its attributes");
  // FHMoE kernels count the shared expert; the sort and combine of such
  // a configuration see the same internal counts.
  auto mismatch = [&](const char *what, int64_t kernelValue, int64_t asked) {
    return error.fail(Status::InvalidArgument,
                      where + ": compiled for " + what + " " +
                          std::to_string(kernelValue) + ", the layer asks for " +
                          std::to_string(asked));
  };
  if (hidden != problem.hidden)
    return mismatch("hidden", hidden, problem.hidden);
  if (intermediate != problem.intermediate)
    return mismatch("intermediate", intermediate, problem.intermediate);
  if (ep != problem.epSize)
    return mismatch("EP size", ep, problem.epSize);
  if (survey.experts == 0) {
    survey.experts = uint32_t(experts);
    survey.topK = uint32_t(topK);
  } else if (survey.experts != experts || survey.topK != topK) {
    return error.fail(Status::InvalidArgument,
                      where + ": compiled for " + std::to_string(experts) +
                          " experts, top-" + std::to_string(topK) +
                          "; other kernels of the table for " +
                          std::to_string(survey.experts) + ", top-" +
                          std::to_string(survey.topK));
  }
  return true;
}

/// Checks that `kernel` reads its weights as the table's other kernels do
/// (gate/up interleave, weight layout): one set of weights serves them all.
bool surveyWeights(const KernelInfo &kernel, const std::string &where,
                   TableSurvey &survey, Error &error) {
  if (kernel.stage == Stage::W13) {
    const int64_t interleave =
        std::max<int64_t>(0, leadingInteger(attribute(kernel, "gate_up_interleave")));
    if (survey.interleave13 >= 0 && survey.interleave13 != interleave)
      return error.fail(Status::InvalidArgument,
                        where + ": gate_up_interleave " + std::to_string(interleave) +
                            ", another W13 kernel of the table " +
                            std::to_string(survey.interleave13) +
                            "; one set of weights cannot serve both");
    survey.interleave13 = interleave;
  }
  const std::string &layout = kernel.weightLayout;
  if (!layout.empty()) {
    std::string &seen =
        kernel.stage == Stage::W13 ? survey.w13Layout : survey.w2Layout;
    if (!seen.empty() && seen != layout)
      return error.fail(Status::InvalidArgument,
                        where + ": reads its weights as " + layout +
                            ", another configuration of the table as " + seen +
                            "; one set of weights cannot serve both");
    seen = layout;
  }
  return true;
}

/// Records whether `kernel` is fused and, if so, checks its transport
/// against the table's other fused kernels and sizes the receive rows.
bool surveyTransport(const KernelInfo &kernel, const std::string &where,
                     uint32_t epSize, TableSurvey &survey, Error &error) {
  PeerParams peer = peerParams(kernel);
  if (!peer.present) {
    if ((kernel.stage != Stage::Combine || attribute(kernel, "peer_rows").empty()) &&
        kernel.stage != Stage::Quant)
      survey.anyUnfused = true;
    return true;
  }
  survey.anyFused = true;
  if (survey.fusedMaxTokens >= 0 && (survey.fusedMaxTokens != peer.maxTokens ||
                                     survey.fusedCompact != peer.compact))
    return error.fail(Status::InvalidArgument,
                      where + ": its peer transport differs from the table's other "
                              "fused kernels (max_tokens, transport)");
  survey.fusedMaxTokens = peer.maxTokens;
  survey.fusedCompact = peer.compact;
  // surveyProblem has checked the kernel's counts against the table's.
  // The kernels place the regions of the symmetric buffer by their receive
  // rows, so every fused kernel of the table must have the same.
  const int64_t localExperts =
      int64_t(survey.experts) / std::max<int64_t>(epSize, 1);
  const uint64_t rows = peer.compact ? uint64_t(peer.capacity)
                                     : uint64_t(peer.capacity) * uint64_t(localExperts);
  if (survey.receiveRows != 0 && survey.receiveRows != rows)
    return error.fail(Status::InvalidArgument,
                      where + ": its peer capacity (" + std::to_string(rows) +
                          " receive rows) differs from the table's other fused "
                          "kernels (" + std::to_string(survey.receiveRows) + ")");
  survey.receiveRows = rows;
  return true;
}

/// Surveys every kernel of the configurations marked `used`, then checks
/// the table as a whole against `problem`.
bool surveyTable(const Manifest &manifest, const std::vector<bool> &used,
                 const std::string &tableName, const LayerProblem &problem,
                 TableSurvey &survey, Error &error) {
  for (size_t c = 0; c < manifest.configs.size(); ++c) {
    if (!used[c])
      continue;
    for (uint32_t k : manifest.configs[c].kernels) {
      const KernelInfo &kernel = manifest.kernels[k];
      const std::string where = tableName + ", config " +
                                manifest.configs[c].id + ", kernel " + kernel.name;
      if (!surveyProblem(kernel, where, problem, survey, error) ||
          !surveyWeights(kernel, where, survey, error) ||
          !surveyTransport(kernel, where, problem.epSize, survey, error))
        return false;
    }
  }
  if (survey.experts == 0)
    return error.fail(Status::InvalidArgument, tableName + ": no kernels");
  if (survey.anyFused && survey.anyUnfused)
    return error.fail(Status::InvalidArgument,
                      tableName + ": mixes fused and unfused configurations");
  const bool shared = survey.shared;
  if (shared && !survey.withoutSharedLastRoute.empty())
    return error.fail(Status::InvalidArgument,
                      survey.withoutSharedLastRoute +
                          ": an FHMoE table's sort and combine need "
                          "shared_last_route (recompile the table with this moec)");
  const uint32_t routedExperts = survey.experts - (shared ? 1 : 0);
  const uint32_t routedTopK = survey.topK - (shared ? 1 : 0);
  if (problem.experts != routedExperts || problem.topK != routedTopK)
    return error.fail(Status::InvalidArgument,
                      tableName + ": compiled for " + std::to_string(routedExperts) +
                          " routed experts, top-" + std::to_string(routedTopK) +
                          (shared ? " (plus the shared expert)" : "") +
                          "; the layer asks for " + std::to_string(problem.experts) +
                          " experts, top-" + std::to_string(problem.topK));
  return true;
}

/// The largest M the layer plans for (0 after an error): the problem's
/// max_tokens, else the table's workspace, capped by fused kernels.
uint64_t plannedTokens(const LayerProblem &problem, const SelectionTable &selection,
                       const TableSurvey &survey, const std::string &tableName,
                       Error &error) {
  uint64_t tokens = problem.maxTokens ? problem.maxTokens : selection.workspace;
  if (survey.anyFused) {
    if (problem.maxTokens && int64_t(problem.maxTokens) > survey.fusedMaxTokens) {
      error.fail(Status::InvalidArgument,
                 tableName + ": max_tokens " + std::to_string(problem.maxTokens) +
                     " above the fused kernels' " +
                     std::to_string(survey.fusedMaxTokens) + " tokens per rank");
      return 0;
    }
    tokens = std::min<uint64_t>(tokens, uint64_t(survey.fusedMaxTokens));
  }
  if (tokens == 0 || tokens > (uint64_t(1) << 24)) {
    error.fail(Status::InvalidArgument,
               tableName + ": max_tokens " + std::to_string(tokens) +
                   " out of range [1, 2^24]");
    return 0;
  }
  return tokens;
}

/// Whether a step binds a bias (so the weights must carry it).
struct BiasUse {
  bool w13 = false, w2 = false;
};

/// Gives every argument of `kernel` a Source and its kernarg offset.
bool bindArguments(const KernelInfo &kernel, const std::string &where,
                   uint32_t epSize, Step &step, BiasUse &bias, Error &error) {
  uint32_t offset = 0;
  for (const KernelArgInfo &arg : kernel.abi) {
    ArgBinding binding;
    binding.kind = arg.kind;
    if (!sourceOf(step.role, step.peer, arg.name, binding))
      return error.fail(Status::InvalidArgument,
                        where + ": argument '" + arg.name +
                            "' has no binding in this runtime (a newer compiler?)");
    // A16W4: W13 reads the layer's BF16 hidden states themselves.
    if (step.role == Stage::W13 && arg.name == "a" && arg.dtype == "bf16")
      binding.source = Source::Hidden;
    const bool pointer = binding.source < Source::NumTokens;
    if (pointer != (arg.kind == ArgKind::Buffer))
      return error.fail(Status::InvalidArgument,
                        where + ": argument '" + arg.name + "' is a " +
                            argKindName(arg.kind) + ", expected a " +
                            (pointer ? "buffer" : "scalar"));
    if (binding.source == Source::PeerSymmetric && binding.peer >= epSize)
      return error.fail(Status::InvalidArgument,
                        where + ": argument '" + arg.name + "' names rank " +
                            std::to_string(binding.peer) + " of " +
                            std::to_string(epSize));
    bias.w13 |= binding.source == Source::W13Bias;
    bias.w2 |= binding.source == Source::W2Bias;
    const uint32_t size = arg.kind == ArgKind::I32 ? 4 : 8;
    offset = uint32_t(alignUp(offset, size));
    binding.offset = offset;
    offset += size;
    step.args.push_back(binding);
  }
  step.kernarg.assign(alignUp(offset, 8), 0);
  return true;
}

/// The largest sizes of the regions whose size depends on the config.
struct ConfigRegionBytes {
  uint64_t sorted = 0, tiles = 0, rows = 0;
};

/// Plans the steps of config `c` (binding and loading each kernel) and
/// grows `bytes` to the config's sorted list, tile experts and rows.
bool planConfig(KernelLoader &loader, const Manifest &manifest, size_t c,
                const Layer::Plan &plan, const TableSurvey &survey,
                uint64_t tokens, const std::string &tableName,
                ConfigPlan &config, ConfigRegionBytes &bytes, BiasUse &bias,
                Error &error) {
  const uint64_t H = plan.problem.hidden, K = plan.topK;
  for (uint32_t k : manifest.configs[c].kernels) {
    const KernelInfo &kernel = manifest.kernels[k];
    if (kernel.stage == Stage::Sort) {
      config.sortTile = uint32_t(std::max<int64_t>(
          1, leadingInteger(attribute(kernel, "m_tile"))));
    }
    if (kernel.stage == Stage::W2 && !survey.anyFused) {
      int64_t splitK = leadingInteger(attribute(kernel, "split_k"));
      config.rowBytes = splitK > 1 ? 4 * uint64_t(splitK) * H : 2 * H;
    }
  }
  const uint64_t capacity =
      sortedCapacity(tokens * K, plan.localExperts, config.sortTile);
  bytes.sorted = std::max(bytes.sorted, 4 * capacity);
  bytes.tiles = std::max(bytes.tiles, 4 * (capacity / config.sortTile));
  bytes.rows = std::max(bytes.rows, tokens * K * config.rowBytes);
  for (uint32_t k : manifest.configs[c].kernels) {
    const KernelInfo &kernel = manifest.kernels[k];
    const std::string where = tableName + ", kernel " + kernel.name;
    Step step;
    step.kernel = k;
    step.role = kernel.stage;
    step.peer = peerParams(kernel).present || !attribute(kernel, "peer_rows").empty();
    if (!bindArguments(kernel, where, plan.problem.epSize, step, bias, error))
      return false;
    if (!loader.loadKernel(k, error)) // keeps the loader's status
      return false;
    config.steps.push_back(std::move(step));
  }
  // Token rows come from a quant kernel first, unless the config's W13
  // reads the BF16 hidden states themselves (A16W4) and nothing else reads
  // token rows.
  bool readsHidden = false, readsTokenRows = false;
  for (const Step &step : config.steps)
    for (const ArgBinding &binding : step.args) {
      readsHidden |= step.role == Stage::W13 && binding.source == Source::Hidden;
      readsTokenRows |= binding.source == Source::ACodes;
    }
  const bool a16 = readsHidden && !readsTokenRows;
  if (config.steps.empty() ||
      (!a16 && config.steps.front().role != Stage::Quant))
    return error.fail(Status::InvalidArgument,
                      tableName + ", config " + manifest.configs[c].id +
                          ": does not start with a quant kernel; the layer takes BF16 "
                          "hidden states (recompile the table with this compiler)");
  return true;
}

/// Lays out the workspace regions; returns the workspace's bytes.
uint64_t placeWorkspace(Layer::Plan &plan, const TableSurvey &survey,
                        uint64_t tokens, const ConfigRegionBytes &bytes) {
  const uint64_t H = plan.problem.hidden, I = plan.problem.intermediate;
  const uint64_t K = plan.topK;
  uint64_t cursor = 0;
  auto place = [&](Source source, uint64_t size) {
    Region &region = plan.regions[size_t(source)];
    region.offset = cursor;
    region.bytes = size;
    cursor = alignUp(cursor + size, kRegionAlignment);
  };
  // Token rows and the intermediate: FP8 (one byte an element) or, when
  // every config's are MXFP4 (A4W4), half a byte; one E8M0 per 32 either way.
  const uint64_t tokenRowBytes = survey.fp8Tokens ? H : H / 2;
  const uint64_t midRowBytes = survey.bf16Intermediate  ? 2 * I
                               : survey.fp8Intermediate ? I
                                                        : I / 2;
  place(Source::ACodes, tokens * tokenRowBytes);
  place(Source::AScales, tokens * H / 32);
  if (survey.shared) {
    place(Source::InternalIds, tokens * K * 4);
    place(Source::InternalWeights, tokens * K * 4);
  }
  if (!survey.anyFused) {
    place(Source::Sorted, bytes.sorted);
    place(Source::TileExperts, bytes.tiles);
    place(Source::SortStatus, 8);
    place(Source::Intermediate, tokens * K * midRowBytes);
    place(Source::IntermediateScales, tokens * K * I / 32);
    place(Source::Rows, bytes.rows);
  } else {
    place(Source::Intermediate, survey.receiveRows * midRowBytes);
    place(Source::IntermediateScales, survey.receiveRows * I / 32);
  }
  return cursor;
}

/// Lays out the symmetric buffer every rank of a fused table has (the same
/// layout on every rank); returns its bytes.
uint64_t placePeerBuffer(const Layer::Plan &plan, const TableSurvey &survey,
                         PeerLayout &peer) {
  // The kernels compute the same offsets from the same definition.
  const moec_peer_buffer_layout layout = moec_peer_buffer_layout_of(
      plan.localExperts, plan.problem.epSize, int64_t(survey.receiveRows),
      plan.problem.hidden, plan.topK, survey.fusedMaxTokens);
  peer.recvA = uint64_t(layout.recv_a);
  peer.recvScale = uint64_t(layout.recv_scale);
  peer.recvMeta = uint64_t(layout.recv_meta);
  peer.control = uint64_t(layout.control);
  peer.controlBytes =
      uint64_t(moec_peer_control_bytes(plan.localExperts, plan.problem.epSize));
  peer.combineRows = uint64_t(layout.combine_rows);
  return uint64_t(layout.bytes);
}

} // namespace

Layer::~Layer() = default;

std::unique_ptr<Layer> Layer::create(KernelLoader &loader, TableHandle table,
                                     const LayerProblem &problem,
                                     std::string &error) {
  Error failure;
  std::unique_ptr<Layer> layer = create(loader, table, problem, failure);
  if (!layer)
    error = std::move(failure.message);
  return layer;
}

std::unique_ptr<Layer> Layer::create(KernelLoader &loader, TableHandle table,
                                     const LayerProblem &problem, Error &error) {
  const Bundle &bundle = loader.bundle();
  const Manifest &manifest = bundle.manifest();
  std::string tableName;
  const SelectionTable *selection =
      selectionFor(bundle, table, problem, tableName, error);
  if (!selection)
    return nullptr;

  auto layer = std::unique_ptr<Layer>(new Layer());
  auto plan = std::make_unique<Plan>();
  plan->loader = &loader;
  plan->table = table;
  plan->problem = problem;
  plan->configs.resize(manifest.configs.size());

  // Which configurations the table can select.
  std::vector<bool> used(manifest.configs.size(), false);
  for (const SelectionRow &row : selection->rows)
    used[row.config] = true;

  TableSurvey survey;
  if (!surveyTable(manifest, used, tableName, problem, survey, error))
    return nullptr;
  plan->experts = survey.experts;
  plan->topK = survey.topK;
  plan->localExperts = plan->experts / problem.epSize;
  plan->unfusedExpertParallel = !survey.anyFused && problem.epSize > 1;
  plan->receiveRows = survey.receiveRows;

  const uint64_t tokens =
      plannedTokens(problem, *selection, survey, tableName, error);
  if (tokens == 0)
    return nullptr;

  // Plan every step and size the regions.
  ConfigRegionBytes bytes;
  BiasUse bias;
  for (size_t c = 0; c < manifest.configs.size(); ++c) {
    if (used[c] && !planConfig(loader, manifest, c, *plan, survey, tokens,
                               tableName, plan->configs[c], bytes, bias, error))
      return nullptr;
  }
  layer->biasedW13_ = bias.w13;
  layer->biasedW2_ = bias.w2;

  LayerMemory &memory = layer->memory_;
  memory.workspaceBytes = placeWorkspace(*plan, survey, tokens, bytes);
  memory.maxTokens = uint32_t(tokens);
  if (survey.anyFused)
    memory.peerBytes = placePeerBuffer(*plan, survey, memory.peer);
  layer->fused_ = survey.anyFused;
  layer->sharedExpert_ = survey.shared;
  layer->gateUpInterleave_ = uint32_t(std::max<int64_t>(0, survey.interleave13));
  layer->plan_ = std::move(plan);
  return layer;
}

const LayerProblem &Layer::problem() const { return plan_->problem; }

bool Layer::bindWorkspace(void *workspace, uint64_t bytes, std::string &error) {
  Error failure;
  if (bindWorkspace(workspace, bytes, failure))
    return true;
  error = std::move(failure.message);
  return false;
}

bool Layer::bindWorkspace(void *workspace, uint64_t bytes, Error &error) {
  Plan &plan = *plan_;
  if (!workspace || bytes < memory_.workspaceBytes)
    return error.fail(Status::InvalidArgument,
                      "layer workspace: " + std::to_string(bytes) + " bytes, needs " +
                          std::to_string(memory_.workspaceBytes));
  if (reinterpret_cast<uintptr_t>(workspace) % kRegionAlignment)
    return error.fail(Status::InvalidArgument, "layer workspace: not 256-byte aligned");
  plan.workspace = static_cast<uint8_t *>(workspace);
  plan.workspaceBound = true;
  if (sharedExpert_) {
    // The shared expert's slot (the last of every token's routes: id E,
    // weight 1) never changes; write it for every token once. A forward
    // copies the routed slots around it. The sort and combine
    // (shared_last_route) take E only in this slot, so a routed slot
    // holding E is invalid, as in the oracle.
    const uint32_t K = plan.topK, tokens = memory_.maxTokens;
    std::vector<int32_t> ids(size_t(tokens) * K, -1);
    std::vector<float> weights(size_t(tokens) * K, 0.0f);
    for (uint32_t t = 0; t < tokens; ++t) {
      ids[size_t(t) * K + K - 1] = int32_t(plan.experts - 1);
      weights[size_t(t) * K + K - 1] = 1.0f;
    }
    const HipSymbols &api = plan.loader->device().hipApi();
    const Region &idRegion = plan.regions[size_t(Source::InternalIds)];
    const Region &weightRegion = plan.regions[size_t(Source::InternalWeights)];
    hip::Error status = api.hipMemcpy(plan.workspace + idRegion.offset, ids.data(),
                                      idRegion.bytes, hip::kMemcpyHostToDevice);
    if (status == hip::kSuccess)
      status = api.hipMemcpy(plan.workspace + weightRegion.offset, weights.data(),
                             weightRegion.bytes, hip::kMemcpyHostToDevice);
    if (status != hip::kSuccess) {
      plan.workspaceBound = false;
      return error.fail(Status::HipError,
                        "layer workspace: writing the shared expert's routes failed: " +
                            plan.loader->device().library().describe(status));
    }
  }
  return true;
}

bool Layer::bindPeers(void *const *bases, uint32_t count, std::string &error) {
  Plan &plan = *plan_;
  if (!fused_) {
    error = "layer: bindPeers on an unfused table (it has no peer buffers)";
    return false;
  }
  if (!bases || count != plan.problem.epSize) {
    error = "layer: " + std::to_string(count) + " peer buffers for EP size " +
            std::to_string(plan.problem.epSize);
    return false;
  }
  std::vector<uint8_t *> peers(count);
  for (uint32_t r = 0; r < count; ++r) {
    if (!bases[r] || reinterpret_cast<uintptr_t>(bases[r]) % kRegionAlignment) {
      error = "layer: peer buffer of rank " + std::to_string(r) +
              " is null or not 256-byte aligned";
      return false;
    }
    peers[r] = static_cast<uint8_t *>(bases[r]);
  }
  plan.peers = std::move(peers);
  plan.peersBound = true;
  return true;
}

bool Layer::bindWeights(const LayerWeights &weights, std::string &error) {
  if (!weights.w13 || !weights.w13Scale || !weights.w2 || !weights.w2Scale) {
    error = "layer weights: w13, w13_scale, w2 and w2_scale are required";
    return false;
  }
  if (sharedExpert_ && (!weights.sharedW13 || !weights.sharedW13Scale ||
                        !weights.sharedW2 || !weights.sharedW2Scale)) {
    error = "layer weights: this FHMoE table needs the shared expert's "
            "shared_w13, shared_w13_scale, shared_w2 and shared_w2_scale";
    return false;
  }
  if ((biasedW13_ && !weights.w13Bias) || (biasedW2_ && !weights.w2Bias)) {
    error = std::string("layer weights: this table's ") +
            (biasedW13_ && !weights.w13Bias ? "W13" : "W2") +
            " kernels take a per-expert bias; w13_bias and w2_bias are "
            "required";
    return false;
  }
  plan_->weights = weights;
  plan_->weightsBound = true;
  return true;
}

Layer::ForwardStatus Layer::forward(const LayerInputs &in, hip::Stream stream,
                                   std::string &error) {
  return run(in, /*dispatched=*/false, /*expertCounts=*/nullptr, stream, error);
}

Layer::ForwardStatus Layer::forwardExperts(const ExpertRows &rows,
                                           hip::Stream stream, std::string &error) {
  if (fused_ || sharedExpert_) {
    error = fused_ ? "layer forwardExperts: a fused MegaMoE table exchanges its "
                     "own rows; the experts-only entry needs an unfused table"
                   : "layer forwardExperts: an FHMoE table adds its shared expert "
                     "to every token, which belongs to the token's own rank; "
                     "the experts-only entry needs a table without one";
    return ForwardStatus::InvalidArgument;
  }
  if (rows.expertCounts) {
    const uint64_t slots = uint64_t(rows.rows) * plan_->topK;
    uint64_t counted = 0;
    for (uint32_t e = 0; e < plan_->localExperts; ++e)
      counted += rows.expertCounts[e];
    if (counted > slots) {
      error = "layer forwardExperts: the expert counts sum to " +
              std::to_string(counted) + " routes, more than the " +
              std::to_string(slots) + " slots of " + std::to_string(rows.rows) +
              " rows";
      return ForwardStatus::InvalidArgument;
    }
  }
  const LayerInputs inputs{rows.rows, rows.hidden, rows.localIds, rows.weights,
                           rows.out};
  return run(inputs, /*dispatched=*/true, rows.expertCounts, stream, error);
}

Layer::ForwardStatus Layer::run(const LayerInputs &in, bool dispatched,
                                const uint32_t *expertCounts, hip::Stream stream,
                                std::string &error) {
  using S = ForwardStatus;
  Plan &plan = *plan_;
  if (!plan.workspaceBound || !plan.weightsBound || (fused_ && !plan.peersBound)) {
    error = !plan.workspaceBound ? "layer forward: no workspace bound"
            : !plan.weightsBound ? "layer forward: no weights bound"
                                 : "layer forward: no peer buffers bound";
    return S::InvalidArgument;
  }
  if (in.m > memory_.maxTokens) {
    error = "layer forward: M " + std::to_string(in.m) +
            " above the layer's " + std::to_string(memory_.maxTokens) +
            " tokens (its workspace capacity)";
    return S::InvalidArgument;
  }
  if (in.m > 0 && (!in.hidden || !in.topkIds || !in.topkWeights || !in.out)) {
    error = "layer forward: null hidden, topk_ids, topk_weights or out";
    return S::InvalidArgument;
  }
  const Bundle &bundle = plan.loader->bundle();
  const Selection selection = bundle.selector().select(plan.table, in.m);
  if (selection.status == SelectStatus::Miss) {
    error = "layer forward: " +
            describeSelectionMiss(bundle.selector().tables()[plan.table.index],
                                  in.m);
    return S::SelectionMiss;
  }
  last_.config = selection.config;
  last_.fallback = selection.status == SelectStatus::Fallback;
  last_.launches = 0;
  // Unfused layers have nothing to do without tokens; fused ranks take part
  // in the exchange whatever their M.
  if (in.m == 0 && !fused_)
    return S::Ok;

  const ConfigPlan &config = plan.configs[selection.config];
  const HipSymbols &api = plan.loader->device().hipApi();
  const uint64_t M = in.m, K = plan.topK, H = plan.problem.hidden;
  const uint64_t routes = M * K;
  uint64_t capacity = 0;
  if (expertCounts) {
    // Each expert's routes padded to the M tile, as the sort lays them out.
    for (uint32_t e = 0; e < plan.localExperts; ++e)
      capacity += alignUp(expertCounts[e], config.sortTile);
  } else {
    capacity = sortedCapacity(routes, plan.localExperts, config.sortTile);
  }

  const void *pointers[kPointerSources] = {};
  for (size_t s = size_t(Source::ACodes); s <= size_t(Source::Rows); ++s)
    pointers[s] = plan.workspace + plan.regions[s].offset;
  pointers[size_t(Source::Hidden)] = in.hidden;
  pointers[size_t(Source::Output)] = in.out;
  pointers[size_t(Source::W13)] = plan.weights.w13;
  pointers[size_t(Source::W13Scale)] = plan.weights.w13Scale;
  pointers[size_t(Source::W2)] = plan.weights.w2;
  pointers[size_t(Source::W2Scale)] = plan.weights.w2Scale;
  pointers[size_t(Source::SharedW13)] = plan.weights.sharedW13;
  pointers[size_t(Source::SharedW13Scale)] = plan.weights.sharedW13Scale;
  pointers[size_t(Source::SharedW2)] = plan.weights.sharedW2;
  pointers[size_t(Source::SharedW2Scale)] = plan.weights.sharedW2Scale;
  pointers[size_t(Source::W13Bias)] = plan.weights.w13Bias;
  pointers[size_t(Source::W2Bias)] = plan.weights.w2Bias;
  if (sharedExpert_) {
    // Routed slots into the internal [M, K] lists; the shared slot is there.
    const uint64_t routedBytes = 4 * (K - 1);
    hip::Error status = api.hipMemcpy2DAsync(
        const_cast<void *>(pointers[size_t(Source::InternalIds)]), 4 * K, in.topkIds, routedBytes,
        routedBytes, M, hip::kMemcpyDeviceToDevice, stream);
    if (status == hip::kSuccess)
      status = api.hipMemcpy2DAsync(
          const_cast<void *>(pointers[size_t(Source::InternalWeights)]), 4 * K,
          in.topkWeights,
          routedBytes, routedBytes, M, hip::kMemcpyDeviceToDevice, stream);
    if (status != hip::kSuccess) {
      error = "layer forward: hipMemcpy2DAsync of the routes failed: " +
              plan.loader->device().library().describe(status);
      return S::HipError;
    }
  } else {
    pointers[size_t(Source::InternalIds)] = in.topkIds;
    pointers[size_t(Source::InternalWeights)] = in.topkWeights;
  }
  uint8_t *const ownPeer = fused_ ? plan.peers[plan.problem.epRank] : nullptr;
  if (fused_) {
    pointers[size_t(Source::Symmetric)] = ownPeer;
  }

  const int64_t scalars[] = {
      int64_t(M),
      int64_t(capacity),
      int64_t(routes),
      dispatched ? 0 : int64_t(plan.problem.epRank) * plan.localExperts,
      int64_t(capacity),
      int64_t(plan.problem.epRank),
  };
  const RuleVariable variables[] = {
      {"H", int64_t(H)},
      {"I", int64_t(plan.problem.intermediate)},
      {"num_tokens", int64_t(M)},
      {"num_sorted", int64_t(capacity)},
      {"num_routes", int64_t(routes)},
  };
  const Manifest &manifest = bundle.manifest();
  for (const Step &step : config.steps) {
    const KernelInfo &kernel = manifest.kernels[step.kernel];
    std::array<uint32_t, 3> grid{};
    bool empty = false;
    for (size_t d = 0; d < 3; ++d) {
      int64_t value = 0;
      const GridProgram &program = kernel.launch.gridPrograms[d];
      if (!program.evaluate(variables, std::size(variables), value, error))
        return S::InvalidArgument;
      if (value < 0 || value > int64_t(UINT32_MAX)) {
        error = kernel.name + ": grid " + std::to_string(value) + " out of range";
        return S::InvalidArgument;
      }
      grid[d] = uint32_t(value);
      empty = empty || value == 0;
    }
    // Unfused expert parallel: routes of other ranks' experts must read as
    // zero rows in the combine (this rank's output is its partial sum);
    // likewise the dispatched rows' slots of no local expert, also when
    // no route is local and W2's grid is empty.
    if (step.role == Stage::W2 && (plan.unfusedExpertParallel || dispatched)) {
      hip::Error status = api.hipMemsetAsync(
          const_cast<void *>(pointers[size_t(Source::Rows)]), 0,
          routes * config.rowBytes, stream);
      if (status != hip::kSuccess) {
        error = "layer forward: hipMemsetAsync of the route rows failed: " +
                plan.loader->device().library().describe(status);
        return S::HipError;
      }
    }
    if (empty) {
      if (step.peer && step.role != Stage::Combine) {
        error = kernel.name + ": empty grid for a fused stage";
        return S::InvalidArgument;
      }
      continue; // nothing to compute (no tokens, no routes)
    }
    uint8_t *kernarg = const_cast<uint8_t *>(step.kernarg.data());
    for (const ArgBinding &arg : step.args) {
      if (arg.source >= Source::NumTokens) {
        const int64_t value =
            scalars[size_t(arg.source) - size_t(Source::NumTokens)];
        if (arg.kind == ArgKind::I32) {
          const int32_t narrow = int32_t(value);
          std::memcpy(kernarg + arg.offset, &narrow, 4);
        } else {
          std::memcpy(kernarg + arg.offset, &value, 8);
        }
        continue;
      }
      const void *pointer;
      if (arg.source == Source::PeerSymmetric) {
        pointer = plan.peers[arg.peer];
      } else {
        pointer = pointers[size_t(arg.source)];
      }
      std::memcpy(kernarg + arg.offset, &pointer, 8);
    }
    if (!plan.loader->launchPacked(step.kernel, grid, kernarg,
                                   step.kernarg.size(), stream, error))
      return S::HipError;
    ++last_.launches;
  }
  ++plan.forwards;
  return S::Ok;
}

bool Layer::readStatus(LayerStatus &out, std::string &error) {
  Error failure;
  if (readStatus(out, failure))
    return true;
  error = std::move(failure.message);
  return false;
}

bool Layer::readStatus(LayerStatus &out, Error &error) {
  Plan &plan = *plan_;
  const HipSymbols &api = plan.loader->device().hipApi();
  int32_t words[2] = {0, 0};
  hip::Error status = hip::kSuccess;
  if (fused_) {
    if (!plan.peersBound)
      return error.fail(Status::InvalidArgument, "layer status: no peer buffers bound");
    status = api.hipMemcpy(words, plan.peers[plan.problem.epRank] +
                                      memory_.peer.control +
                                      4 * MOEC_PEER_OVERFLOW,
                           4, hip::kMemcpyDeviceToHost);
    out.overflowRoutes = uint32_t(words[0]);
  } else {
    if (!plan.workspaceBound)
      return error.fail(Status::InvalidArgument, "layer status: no workspace bound");
    if (plan.forwards > 0)
      status = api.hipMemcpy(words, plan.workspace +
                                        plan.regions[size_t(Source::SortStatus)].offset,
                             8, hip::kMemcpyDeviceToHost);
    // status = {num_sorted, needed}: needed above the capacity the sort was
    // given means routes were left out.
    out.overflowRoutes =
        words[1] > words[0] && words[0] >= 0 ? uint64_t(words[1] - words[0]) : 0;
  }
  if (status != hip::kSuccess)
    return error.fail(Status::HipError, "layer status: hipMemcpy failed: " +
                                            plan.loader->device().library().describe(status));
  out.forwards = plan.forwards;
  return true;
}

bool Layer::clearStatus(std::string &error) {
  Error failure;
  if (clearStatus(failure))
    return true;
  error = std::move(failure.message);
  return false;
}

bool Layer::clearStatus(Error &error) {
  Plan &plan = *plan_;
  if (!fused_)
    return true;
  if (!plan.peersBound)
    return error.fail(Status::InvalidArgument, "layer status: no peer buffers bound");
  const int32_t zero = 0;
  hip::Error status = plan.loader->device().hipApi().hipMemcpy(
      plan.peers[plan.problem.epRank] + memory_.peer.control +
          4 * MOEC_PEER_OVERFLOW,
      &zero, 4, hip::kMemcpyHostToDevice);
  if (status != hip::kSuccess)
    return error.fail(Status::HipError, "layer status: hipMemcpy failed: " +
                                            plan.loader->device().library().describe(status));
  return true;
}

} // namespace moec::rt
