//===- StageKernel.cpp - stage kernels rebuilt from their specs -----------===//

#include "moec/Harness/StageKernel.h"

#include "moec/Compiler/TuningTable.h"

#include "moec/Compiler/Pipeline.h"
#include "moec/Compiler/Registration.h"
#include "moec/Compiler/StageBuilder.h"
#include "moec/Dialect/Moe/MoeDialect.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>

using namespace mlir;

namespace moec::emu {

//===----------------------------------------------------------------------===//
// Spec fields
//===----------------------------------------------------------------------===//

namespace {

/// The field's text with a trailing MLIR type (`10 : i64`) and blanks cut.
bool fieldText(const StageSpec &spec, llvm::StringRef name, std::string &out) {
  auto it = spec.fields.find(name.str());
  if (it == spec.fields.end())
    return false;
  llvm::StringRef text(it->second);
  text = text.take_front(text.find(" : ")).trim();
  out = text.str();
  return true;
}

} // namespace

bool specHas(const StageSpec &spec, llvm::StringRef name) {
  return spec.fields.count(name.str()) != 0;
}

std::string specText(const StageSpec &spec, llvm::StringRef name,
                     llvm::StringRef fallback) {
  std::string text;
  return fieldText(spec, name, text) ? text : fallback.str();
}

namespace {

/// The field's text parsed whole by `parse` (strtoll or strtod), or
/// `fallback` when it is absent or does not parse.
template <typename T, typename Parse>
T parseField(const StageSpec &spec, llvm::StringRef name, T fallback,
             Parse parse) {
  std::string text;
  if (!fieldText(spec, name, text) || text.empty())
    return fallback;
  char *end = nullptr;
  const T value = parse(text.c_str(), &end);
  return *end == '\0' ? value : fallback;
}

} // namespace

int64_t specInteger(const StageSpec &spec, llvm::StringRef name,
                    int64_t fallback) {
  return parseField<int64_t>(spec, name, fallback,
                             [](const char *text, char **end) {
                               return int64_t(std::strtoll(text, end, 10));
                             });
}

double specNumber(const StageSpec &spec, llvm::StringRef name,
                  double fallback) {
  return parseField<double>(
      spec, name, fallback,
      [](const char *text, char **end) { return std::strtod(text, end); });
}

bool specFlag(const StageSpec &spec, llvm::StringRef name, bool fallback) {
  const std::string text = specText(spec, name);
  if (text == "true" || text == "1")
    return true;
  if (text == "false" || text == "0")
    return false;
  return fallback;
}

bool specIsFused(const StageSpec &spec) {
  // The transport may be left out at its default (fixed_slot); the capacity
  // never is.
  const std::string transport = specText(spec, "transport", "none");
  return specHas(spec, "capacity") ||
         (!transport.empty() && transport != "none");
}

//===----------------------------------------------------------------------===//
// Building
//===----------------------------------------------------------------------===//

void prepareContext(MLIRContext &context) {
  DialectRegistry registry;
  registerMoecDialects(registry);
  context.appendDialectRegistry(registry);
  context.loadAllAvailableDialects();
}

LogicalResult buildKernelIR(MLIRContext &context, const StageSpec &spec,
                            BuiltKernel &kernel, std::string &error) {
  OpBuilder builder(&context);
  kernel.stage = spec.stage;
  kernel.module = ModuleOp::create(builder.getUnknownLoc());
  builder.setInsertionPointToEnd(kernel.module->getBody());
  if (!buildStageOp(builder, spec, kernel.description, error))
    return failure();
  // Lowering reports through diagnostics; keep the first as the error.
  std::string diagnostic;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    if (diagnostic.empty())
      diagnostic = diag.str();
    return success();
  });
  if (failed(lowerToKernelIR(*kernel.module))) {
    error = "lowering " + kernel.description.symbol +
            " to kernel IR failed: " + diagnostic;
    return failure();
  }
  kernel.func = nullptr;
  unsigned count = 0;
  kernel.module->walk([&](gpu::GPUFuncOp func) {
    kernel.func = func;
    ++count;
  });
  if (count != 1) {
    error = "expected one gpu.func after lowering " +
            kernel.description.symbol + ", found " + std::to_string(count);
    return failure();
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Small problems
//===----------------------------------------------------------------------===//

void shrinkPeerFields(StageSpec &spec) {
  if (!specIsFused(spec))
    return;
  const int64_t m = std::max<int64_t>(1, specInteger(spec, "m", 16));
  const int64_t ep = std::max<int64_t>(1, specInteger(spec, "ep", 1));
  const int64_t topK = std::max<int64_t>(1, specInteger(spec, "top_k", 1));
  spec.fields["max_tokens"] = "16";
  // Fixed slot: per expert, whole M tiles; compact: every route of every
  // rank could come here.
  spec.fields["capacity"] =
      specText(spec, "transport") == "compact"
          ? std::to_string(ep * 16 * topK)
          : std::to_string((std::max<int64_t>(ep * 16, m) + m - 1) / m * m);
  spec.fields["workgroups"] =
      std::to_string(std::min<int64_t>(specInteger(spec, "workgroups", 6), 6));
  // Stage 1's producers (left out at their default, which would exceed
  // the workgroups left).
  if (spec.stage == abi::Stage::W13)
    spec.fields["dispatch_cus"] = std::to_string(
        std::min<int64_t>(specInteger(spec, "dispatch_cus", 2), 2));
  // A separate dispatch kernel keeps every workgroup a producer: 2 of them,
  // which the dispatch_cus = 2 of the W13 kernel behind it expects.
  if (specText(spec, "dispatch") == "only")
    spec.fields["workgroups"] = spec.fields["dispatch_cus"];
  if (specHas(spec, "plan_cus"))
    spec.fields["plan_cus"] =
        std::to_string(std::min<int64_t>(specInteger(spec, "plan_cus", 1), 2));
}

namespace {

/// The small H and I of a set of kernels that run together: twice the
/// largest tile N or K step; a W13 with tile.k_waves W reduces H in W
/// ranges of whole K steps. Rounded up to a multiple of every tile N and
/// K range, which tiles of other than powers of two (N 192, W 7) need.
int64_t smallSizeOf(const std::vector<StageSpec> &specs) {
  int64_t size = 0, multiple = 1;
  for (const StageSpec &spec : specs) {
    const int64_t n = specInteger(spec, "n", 128);
    const int64_t k = specInteger(spec, "k", 256);
    const int64_t kRange = k * specInteger(spec, "k_waves", 1);
    size = std::max({size, 2 * std::max(n, k), kRange});
    multiple = std::lcm(std::lcm(multiple, n), kRange);
  }
  return (size + multiple - 1) / multiple * multiple;
}

/// Rewrites `specs` to H = I = `size` and the small expert, top-k and
/// peer fields.
void shrinkSpecs(std::vector<StageSpec> &specs, int64_t size) {
  for (StageSpec &spec : specs) {
    const int64_t ep = std::max<int64_t>(1, specInteger(spec, "ep", 1));
    spec.fields["hidden"] = std::to_string(size);
    spec.fields["intermediate"] = std::to_string(size);
    spec.fields["experts"] = std::to_string(4 * ep);
    spec.fields["top_k"] =
        std::to_string(std::min<int64_t>(specInteger(spec, "top_k", 2), 4));
    shrinkPeerFields(spec);
  }
}

/// The K tail (I mod tile.k) of the W2 kernel among `specs` at its own
/// problem; 0 when tile.k divides I or there is no W2.
int64_t w2KTailOf(const std::vector<StageSpec> &specs) {
  for (const StageSpec &spec : specs) {
    if (spec.stage != abi::Stage::W2)
      continue;
    const int64_t inter = specInteger(spec, "intermediate", 0);
    const int64_t k = specInteger(spec, "k", 256);
    if (inter > 0 && k > 0 && inter % k != 0)
      return inter % k;
  }
  return 0;
}

/// Whether the verifiers accept the moe op of every spec.
bool specsVerify(const std::vector<StageSpec> &specs) {
  MLIRContext context;
  prepareContext(context);
  OpBuilder builder(&context);
  OwningOpRef<ModuleOp> module = ModuleOp::create(builder.getUnknownLoc());
  builder.setInsertionPointToEnd(module->getBody());
  for (const StageSpec &spec : specs) {
    StageDescription description;
    std::string error;
    if (!buildStageOp(builder, spec, description, error))
      return false;
  }
  return true;
}

} // namespace

void smallConfigSpecs(std::vector<StageSpec> &specs) {
  const int64_t size = smallSizeOf(specs);
  const int64_t tail = w2KTailOf(specs);
  shrinkSpecs(specs, size);
  if (tail == 0)
    return;
  // A W2 K tail (tile.k not dividing I) would vanish at I = size, a
  // multiple of tile.k: keep it with I = size + tail where every kernel
  // of the configuration accepts that I (a W13's tile.n must divide it).
  std::vector<StageSpec> withTail = specs;
  for (StageSpec &spec : withTail)
    spec.fields["intermediate"] = std::to_string(size + tail);
  if (specsVerify(withTail))
    specs = std::move(withTail);
}

CompileOptions smallShapeCompileOptions() {
  CompileOptions options;
  options.rewriteTable = smallTable;
  options.allowSpills = true;
  // Small bundles run as kernel IR on the emulated device; the ISA gate
  // applies at the real shape, as the spill gate does.
  options.verifyIsa = false;
  return options;
}

void smallTable(TuningTable &table) {
  static const char *const kProblemFields[] = {"hidden", "intermediate",
                                               "experts", "top_k", "ep"};
  // One small H = I for the whole table. A configuration may take kernels
  // of several problems (an AITER table's quant kernel serves every
  // intermediate size of its hidden size), and kernels whose symbol does
  // not name H or I (the sort) must not become two different kernels of
  // one symbol: so every problem shrinks to the same size.
  int64_t size = 0;
  for (const TableKernel &kernel : table.kernels)
    size = std::max(size, smallSizeOf({stageSpecOf(table, kernel)}));
  for (TableProblem &problem : table.problems) {
    std::vector<size_t> members;
    std::vector<StageSpec> specs;
    for (size_t i = 0; i < table.kernels.size(); ++i) {
      if (table.kernels[i].problem != problem.name)
        continue;
      members.push_back(i);
      specs.push_back(stageSpecOf(table, table.kernels[i]));
    }
    if (specs.empty())
      continue;
    shrinkSpecs(specs, size);
    for (size_t j = 0; j < members.size(); ++j) {
      std::map<std::string, std::string> knobs = specs[j].fields;
      for (const char *field : kProblemFields)
        knobs.erase(field);
      table.kernels[members[j]].knobs = std::move(knobs);
    }
    problem.hidden = specInteger(specs.front(), "hidden", problem.hidden);
    problem.intermediate =
        specInteger(specs.front(), "intermediate", problem.intermediate);
    problem.experts = specInteger(specs.front(), "experts", problem.experts);
    problem.topK = specInteger(specs.front(), "top_k", problem.topK);
  }
  // Fused selection tables: the kernels' token limit becomes the table's
  // workspace / 64 (at least 16), so capacity classes stay distinct.
  for (TableSelection &selection : table.selections) {
    const int64_t tokens = std::max<int64_t>(16, selection.workspace / 64);
    bool fused = false;
    for (const TableRow &row : selection.rows)
      if (const TableConfig *config = table.findConfig(row.config))
        for (const std::string &name : config->kernels)
          for (TableKernel &kernel : table.kernels)
            if (kernel.name == name && kernel.knobs.count("max_tokens")) {
              fused = true;
              const TableProblem *problem = table.findProblem(kernel.problem);
              const int64_t ep = problem ? problem->ep : 1;
              const int64_t topK = problem ? problem->topK : 1;
              const int64_t m = std::max<int64_t>(
                  1, std::atoll(kernel.knobs.count("m") ? kernel.knobs["m"].c_str()
                                                        : "16"));
              kernel.knobs["max_tokens"] = std::to_string(tokens);
              kernel.knobs["capacity"] =
                  kernel.knobs.count("transport") &&
                          kernel.knobs["transport"] == "compact"
                      ? std::to_string(ep * tokens * topK)
                      : std::to_string((std::max(ep * tokens, m) + m - 1) / m * m);
            }
    if (!fused)
      continue;
    // Rows scale with the workspace, so every configuration keeps a row;
    // rows that land on one M keep the first.
    const int64_t workspace = std::max<int64_t>(1, selection.workspace);
    selection.workspace = tokens;
    std::vector<TableRow> kept;
    for (TableRow row : selection.rows) {
      row.m = std::min<int64_t>(
          tokens, std::max<int64_t>(1, (row.m * tokens + workspace - 1) / workspace));
      if (kept.empty() || row.m > kept.back().m)
        kept.push_back(row);
    }
    selection.rows = std::move(kept);
  }
}

StageSpec smallStageSpec(const StageSpec &spec) {
  std::vector<StageSpec> one = {spec};
  smallConfigSpecs(one);
  return one.front();
}

void fitPeerCapacity(StageSpec &spec, int64_t tokens) {
  if (!specHas(spec, "capacity"))
    return;
  const int64_t ep = std::max<int64_t>(1, specInteger(spec, "ep", 1));
  spec.fields["max_tokens"] = std::to_string(tokens);
  spec.fields["capacity"] =
      specText(spec, "transport") == "compact"
          ? std::to_string(ep * tokens * specInteger(spec, "top_k", 1))
          : std::to_string((ep * tokens + 127) / 128 * 128);
}

//===----------------------------------------------------------------------===//
// Shapes
//===----------------------------------------------------------------------===//

ref::Status parseStageShape(const BuiltKernel &kernel, StageShape &shape) {
  shape = StageShape();
  shape.stage = kernel.stage;
  DictionaryAttr attrs = kernel.description.opAttributes;
  auto problem = attrs ? attrs.getAs<moe::ProblemAttr>("problem") : nullptr;
  if (!problem)
    return ref::Status::error(kernel.description.symbol +
                              " has no #moe.problem");
  shape.hidden = problem.getHidden();
  shape.intermediate = problem.getIntermediate();
  shape.experts = problem.getExperts();
  shape.topK = problem.getTopK();
  shape.ep = problem.getEp();
  shape.localExperts = problem.getLocalExperts();
  auto formatOf = [](moe::ActivationFormat format) {
    if (format == moe::ActivationFormat::bf16)
      return ref::ActivationFormat::Bf16; // A16W4
    return format == moe::ActivationFormat::fp4 ? ref::ActivationFormat::Mxfp4
                                                : ref::ActivationFormat::Fp8E4M3;
  };
  const std::optional<moe::ActivationFormat> output = problem.getOutputFormat();
  if (kernel.stage == abi::Stage::Quant && output)
    shape.tokenFormat = formatOf(*output);
  if (kernel.stage == abi::Stage::W13) {
    shape.tokenFormat = formatOf(problem.getActivationFormat());
    if (output)
      shape.midFormat = formatOf(*output);
  }
  if (kernel.stage == abi::Stage::W2)
    shape.midFormat = formatOf(problem.getActivationFormat());
  // Attributes at their default value are absent from the dictionary.
  auto integer = [&](llvm::StringRef name, int64_t fallback) {
    auto value = attrs.getAs<IntegerAttr>(name);
    return value ? value.getInt() : fallback;
  };
  if (auto tile = attrs.getAs<moe::TileAttr>("tile")) {
    shape.tileM = tile.getM();
    shape.tileN = tile.getN();
    shape.mfmaK = tile.getMfmaK();
    shape.waves = tile.getWaves();
    shape.persistCu = tile.getPersistCu();
  } else if (auto tile = attrs.getAs<moe::CombineTileAttr>("tile")) {
    shape.waves = tile.getWaves();
  } else {
    // The sort (its M tile and waves) and quant (its waves).
    shape.tileM = integer("m_tile", 0);
    shape.waves = integer("waves", 4);
  }
  if (int64_t block = integer("sort_block_m", 0); block > 0 && shape.tileM > 0) {
    shape.tilesPerSortBlock = block / shape.tileM;
    shape.tileM = block;
  }
  shape.splitK = std::max<int64_t>(1, integer("split_k", 1));
  shape.interleave = integer("gate_up_interleave", 0);
  if (auto limit = attrs.getAs<FloatAttr>("swiglu_limit"))
    shape.swigluLimit = limit.getValueAsDouble();
  shape.gptOssSwiglu = static_cast<bool>(attrs.get("gpt_oss_swiglu"));
  shape.situV2 = static_cast<bool>(attrs.get("situ_v2"));
  if (auto beta = attrs.getAs<FloatAttr>("situ_beta"))
    shape.situBeta = beta.getValueAsDouble();
  if (auto beta = attrs.getAs<FloatAttr>("situ_linear_beta"))
    shape.situLinearBeta = beta.getValueAsDouble();
  shape.sharedFp8 = static_cast<bool>(attrs.get("shared_fp8_expert"));
  shape.sharedLastRoute =
      shape.sharedFp8 || static_cast<bool>(attrs.get("shared_last_route"));
  shape.bias = static_cast<bool>(attrs.get("bias"));
  shape.peerRows = static_cast<bool>(attrs.get("peer_rows"));
  shape.fp8PeerRows = static_cast<bool>(attrs.get("fp8_peer_rows"));
  if (auto peer = attrs.getAs<moe::PeerTransportAttr>("peer")) {
    shape.fused = true;
    shape.fp8PeerRows = peer.getPayload() == moe::ActivationFormat::fp8;
    shape.compact = peer.isCompact();
    shape.dispatchOnly = peer.getDispatch() == moe::PeerDispatch::only;
    shape.capacity = peer.getCapacity();
    shape.maxTokens = peer.getMaxTokens();
    shape.workgroups = peer.getWorkgroups();
  }
  if ((abi::isGemmStage(shape.stage) || shape.stage == abi::Stage::Sort) &&
      shape.tileM <= 0)
    return ref::Status::error(kernel.description.symbol + " has no M tile");
  return {};
}

} // namespace moec::emu
