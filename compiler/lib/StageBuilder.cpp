//===- StageBuilder.cpp - stage descriptions -> moe ops -------------------===//

#include "moec/Compiler/StageBuilder.h"
#include "moec/Codegen/KernelBuilders.h"
#include "moec/Dialect/Moe/MoeDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"

#include <cerrno>
#include <cstdlib>
#include <algorithm>
#include <set>

using namespace mlir;

namespace moec {
namespace {

/// Reads the fields of a StageSpec. Values are parsed here; their legality
/// is the dialect verifier's job, so its messages are the one source of it.
class FieldReader {
public:
  FieldReader(const StageSpec &spec, std::string &error)
      : spec(spec), error(error) {}

  bool fail(const std::string &field, const std::string &message) {
    error.clear();
    if (!spec.where.file.empty())
      error = spec.where.file + ":" + std::to_string(spec.where.line) + ": ";
    error += "field '" + field + "': " + message;
    return false;
  }

  /// An integer field; a negative `fallback` makes it required.
  bool integer(const char *field, int64_t fallback, int64_t &value) {
    auto it = spec.fields.find(field);
    if (it == spec.fields.end()) {
      if (fallback < 0)
        return fail(field, "missing");
      value = fallback;
      return true;
    }
    errno = 0;
    char *end = nullptr;
    value = std::strtoll(it->second.c_str(), &end, 10);
    if (errno != 0 || it->second.empty() ||
        end != it->second.c_str() + it->second.size())
      return fail(field, "expected an integer, got '" + it->second + "'");
    return true;
  }

  /// A 0/1 field (absent: false).
  bool flag(const char *field, bool &value) {
    int64_t number = 0;
    if (!integer(field, 0, number))
      return false;
    if (number != 0 && number != 1)
      return fail(field, "expected 0 or 1, got " + std::to_string(number));
    value = number == 1;
    return true;
  }

  /// An enumerated field read with `parse` (absent: `fallback`).
  template <typename Enum>
  bool enumeration(const char *field, Enum fallback,
                   function_ref<std::optional<Enum>(llvm::StringRef)> parse,
                   const char *choices, Enum &value) {
    auto it = spec.fields.find(field);
    if (it == spec.fields.end()) {
      value = fallback;
      return true;
    }
    std::optional<Enum> parsed = parse(it->second);
    if (!parsed)
      return fail(field, "expected one of " + std::string(choices) + ", got '" +
                             it->second + "'");
    value = *parsed;
    return true;
  }

private:
  const StageSpec &spec;
  std::string &error;
};

/// Spelling of the MFMA shape in tables and manifests.
std::optional<moe::MfmaShape> parseMfmaShape(llvm::StringRef text) {
  if (text == "16x16x128")
    return moe::MfmaShape::m16n16k128;
  if (text == "32x32x64")
    return moe::MfmaShape::m32n32k64;
  return std::nullopt;
}

const char *mfmaShapeName(moe::MfmaShape shape) {
  return shape == moe::MfmaShape::m16n16k128 ? "16x16x128" : "32x32x64";
}

/// The readable, knob-encoding symbol of a GEMM stage kernel; `prefix`
/// names the stage and its types ("moe2_afp8_wfp4_bf16").
std::string gemmSymbol(const char *prefix, moe::ProblemAttr problem,
                       moe::TileAttr tile) {
  std::string s = std::string(prefix) + "_e" +
                  std::to_string(problem.getLocalExperts()) + "_h" +
                  std::to_string(problem.getHidden()) + "_i" +
                  std::to_string(problem.getIntermediate()) + "_t" +
                  std::to_string(tile.getM()) + "x" +
                  std::to_string(tile.getN()) + "x" +
                  std::to_string(tile.getK()) + "_w" +
                  std::to_string(tile.getWaves());
  if (tile.getMfma() == moe::MfmaShape::m32n32k64)
    s += "_mfma32";
  if (tile.getOrientation() == moe::MfmaOrientation::b_major)
    s += "_bmajor";
  if (tile.getBCache() != moe::CachePolicy::cached)
    s += "_b" + moe::stringifyCachePolicy(tile.getBCache()).str();
  if (tile.getWavesPerEu() > 0)
    s += "_wpe" + std::to_string(tile.getWavesPerEu());
  if (tile.getXcdSwizzle())
    s += "_xcd";
  if (tile.getASwizzle())
    s += "_aswz";
  if (tile.getPersistCu() > 0)
    s += (tile.getPersistStrided() ? "_pers" : "_per") +
         std::to_string(tile.getPersistCu());
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
  return s;
}

/// Where a stage was written, as an MLIR location for its diagnostics.
Location locationOf(MLIRContext *context, const StageSpec &spec) {
  if (spec.where.file.empty())
    return UnknownLoc::get(context);
  return FileLineColLoc::get(context, spec.where.file, spec.where.line, 1);
}

/// Captures the first diagnostic emitted while it lives, prefixed with the
/// stage's file:line, as the one-line error of a failed build.
struct FirstDiagnostic {
  FirstDiagnostic(MLIRContext *context, const StageSpec &spec)
      : handler(context, [this, &spec](Diagnostic &diag) {
          if (text.empty()) {
            llvm::raw_string_ostream os(text);
            if (!spec.where.file.empty())
              os << spec.where.file << ":" << spec.where.line << ": ";
            os << diag.str();
          }
          return success();
        }) {}
  std::string text;
  ScopedDiagnosticHandler handler;
};

} // namespace

/// The combine and sort stages: problem fields plus launch geometry (and
/// the sort's M tile).
static Operation *buildSimpleStageOp(OpBuilder &builder, const StageSpec &spec,
                                     StageDescription &description,
                                     std::string &error) {
  MLIRContext *context = builder.getContext();
  FieldReader read(spec, error);
  const bool isSort = spec.stage == "sort";
  std::set<std::string> known = {"hidden", "intermediate", "experts", "top_k",
                                 "ep", "waves"};
  if (isSort)
    known.insert("m");
  else
    known.insert({"blocks", "split_k", "peer_rows"});
  for (const auto &field : spec.fields)
    if (!known.count(field.first)) {
      read.fail(field.first, "unknown field of a " + spec.stage + " kernel");
      return nullptr;
    }
  int64_t hidden, intermediate, experts, topK, ep, blocks = 0, mTile = 0, waves;
  int64_t splitK = 1;
  bool peerRows = false;
  if (!read.integer("split_k", 1, splitK) || !read.flag("peer_rows", peerRows))
    return nullptr;
  if (!read.integer("hidden", -1, hidden) ||
      !read.integer("intermediate", -1, intermediate) ||
      !read.integer("experts", -1, experts) ||
      !read.integer("top_k", -1, topK) || !read.integer("ep", 1, ep) ||
      !read.integer("waves", TableDefaults::kWaves, waves) ||
      (isSort ? !read.integer("m", -1, mTile)
              : !read.integer("blocks", 0, blocks)))
    return nullptr;
  Location loc = locationOf(context, spec);
  FirstDiagnostic first(context, spec);
  const std::string &diagnostic = first.text;
  auto emitError = [&] { return ::mlir::emitError(loc); };
  auto problem = moe::ProblemAttr::getChecked(
      emitError, context, hidden, intermediate, experts, topK, ep,
      Type(builder.getBF16Type()), Type(builder.getType<Float4E2M1FNType>()),
      Type(builder.getBF16Type()));
  if (!problem) {
    error = diagnostic;
    return nullptr;
  }
  Operation *op;
  std::string symbol;
  if (isSort) {
    symbol = "moe_sort_e" + std::to_string(problem.getLocalExperts()) + "_k" +
             std::to_string(topK) + "_m" + std::to_string(mTile) + "_w" +
             std::to_string(waves);
    auto sort = moe::SortOp::create(builder, loc, builder.getStringAttr(symbol),
                                    problem, builder.getI64IntegerAttr(mTile),
                                    builder.getI64IntegerAttr(waves));
    op = sort;
    if (succeeded(mlir::verify(op, /*verifyRecursively=*/false)))
      description.abi = getSortKernelAbi(sort);
  } else {
    auto tile =
        moe::CombineTileAttr::getChecked(emitError, context, blocks, waves);
    if (!tile) {
      error = diagnostic;
      return nullptr;
    }
    symbol = "moe_combine_bf16_e" + std::to_string(experts) + "_h" +
             std::to_string(hidden) + "_k" + std::to_string(topK) + "_b" +
             std::to_string(blocks) + "_w" + std::to_string(waves);
    if (splitK > 1)
      symbol += "_sk" + std::to_string(splitK);
    if (peerRows)
      symbol += "_ep" + std::to_string(ep) + "_peer";
    auto combine = moe::CombineOp::create(
        builder, loc, builder.getStringAttr(symbol), problem, tile,
        builder.getI64IntegerAttr(splitK));
    combine.setPeerRows(peerRows);
    op = combine;
    if (succeeded(mlir::verify(op, /*verifyRecursively=*/false)))
      description.abi = getCombineKernelAbi(combine);
  }
  if (!diagnostic.empty()) {
    error = diagnostic;
    op->erase();
    return nullptr;
  }
  description.symbol = symbol;
  description.fields = {
      {isSort ? "m" : "blocks", std::to_string(isSort ? mTile : blocks)},
      {"ep", std::to_string(ep)},
      {"experts", std::to_string(experts)},
      {"hidden", std::to_string(hidden)},
      {"intermediate", std::to_string(intermediate)},
      {"top_k", std::to_string(topK)},
      {"waves", std::to_string(waves)},
  };
  if (!isSort) {
    description.fields.push_back({"split_k", std::to_string(splitK)});
    description.fields.push_back({"peer_rows", std::to_string(int(peerRows))});
  }
  std::sort(description.fields.begin(), description.fields.end());
  return op;
}

StageSpec stageSpecOf(const TuningTable &table, const TableKernel &kernel) {
  StageSpec spec{kernel.stage, kernel.knobs, kernel.where};
  if (const TableProblem *problem = table.findProblem(kernel.problem)) {
    spec.fields["hidden"] = std::to_string(problem->hidden);
    spec.fields["intermediate"] = std::to_string(problem->intermediate);
    spec.fields["experts"] = std::to_string(problem->experts);
    spec.fields["top_k"] = std::to_string(problem->topK);
    spec.fields["ep"] = std::to_string(problem->ep);
  }
  return spec;
}

Operation *buildStageOp(OpBuilder &builder, const StageSpec &spec,
                        StageDescription &description, std::string &error) {
  MLIRContext *context = builder.getContext();
  FieldReader read(spec, error);
  if (spec.stage == "combine" || spec.stage == "sort")
    return buildSimpleStageOp(builder, spec, description, error);
  const bool isW13 = spec.stage == "w13";
  if (!isW13 && spec.stage != "w2") {
    read.fail("stage", "unsupported stage '" + spec.stage +
                           "' (expected sort, w13, w2 or combine)");
    return nullptr;
  }
  static const std::set<std::string> common = {
      "hidden", "intermediate", "experts", "top_k", "ep", "m", "n", "k",
      "waves", "mfma", "orientation", "b_cache", "b_layout",
      "shared_fp8_expert", "waves_per_eu", "xcd_swizzle", "a_swizzle",
      "persist_cu", "persist_strided", "b_prefetch", "scale_prefetch",
      "transport", "capacity", "max_tokens", "workgroups", "group_m",
      "async_a", "persist_skew", "work_shards"};
  for (const auto &field : spec.fields) {
    bool w13Only = field.first == "gate_up_interleave" ||
                   field.first == "swiglu_limit" ||
                   field.first == "dispatch_cus" ||
                   field.first == "plan_cus" || field.first == "chunk_routes" ||
                   field.first == "dispatch";
    bool w2Only = field.first == "split_k" || field.first == "bf16_lds";
    if (!common.count(field.first) && !(isW13 && w13Only) &&
        !(!isW13 && w2Only)) {
      read.fail(field.first, "unknown field of a " + spec.stage + " kernel");
      return nullptr;
    }
  }

  int64_t hidden, intermediate, experts, topK, ep, m, n, k, waves;
  int64_t interleave = 0;
  moe::MfmaShape shape;
  moe::MfmaOrientation orientation;
  moe::CachePolicy bCache;
  if (!read.integer("hidden", -1, hidden) ||
      !read.integer("intermediate", -1, intermediate) ||
      !read.integer("experts", -1, experts) ||
      !read.integer("top_k", -1, topK) || !read.integer("ep", 1, ep) ||
      !read.integer("m", -1, m) || !read.integer("n", -1, n) ||
      !read.integer("k", 256, k) || !read.integer("waves", TableDefaults::kWaves, waves) ||
      !read.integer("gate_up_interleave", 0, interleave) ||
      !read.enumeration<moe::MfmaShape>("mfma", moe::MfmaShape::m16n16k128,
                                        parseMfmaShape, "16x16x128, 32x32x64",
                                        shape) ||
      !read.enumeration<moe::MfmaOrientation>(
          "orientation", moe::MfmaOrientation::a_major,
          [](llvm::StringRef text) { return moe::symbolizeMfmaOrientation(text); },
          "a_major, b_major", orientation) ||
      !read.enumeration<moe::CachePolicy>(
          "b_cache", moe::CachePolicy::cached,
          [](llvm::StringRef text) { return moe::symbolizeCachePolicy(text); },
          "cached, nt, sc0, sc1, sc0_sc1", bCache))
    return nullptr;
  // The clamp limit is written as an integer (DeepSeek V4: 10).
  int64_t swigluLimit = 0, wavesPerEu = 0, splitK = 1, persistCu = 0,
          groupM = 0, persistSkew = 0;
  bool sharedFp8 = false, xcdSwizzle = false, aSwizzle = false,
       persistStrided = false, bf16Lds = false, bPrefetch = false,
       scalePrefetch = false, asyncA = false;
  if (!read.integer("swiglu_limit", 0, swigluLimit) ||
      !read.integer("waves_per_eu", 0, wavesPerEu) ||
      !read.integer("split_k", 1, splitK) ||
      !read.flag("shared_fp8_expert", sharedFp8) ||
      !read.flag("xcd_swizzle", xcdSwizzle) ||
      !read.flag("a_swizzle", aSwizzle) ||
      !read.integer("persist_cu", 0, persistCu) ||
      !read.integer("group_m", 0, groupM) ||
      !read.flag("persist_strided", persistStrided) ||
      !read.flag("b_prefetch", bPrefetch) ||
      !read.flag("scale_prefetch", scalePrefetch) ||
      !read.flag("async_a", asyncA) ||
      !read.integer("persist_skew", 0, persistSkew) ||
      !read.flag("bf16_lds", bf16Lds))
    return nullptr;
  // The peer transport (MegaMoE fused stages): `transport = fixed_slot` or
  // `compact`.
  enum class Transport { None, FixedSlot, Compact };
  Transport transport;
  int64_t capacity = 0, maxTokens = 0, workgroups = TableDefaults::kWorkgroups,
          dispatchCus = TableDefaults::kDispatchCus,
          workShards = 0, planCus = 1, chunkRoutes = 1;
  moe::PeerDispatch dispatch = moe::PeerDispatch::fused;
  if (!read.enumeration<Transport>(
          "transport", Transport::None,
          [](llvm::StringRef text) -> std::optional<Transport> {
            if (text == "none")
              return Transport::None;
            if (text == "fixed_slot")
              return Transport::FixedSlot;
            if (text == "compact")
              return Transport::Compact;
            return std::nullopt;
          },
          "none, fixed_slot, compact", transport))
    return nullptr;
  const bool hasPeer = transport != Transport::None;
  if (hasPeer &&
      (!read.integer("capacity", -1, capacity) ||
       !read.integer("max_tokens", -1, maxTokens) ||
       !read.integer("workgroups", TableDefaults::kWorkgroups, workgroups) ||
       !read.integer("dispatch_cus", TableDefaults::kDispatchCus, dispatchCus) ||
       !read.integer("work_shards", 0, workShards) ||
       !read.integer("plan_cus", 1, planCus) ||
       !read.integer("chunk_routes", 1, chunkRoutes) ||
       !read.enumeration<moe::PeerDispatch>(
           "dispatch", moe::PeerDispatch::fused,
           [](llvm::StringRef text) { return moe::symbolizePeerDispatch(text); },
           "fused, only, none", dispatch)))
    return nullptr;
  if (!hasPeer)
    for (const char *field : {"capacity", "max_tokens", "workgroups",
                              "dispatch_cus", "work_shards", "plan_cus",
                              "chunk_routes", "dispatch"})
      if (spec.fields.count(field)) {
        read.fail(field, "only applies with transport = fixed_slot or compact");
        return nullptr;
      }

  Location loc = locationOf(context, spec);
  // The verifiers report through diagnostics; keep the first as the error.
  FirstDiagnostic first(context, spec);
  const std::string &diagnostic = first.text;
  auto emitError = [&] { return ::mlir::emitError(loc); };
  // W13 writes the FP8 intermediate; W2 writes BF16. Explicit Type(): the
  // generated getChecked takes mlir::Type parameters.
  Type output = isW13 ? Type(builder.getType<Float8E4M3FNType>())
                      : Type(builder.getBF16Type());
  auto problem = moe::ProblemAttr::getChecked(
      emitError, context, hidden, intermediate, experts, topK, ep,
      Type(builder.getType<Float8E4M3FNType>()),
      Type(builder.getType<Float4E2M1FNType>()), output);
  auto tile = moe::TileAttr::getChecked(emitError, context, m, n, k, waves,
                                        shape, orientation, bCache, wavesPerEu,
                                        xcdSwizzle, aSwizzle, persistCu,
                                        persistStrided, bPrefetch,
                                        scalePrefetch, groupM, asyncA,
                                        persistSkew);
  moe::PeerTransportAttr peer;
  if (hasPeer)
    peer = moe::PeerTransportAttr::getChecked(emitError, context,
                                              transport == Transport::Compact
                                                  ? moe::PeerKind::compact
                                                  : moe::PeerKind::fixed_slot,
                                              capacity,
                                              maxTokens, workgroups,
                                              isW13 ? dispatchCus : 1,
                                              workShards, isW13 ? planCus : 1,
                                              isW13 ? chunkRoutes : 1,
                                              isW13 ? dispatch
                                                    : moe::PeerDispatch::fused);
  if (!problem || !tile || (hasPeer && !peer)) {
    error = diagnostic;
    return nullptr;
  }
  // Fused peer stages name their transport: capacity, token bound, grid.
  std::string peerSuffix;
  if (hasPeer) {
    peerSuffix = (transport == Transport::Compact ? "_cp" : "_fs") +
                 std::to_string(capacity) + "_mt" +
                 std::to_string(maxTokens) + "_g" + std::to_string(workgroups);
    if (isW13)
      peerSuffix += "_d" + std::to_string(dispatchCus);
    if (workShards > 0)
      peerSuffix += "_ws" + std::to_string(workShards);
    if (planCus > 1)
      peerSuffix += "_pl" + std::to_string(planCus);
    if (chunkRoutes > 1)
      peerSuffix += "_ch" + std::to_string(chunkRoutes);
    if (dispatch != moe::PeerDispatch::fused)
      peerSuffix += "_dispatch_" + moe::stringifyPeerDispatch(dispatch).str();
  }

  Operation *op;
  if (isW13) {
    // W13 reads token row route / top_k, so top_k is part of its identity.
    std::string symbol = gemmSymbol("moe1_afp8_wfp4_fp8", problem, tile) +
                         "_k" + std::to_string(topK);
    if (interleave > 0)
      symbol += "_gui" + std::to_string(interleave);
    if (swigluLimit > 0)
      symbol += "_clamp" + std::to_string(swigluLimit);
    if (sharedFp8)
      symbol += "_shfp8";
    symbol += peerSuffix;
    auto w13 = moe::W13Op::create(
        builder, loc, builder.getStringAttr(symbol), problem, tile,
        builder.getI64IntegerAttr(interleave),
        builder.getF32FloatAttr(static_cast<float>(swigluLimit)),
        /*shared_fp8_expert=*/UnitAttr(), /*peer=*/moe::PeerTransportAttr());
    if (sharedFp8)
      w13.setSharedFp8Expert(true);
    if (peer)
      w13.setPeerAttr(peer);
    op = w13;
    description.symbol = symbol;
    if (succeeded(mlir::verify(w13, /*verifyRecursively=*/false)))
      description.abi = getW13KernelAbi(w13);
  } else {
    std::string symbol = gemmSymbol("moe2_afp8_wfp4_bf16", problem, tile);
    if (sharedFp8)
      symbol += "_shfp8";
    if (splitK > 1)
      symbol += "_sk" + std::to_string(splitK);
    if (bf16Lds)
      symbol += "_ldsout";
    symbol += peerSuffix;
    auto w2 = moe::W2Op::create(builder, loc, builder.getStringAttr(symbol),
                                problem, tile, /*shared_fp8_expert=*/UnitAttr(),
                                builder.getI64IntegerAttr(1),
                                /*bf16_lds=*/UnitAttr(),
                                /*peer=*/moe::PeerTransportAttr());
    if (sharedFp8)
      w2.setSharedFp8Expert(true);
    w2.setSplitK(splitK);
    w2.setBf16Lds(bf16Lds);
    if (peer)
      w2.setPeerAttr(peer);
    op = w2;
    description.symbol = symbol;
    if (succeeded(mlir::verify(w2, /*verifyRecursively=*/false)))
      description.abi = getW2KernelAbi(w2);
  }
  if (!diagnostic.empty()) {
    error = diagnostic;
    op->erase();
    return nullptr;
  }
  description.fields = {
      {"b_cache", moe::stringifyCachePolicy(bCache).str()},
      {"b_layout", isW13 ? "w13_expert_2i_h_e2m1x2_low_nibble_first"
                         : "w2_expert_n_k_e2m1x2_low_nibble_first"},
      {"ep", std::to_string(ep)},
      {"experts", std::to_string(experts)},
      {"hidden", std::to_string(hidden)},
      {"intermediate", std::to_string(intermediate)},
      {"k", std::to_string(k)},
      {"m", std::to_string(m)},
      {"mfma", mfmaShapeName(shape)},
      {"n", std::to_string(n)},
      {"orientation", moe::stringifyMfmaOrientation(orientation).str()},
      {"a_swizzle", std::to_string(int(aSwizzle))},
      {"shared_fp8_expert", std::to_string(int(sharedFp8))},
      {"top_k", std::to_string(topK)},
      {"waves", std::to_string(waves)},
      {"waves_per_eu", std::to_string(wavesPerEu)},
      {"xcd_swizzle", std::to_string(int(xcdSwizzle))},
      {"persist_cu", std::to_string(persistCu)},
      {"persist_strided", std::to_string(int(persistStrided))},
      {"b_prefetch", std::to_string(int(bPrefetch))},
      {"scale_prefetch", std::to_string(int(scalePrefetch))},
      {"group_m", std::to_string(groupM)},
      {"async_a", std::to_string(int(asyncA))},
      {"persist_skew", std::to_string(persistSkew)},
  };
  if (hasPeer) {
    description.fields.push_back(
        {"transport", transport == Transport::Compact ? "compact" : "fixed_slot"});
    description.fields.push_back({"capacity", std::to_string(capacity)});
    description.fields.push_back({"max_tokens", std::to_string(maxTokens)});
    description.fields.push_back({"workgroups", std::to_string(workgroups)});
    if (isW13) {
      description.fields.push_back({"dispatch_cus", std::to_string(dispatchCus)});
      description.fields.push_back({"plan_cus", std::to_string(planCus)});
      description.fields.push_back({"chunk_routes", std::to_string(chunkRoutes)});
      description.fields.push_back(
          {"dispatch", moe::stringifyPeerDispatch(dispatch).str()});
    }
    description.fields.push_back({"work_shards", std::to_string(workShards)});
  }
  if (isW13) {
    description.fields.push_back(
        {"gate_up_interleave", std::to_string(interleave)});
    description.fields.push_back({"swiglu_limit", std::to_string(swigluLimit)});
  } else {
    description.fields.push_back({"split_k", std::to_string(splitK)});
    description.fields.push_back({"bf16_lds", std::to_string(int(bf16Lds))});
  }
  std::sort(description.fields.begin(), description.fields.end());
  return op;
}

} // namespace moec
