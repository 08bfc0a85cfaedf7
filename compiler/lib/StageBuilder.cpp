//===- StageBuilder.cpp - stage descriptions -> moe ops -------------------===//

#include "moec/Compiler/StageBuilder.h"
#include "moec/Codegen/KernelBuilders.h"
#include "moec/Dialect/Moe/MoeDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/raw_ostream.h"

#include <cerrno>
#include <cstdlib>
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

/// The readable, knob-encoding symbol of a W2 kernel.
std::string w2Symbol(moe::ProblemAttr problem, moe::TileAttr tile) {
  std::string s = "moe2_afp8_wfp4_bf16_e" +
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
  if (tile.getBCache() == moe::CachePolicy::nt)
    s += "_bnt";
  return s;
}

} // namespace

Operation *buildStageOp(OpBuilder &builder, const StageSpec &spec,
                        StageDescription &description, std::string &error) {
  MLIRContext *context = builder.getContext();
  FieldReader read(spec, error);
  if (spec.stage != "w2") {
    read.fail("stage", "unsupported stage '" + spec.stage + "' (expected w2)");
    return nullptr;
  }
  static const std::set<std::string> known = {
      "hidden", "intermediate", "experts", "top_k", "ep", "m", "n", "k",
      "waves", "mfma", "orientation", "b_cache", "b_layout"};
  for (const auto &field : spec.fields)
    if (!known.count(field.first)) {
      read.fail(field.first, "unknown field of a w2 kernel");
      return nullptr;
    }

  int64_t hidden, intermediate, experts, topK, ep, m, n, k, waves;
  moe::MfmaShape shape;
  moe::MfmaOrientation orientation;
  moe::CachePolicy bCache;
  if (!read.integer("hidden", -1, hidden) ||
      !read.integer("intermediate", -1, intermediate) ||
      !read.integer("experts", -1, experts) ||
      !read.integer("top_k", -1, topK) || !read.integer("ep", 1, ep) ||
      !read.integer("m", -1, m) || !read.integer("n", -1, n) ||
      !read.integer("k", 256, k) || !read.integer("waves", 4, waves) ||
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
          "cached, nt", bCache))
    return nullptr;

  Location loc = spec.where.file.empty()
                     ? Location(UnknownLoc::get(context))
                     : Location(FileLineColLoc::get(context, spec.where.file,
                                                    spec.where.line, 1));
  // The verifiers report through diagnostics; keep the first as the error.
  std::string diagnostic;
  ScopedDiagnosticHandler handler(context, [&](Diagnostic &diag) {
    if (diagnostic.empty()) {
      llvm::raw_string_ostream os(diagnostic);
      if (!spec.where.file.empty())
        os << spec.where.file << ":" << spec.where.line << ": ";
      os << diag.str();
    }
    return success();
  });
  auto emitError = [&] { return ::mlir::emitError(loc); };
  // Explicit Type(): the generated getChecked takes mlir::Type parameters.
  auto problem = moe::ProblemAttr::getChecked(
      emitError, context, hidden, intermediate, experts, topK, ep,
      Type(builder.getType<Float8E4M3FNType>()),
      Type(builder.getType<Float4E2M1FNType>()), Type(builder.getBF16Type()));
  auto tile = moe::TileAttr::getChecked(emitError, context, m, n, k, waves,
                                        shape, orientation, bCache);
  if (!problem || !tile) {
    error = diagnostic;
    return nullptr;
  }
  std::string symbol = w2Symbol(problem, tile);
  auto op = moe::W2Op::create(builder, loc, symbol, problem, tile);
  if (failed(op.verify())) {
    error = diagnostic;
    op.erase();
    return nullptr;
  }
  description.symbol = symbol;
  description.abi = getW2KernelAbi(op);
  description.fields = {
      {"b_cache", moe::stringifyCachePolicy(bCache).str()},
      {"b_layout", "w2_expert_n_k_e2m1x2_low_nibble_first"},
      {"ep", std::to_string(ep)},
      {"experts", std::to_string(experts)},
      {"hidden", std::to_string(hidden)},
      {"intermediate", std::to_string(intermediate)},
      {"k", std::to_string(k)},
      {"m", std::to_string(m)},
      {"mfma", mfmaShapeName(shape)},
      {"n", std::to_string(n)},
      {"orientation", moe::stringifyMfmaOrientation(orientation).str()},
      {"top_k", std::to_string(topK)},
      {"waves", std::to_string(waves)},
  };
  return op;
}

} // namespace moec
