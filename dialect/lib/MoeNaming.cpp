//===- MoeNaming.cpp - kernel symbols of the stage ops --------------------===//
///
/// \file
/// One readable symbol per stage kernel. The symbol is also the ELF symbol
/// of the code object and the first part of the kernel's name in a bundle,
/// so this spelling is stable: a knob appears only when it differs from its
/// ODS default, which is read from the knob table generated from ODS
/// (MoeKnobs.h), never restated here.
///
//===----------------------------------------------------------------------===//

#include "moec/Dialect/Moe/MoeDialect.h"
#include "moec/Dialect/Moe/MoeKnobs.h"

#include <cstdlib>
#include <tuple>

using namespace mlir;

namespace moec::moe {
namespace {

/// The generated knob table's entry for parameter `knob` of the struct
/// attribute spelled `owner` ("#moe.tile", "#moe.peer").
const KnobInfo &ownedKnob(const char *owner, const char *knob) {
  const KnobInfo *info = lookupOwnedKnob(owner, knob);
  assert(info && "a parameter of the knob table");
  return *info;
}
int64_t tileDefault(const char *knob) {
  return ownedKnob("#moe.tile", knob).integerDefault();
}
bool tileFlagDefault(const char *knob) {
  return ownedKnob("#moe.tile", knob).boolDefault();
}
int64_t peerDefault(const char *knob) {
  return ownedKnob("#moe.peer", knob).integerDefault();
}
/// The default of op attribute `knob` of `stage`'s op.
const KnobInfo &opKnob(Stage stage, const char *knob) {
  const KnobInfo *info = lookupKnob(stringifyStage(stage), knob);
  assert(info && "an attribute of the knob table");
  return *info;
}
int64_t opDefault(Stage stage, const char *knob) {
  return opKnob(stage, knob).integerDefault();
}
bool opFlagDefault(Stage stage, const char *knob) {
  return opKnob(stage, knob).boolDefault();
}
/// The default of enum parameter `knob` of `owner`, parsed by the enum's
/// generated `symbolize` function.
template <typename EnumT>
EnumT enumDefault(const char *owner, const char *knob,
                  std::optional<EnumT> (*symbolize)(llvm::StringRef)) {
  std::optional<EnumT> value = symbolize(ownedKnob(owner, knob).defaultValue);
  assert(value && "an enum default the enum spells");
  return *value;
}

/// `_e{local experts}_h{H}_i{I}`: the problem part every GEMM symbol shares.
std::string problemPart(ProblemAttr problem) {
  return "_e" + std::to_string(problem.getLocalExperts()) + "_h" +
         std::to_string(problem.getHidden()) + "_i" +
         std::to_string(problem.getIntermediate());
}

/// The tile part of a GEMM symbol: the tile shape, then one short token
/// per knob away from its default.
std::string tilePart(TileAttr tile) {
  std::string s = "_t" + std::to_string(tile.getM()) + "x" +
                  std::to_string(tile.getN()) + "x" +
                  std::to_string(tile.getK()) + "_w" +
                  std::to_string(tile.getWaves());
  if (tile.getMfma() != enumDefault("#moe.tile", "mfma", symbolizeMfmaShape))
    s += "_mfma32";
  if (tile.getOrientation() !=
      enumDefault("#moe.tile", "orientation", symbolizeMfmaOrientation))
    s += "_bmajor";
  if (tile.getBCache() !=
      enumDefault("#moe.tile", "b_cache", symbolizeCachePolicy))
    s += "_b" + stringifyCachePolicy(tile.getBCache()).str();
  if (tile.getWavesPerEu() != tileDefault("waves_per_eu"))
    s += "_wpe" + std::to_string(tile.getWavesPerEu());
  if (tile.getXcdSwizzle() != tileFlagDefault("xcd_swizzle"))
    s += "_xcd";
  if (tile.getASwizzle() != tileFlagDefault("a_swizzle"))
    s += "_aswz";
  const bool strided =
      tile.getPersistStrided() != tileFlagDefault("persist_strided");
  if (tile.getPersistCu() != tileDefault("persist_cu"))
    s += (strided ? "_pers" : "_per") + std::to_string(tile.getPersistCu());
  else if (strided)
    s += "_strided";
  if (tile.getBPrefetch() != tileFlagDefault("b_prefetch"))
    s += "_bpf";
  if (tile.getScalePrefetch() != tileFlagDefault("scale_prefetch"))
    s += "_spf";
  if (tile.getPersistSkew() != tileDefault("persist_skew"))
    s += "_skew" + std::to_string(tile.getPersistSkew());
  if (tile.getGroupM() != tileDefault("group_m"))
    s += "_gm" + std::to_string(tile.getGroupM());
  if (tile.getAsyncA() != tileFlagDefault("async_a"))
    s += "_async";
  if (tile.getBDirect() != tileFlagDefault("b_direct"))
    s += "_bdir";
  if (tile.getResidencyCap() != tileDefault("residency_cap"))
    s += "_rc" + std::to_string(tile.getResidencyCap());
  if (tile.getKWaves() != tileDefault("k_waves"))
    s += "_kw" + std::to_string(tile.getKWaves());
  return s;
}

/// A fused peer stage names its transport: capacity, token bound, grid,
/// and (stage 1) its producers.
std::string peerPart(PeerTransportAttr peer, bool stageOne) {
  if (!peer)
    return "";
  std::string s = (peer.isCompact() ? "_cp" : "_fs") +
                  std::to_string(peer.getCapacity()) + "_mt" +
                  std::to_string(peer.getMaxTokens()) + "_g" +
                  std::to_string(peer.getWorkgroups());
  if (stageOne)
    s += "_d" + std::to_string(peer.getDispatchCus());
  if (peer.getWorkShards() != peerDefault("work_shards"))
    s += "_ws" + std::to_string(peer.getWorkShards());
  if (peer.getPlanCus() != peerDefault("plan_cus"))
    s += "_pl" + std::to_string(peer.getPlanCus());
  if (peer.getChunkRoutes() != peerDefault("chunk_routes"))
    s += "_ch" + std::to_string(peer.getChunkRoutes());
  if (peer.getDispatch() !=
      enumDefault("#moe.peer", "dispatch", symbolizePeerDispatch))
    s += "_dispatch_" + stringifyPeerDispatch(peer.getDispatch()).str();
  if (peer.getPayload() !=
      enumDefault("#moe.peer", "payload", symbolizeActivationFormat))
    s += "_pay" + stringifyActivationFormat(peer.getPayload()).str();
  return s;
}

/// The spelling of an activation format in a symbol's type tokens ("fp8",
/// "fp4", "bf16"): the enum's own, so FP8 kernels keep their symbols.
std::string formatToken(std::optional<ActivationFormat> format) {
  assert(format && "the verifier admits only activation formats here");
  return stringifyActivationFormat(*format).str();
}

/// A non-negative float as symbol text: its integer part, then "p" and
/// the millionths when it has a fraction (10 -> "10", 2.5 -> "2p500000").
std::string decimalToken(float value) {
  const auto whole = static_cast<int64_t>(value);
  std::string s = std::to_string(whole);
  if (static_cast<float>(whole) != value)
    s += "p" + std::to_string(static_cast<int64_t>((value - whole) * 1e6));
  return s;
}

std::string w13Symbol(W13Op op) {
  ProblemAttr problem = op.getProblem();
  // W13 reads token row route / top_k, so top_k is part of its identity.
  std::string s = "moe1_a" + formatToken(problem.getActivationFormat()) +
                  "_wfp4_" + formatToken(problem.getOutputFormat()) +
                  problemPart(problem) +
                  tilePart(op.getTile()) + "_k" +
                  std::to_string(problem.getTopK());
  if (op.getGateUpInterleave() != opDefault(Stage::w13, "gate_up_interleave"))
    s += "_gui" + std::to_string(op.getGateUpInterleave());
  const float limit = op.getSwigluLimit().convertToFloat();
  if (limit !=
      std::strtof(opKnob(Stage::w13, "swiglu_limit").defaultValue, nullptr)) {
    // Tables write the limit as an integer (DeepSeek V4: 10); a fractional
    // limit keeps its digits apart from the next token.
    s += "_clamp" + decimalToken(limit);
  }
  if (op.getGptOssSwiglu() != opFlagDefault(Stage::w13, "gpt_oss_swiglu"))
    s += "_gptoss";
  if (op.getSituV2() != opFlagDefault(Stage::w13, "situ_v2")) {
    s += "_situ";
    // The betas only act with situ_v2; away from the default they are
    // part of the name ("_b" beta, "_lb" linear beta).
    for (auto [knob, value, token] :
         {std::tuple{"situ_beta", op.getSituBeta().convertToFloat(), "_b"},
          {"situ_linear_beta", op.getSituLinearBeta().convertToFloat(),
           "_lb"}})
      if (value != std::strtof(opKnob(Stage::w13, knob).defaultValue, nullptr))
        s += token + decimalToken(value);
  }
  if (op.getSharedFp8Expert() != opFlagDefault(Stage::w13, "shared_fp8_expert"))
    s += "_shfp8";
  if (op.getBias() != opFlagDefault(Stage::w13, "bias"))
    s += "_bias";
  return s + peerPart(op.getPeerAttr(), /*stageOne=*/true);
}

std::string w2Symbol(W2Op op) {
  std::string s = "moe2_a" +
                  formatToken(op.getProblem().getActivationFormat()) +
                  "_wfp4_bf16" + problemPart(op.getProblem()) +
                  tilePart(op.getTile());
  if (op.getSharedFp8Expert() != opFlagDefault(Stage::w2, "shared_fp8_expert"))
    s += "_shfp8";
  if (op.getSplitK() != opDefault(Stage::w2, "split_k"))
    s += "_sk" + std::to_string(op.getSplitK());
  if (op.getBf16Lds() != opFlagDefault(Stage::w2, "bf16_lds"))
    s += "_ldsout";
  if (op.getSortBlockM() != opDefault(Stage::w2, "sort_block_m"))
    s += "_sbm" + std::to_string(op.getSortBlockM());
  if (op.getBias() != opFlagDefault(Stage::w2, "bias"))
    s += "_bias";
  return s + peerPart(op.getPeerAttr(), /*stageOne=*/false);
}

std::string sortSymbol(SortOp op) {
  ProblemAttr problem = op.getProblem();
  std::string s = "moe_sort_e" + std::to_string(problem.getLocalExperts()) +
                  "_k" + std::to_string(problem.getTopK()) + "_m" +
                  std::to_string(op.getMTile()) + "_w" +
                  std::to_string(op.getWaves());
  // FHMoE: the last route is the shared expert's (other validity rule).
  if (op.getSharedLastRoute() !=
      opFlagDefault(Stage::sort, "shared_last_route"))
    s += "_shlast";
  return s;
}

/// The code depends only on H and the workgroup size, but the op carries
/// its layer's problem: experts and top_k keep two problems of one table
/// with the same H (a backbone and its draft) apart, as in the combine's
/// symbol.
std::string quantSymbol(QuantOp op) {
  ProblemAttr problem = op.getProblem();
  return "moe_quant_bf16_" + formatToken(problem.getOutputFormat()) + "_e" +
         std::to_string(problem.getExperts()) + "_h" +
         std::to_string(problem.getHidden()) + "_k" +
         std::to_string(problem.getTopK()) + "_w" +
         std::to_string(op.getWaves());
}

std::string combineSymbol(CombineOp op) {
  ProblemAttr problem = op.getProblem();
  std::string s = "moe_combine_bf16_e" + std::to_string(problem.getExperts()) +
                  "_h" + std::to_string(problem.getHidden()) + "_k" +
                  std::to_string(problem.getTopK()) + "_b" +
                  std::to_string(op.getTile().getBlocks()) + "_w" +
                  std::to_string(op.getTile().getWaves());
  if (op.getSplitK() != opDefault(Stage::combine, "split_k"))
    s += "_sk" + std::to_string(op.getSplitK());
  if (op.getPeerRows() != opFlagDefault(Stage::combine, "peer_rows"))
    s += "_ep" + std::to_string(problem.getEp()) + "_peer";
  if (op.getFp8PeerRows() != opFlagDefault(Stage::combine, "fp8_peer_rows"))
    s += "_fp8rows";
  if (op.getSharedLastRoute() !=
      opFlagDefault(Stage::combine, "shared_last_route"))
    s += "_shlast";
  return s;
}

} // namespace

std::string W13Op::getKernelSymbol() { return w13Symbol(*this); }
std::string W2Op::getKernelSymbol() { return w2Symbol(*this); }
std::string SortOp::getKernelSymbol() { return sortSymbol(*this); }
std::string QuantOp::getKernelSymbol() { return quantSymbol(*this); }
std::string CombineOp::getKernelSymbol() { return combineSymbol(*this); }

std::string getKernelSymbol(Operation *op) {
  if (auto stage = dyn_cast<StageOpInterface>(op))
    return stage.getKernelSymbol();
  return "";
}

} // namespace moec::moe
