//===- MoeNaming.cpp - kernel symbols of the stage ops --------------------===//
///
/// \file
/// One readable symbol per stage kernel. The symbol is also the ELF symbol
/// of the code object and the first part of the kernel's name in a bundle,
/// so this spelling is stable: a knob appears only when it differs from its
/// ODS default.
///
//===----------------------------------------------------------------------===//

#include "moec/Dialect/Moe/MoeDialect.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

namespace moec::moe {
namespace {

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
  if (tile.getMfma() == MfmaShape::m32n32k64)
    s += "_mfma32";
  if (tile.getOrientation() == MfmaOrientation::b_major)
    s += "_bmajor";
  if (tile.getBCache() != CachePolicy::cached)
    s += "_b" + stringifyCachePolicy(tile.getBCache()).str();
  if (tile.getWavesPerEu() > 0)
    s += "_wpe" + std::to_string(tile.getWavesPerEu());
  if (tile.getXcdSwizzle())
    s += "_xcd";
  if (tile.getASwizzle())
    s += "_aswz";
  if (tile.getPersistCu() > 0)
    s += (tile.getPersistStrided() ? "_pers" : "_per") +
         std::to_string(tile.getPersistCu());
  else if (tile.getPersistStrided())
    s += "_strided";
  if (tile.getBPrefetch())
    s += "_bpf";
  if (tile.getScalePrefetch())
    s += "_spf";
  if (tile.getPersistSkew() > 0)
    s += "_skew" + std::to_string(tile.getPersistSkew());
  if (tile.getGroupM() > 0)
    s += "_gm" + std::to_string(tile.getGroupM());
  if (tile.getAsyncA())
    s += "_async";
  if (tile.getBDirect())
    s += "_bdir";
  if (tile.getResidencyCap() > 0)
    s += "_rc" + std::to_string(tile.getResidencyCap());
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
  if (peer.getWorkShards() > 0)
    s += "_ws" + std::to_string(peer.getWorkShards());
  if (peer.getPlanCus() > 1)
    s += "_pl" + std::to_string(peer.getPlanCus());
  if (peer.getChunkRoutes() > 1)
    s += "_ch" + std::to_string(peer.getChunkRoutes());
  if (peer.getDispatch() != PeerDispatch::fused)
    s += "_dispatch_" + stringifyPeerDispatch(peer.getDispatch()).str();
  return s;
}

std::string w13Symbol(W13Op op) {
  ProblemAttr problem = op.getProblem();
  // W13 reads token row route / top_k, so top_k is part of its identity.
  std::string s = "moe1_afp8_wfp4_fp8" + problemPart(problem) +
                  tilePart(op.getTile()) + "_k" +
                  std::to_string(problem.getTopK());
  if (op.getGateUpInterleave() > 0)
    s += "_gui" + std::to_string(op.getGateUpInterleave());
  const float limit = op.getSwigluLimit().convertToFloat();
  if (limit > 0) {
    // Tables write the limit as an integer (DeepSeek V4: 10); a fractional
    // limit keeps its digits apart from the next token.
    const auto whole = static_cast<int64_t>(limit);
    s += "_clamp" + std::to_string(whole);
    if (static_cast<float>(whole) != limit)
      s += "p" + std::to_string(static_cast<int64_t>((limit - whole) * 1e6));
  }
  if (op.getGptOssSwiglu())
    s += "_gptoss";
  if (op.getSharedFp8Expert())
    s += "_shfp8";
  if (op.getBias())
    s += "_bias";
  return s + peerPart(op.getPeerAttr(), /*stageOne=*/true);
}

std::string w2Symbol(W2Op op) {
  std::string s = "moe2_afp8_wfp4_bf16" + problemPart(op.getProblem()) +
                  tilePart(op.getTile());
  if (op.getSharedFp8Expert())
    s += "_shfp8";
  if (op.getSplitK() > 1)
    s += "_sk" + std::to_string(op.getSplitK());
  if (op.getBf16Lds())
    s += "_ldsout";
  if (op.getSortBlockM() > 0)
    s += "_sbm" + std::to_string(op.getSortBlockM());
  if (op.getBias())
    s += "_bias";
  return s + peerPart(op.getPeerAttr(), /*stageOne=*/false);
}

std::string sortSymbol(SortOp op) {
  ProblemAttr problem = op.getProblem();
  return "moe_sort_e" + std::to_string(problem.getLocalExperts()) + "_k" +
         std::to_string(problem.getTopK()) + "_m" +
         std::to_string(op.getMTile()) + "_w" + std::to_string(op.getWaves());
}

/// The code depends only on H and the workgroup size, but the op carries
/// its layer's problem: experts and top_k keep two problems of one table
/// with the same H (a backbone and its draft) apart, as in the combine's
/// symbol.
std::string quantSymbol(QuantOp op) {
  ProblemAttr problem = op.getProblem();
  return "moe_quant_bf16_fp8_e" + std::to_string(problem.getExperts()) + "_h" +
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
  if (op.getSplitK() > 1)
    s += "_sk" + std::to_string(op.getSplitK());
  if (op.getPeerRows())
    s += "_ep" + std::to_string(problem.getEp()) + "_peer";
  return s;
}

} // namespace

std::string getKernelSymbol(Operation *op) {
  return llvm::TypeSwitch<Operation *, std::string>(op)
      .Case<W13Op>(w13Symbol)
      .Case<W2Op>(w2Symbol)
      .Case<SortOp>(sortSymbol)
      .Case<CombineOp>(combineSymbol)
      .Case<QuantOp>(quantSymbol)
      .Default([](Operation *) { return std::string(); });
}

} // namespace moec::moe
