//===- TableCompiler.cpp - tuning table -> compiled kernels ---------------===//

#include "moec/Compiler/TableCompiler.h"
#include "moec/Codegen/KernelBuilders.h"
#include "moec/Compiler/CodeObjectMetadata.h"
#include "moec/Compiler/CompileTarget.h"
#include "moec/Compiler/Pipeline.h"
#include "moec/Compiler/Registration.h"
#include "moec/Dialect/Moe/MoeDialect.h"
#include "moec/hash.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/raw_ostream.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

using namespace mlir;

namespace moec {
namespace {

std::string hex64(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx",
                static_cast<unsigned long long>(value));
  return text;
}

/// Turns the knobs of a table kernel into dialect attributes. Values are
/// parsed here; their legality is the dialect verifier's job.
class KernelAttrBuilder {
public:
  KernelAttrBuilder(MLIRContext &context, const TableKernel &kernel,
                    std::string &error)
      : context(context), kernel(kernel), error(error) {}

  bool fail(const std::string &field, const std::string &message) {
    error = kernel.where.file + ":" + std::to_string(kernel.where.line) +
            ": field '" + field + "': " + message;
    return false;
  }

  bool integer(const char *field, int64_t fallback, int64_t &value) {
    auto it = kernel.knobs.find(field);
    if (it == kernel.knobs.end()) {
      value = fallback;
      return true;
    }
    errno = 0;
    char *end = nullptr;
    value = std::strtoll(it->second.c_str(), &end, 10);
    if (errno != 0 || end != it->second.c_str() + it->second.size())
      return fail(field, "expected an integer, got '" + it->second + "'");
    return true;
  }

  /// Reads an enumerated knob with `parse` (absent: `fallback`).
  template <typename Enum>
  bool enumeration(const char *field, Enum fallback,
                   function_ref<std::optional<Enum>(llvm::StringRef)> parse,
                   const char *choices, Enum &value) {
    auto it = kernel.knobs.find(field);
    if (it == kernel.knobs.end()) {
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

  MLIRContext &context;
  const TableKernel &kernel;
  std::string &error;
};

/// Table spelling of the MFMA shape: "16x16x128" or "32x32x64".
std::optional<moe::MfmaShape> parseMfmaShape(llvm::StringRef text) {
  if (text == "16x16x128")
    return moe::MfmaShape::m16n16k128;
  if (text == "32x32x64")
    return moe::MfmaShape::m32n32k64;
  return std::nullopt;
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

std::vector<std::pair<std::string, std::string>> w2Config(moe::TileAttr tile) {
  return {
      {"b_cache", moe::stringifyCachePolicy(tile.getBCache()).str()},
      {"b_layout", "w2_expert_n_k_e2m1x2_low_nibble_first"},
      {"k", std::to_string(tile.getK())},
      {"m", std::to_string(tile.getM())},
      {"mfma", tile.getMfma() == moe::MfmaShape::m16n16k128 ? "16x16x128"
                                                            : "32x32x64"},
      {"n", std::to_string(tile.getN())},
      {"orientation", moe::stringifyMfmaOrientation(tile.getOrientation()).str()},
      {"waves", std::to_string(tile.getWaves())},
  };
}

} // namespace

std::vector<std::vector<uint8_t>> collectCodeObjects(const CompiledTable &compiled) {
  std::vector<std::vector<uint8_t>> objects;
  for (const CompiledKernel &kernel : compiled.kernels)
    objects.push_back(kernel.hsaco);
  return objects;
}

CompileStatus compileTable(const TuningTable &table,
                           const CompileOptions &options,
                           CompiledTable &compiled, std::string &error) {
  DialectRegistry registry;
  registerMoecDialects(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  // Keep the first diagnostic as the one-line error; its location is the
  // table line, so it reads "table:LINE:1: error: ...".
  std::string firstDiagnostic;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    if (!firstDiagnostic.empty())
      return success();
    llvm::raw_string_ostream os(firstDiagnostic);
    if (auto fileLoc = dyn_cast<FileLineColLoc>(diag.getLocation()))
      os << fileLoc.getFilename().getValue() << ":" << fileLoc.getLine()
         << ": ";
    os << diag.str();
    return success();
  });

  OwningOpRef<ModuleOp> module = ModuleOp::create(UnknownLoc::get(&context));
  OpBuilder builder(&context);
  builder.setInsertionPointToEnd(module->getBody());
  compiled = CompiledTable();

  for (const TableKernel &kernel : table.kernels) {
    const TableProblem *p = table.findProblem(kernel.problem);
    Location loc = FileLineColLoc::get(&context, kernel.where.file,
                                       kernel.where.line, 1);
    KernelAttrBuilder knobs(context, kernel, error);
    int64_t m, n, k, waves;
    moe::MfmaShape shape;
    moe::MfmaOrientation orientation;
    moe::CachePolicy bCache;
    if (!knobs.integer("m", 0, m) || !knobs.integer("n", 0, n) ||
        !knobs.integer("k", 256, k) || !knobs.integer("waves", 4, waves) ||
        !knobs.enumeration<moe::MfmaShape>(
            "mfma", moe::MfmaShape::m16n16k128, parseMfmaShape,
            "16x16x128, 32x32x64", shape) ||
        !knobs.enumeration<moe::MfmaOrientation>(
            "orientation", moe::MfmaOrientation::a_major,
            [](llvm::StringRef text) { return moe::symbolizeMfmaOrientation(text); },
            "a_major, b_major", orientation) ||
        !knobs.enumeration<moe::CachePolicy>(
            "b_cache", moe::CachePolicy::cached,
            [](llvm::StringRef text) { return moe::symbolizeCachePolicy(text); },
            "cached, nt", bCache))
      return CompileStatus::BadInput;

    auto emitError = [&] { return ::mlir::emitError(loc); };
    auto problem = moe::ProblemAttr::getChecked(
        emitError, &context, p->hidden, p->intermediate, p->experts, p->topK,
        p->ep, Type(builder.getType<Float8E4M3FNType>()),
        Type(builder.getType<Float4E2M1FNType>()), Type(builder.getBF16Type()));
    auto tile = moe::TileAttr::getChecked(emitError, &context, m, n, k, waves,
                                          shape, orientation, bCache);
    if (!problem || !tile) {
      error = firstDiagnostic;
      return CompileStatus::BadInput;
    }
    std::string symbol = w2Symbol(problem, tile);
    auto existing = std::find_if(
        compiled.kernels.begin(), compiled.kernels.end(),
        [&](const CompiledKernel &c) { return c.symbol == symbol; });
    if (existing != compiled.kernels.end()) {
      existing->tableNames.push_back(kernel.name);
      compiled.kernelIndex[kernel.name] = existing - compiled.kernels.begin();
      continue;
    }
    auto op = moe::W2Op::create(builder, loc, symbol, problem, tile);
    if (failed(op.verify())) {
      error = firstDiagnostic;
      return CompileStatus::BadInput;
    }
    CompiledKernel entry;
    entry.tableNames = {kernel.name};
    entry.symbol = symbol;
    entry.stage = kernel.stage;
    entry.config = w2Config(tile);
    entry.abi = getW2KernelAbi(op);
    entry.where = kernel.where;
    compiled.kernelIndex[kernel.name] = compiled.kernels.size();
    compiled.kernels.push_back(std::move(entry));
  }

  if (failed(lowerToKernelIR(*module))) {
    error = table.path + ": kernel generation failed: " + firstDiagnostic;
    return CompileStatus::CheckFailed;
  }

  const CompileTarget &target = CompileTarget::gfx950();
  for (CompiledKernel &kernel : compiled.kernels) {
    std::string where = kernel.where.file + ":" +
                        std::to_string(kernel.where.line) + ": kernel " +
                        kernel.symbol + ": ";
    auto hsaco = compileKernel(*module, kernel.symbol, target);
    if (!hsaco) {
      error = where + llvm::toString(hsaco.takeError()) + " " + firstDiagnostic;
      return CompileStatus::CheckFailed;
    }
    kernel.hsaco = std::move(*hsaco);
    auto described = readKernelResources(kernel.hsaco);
    if (!described) {
      error = where + llvm::toString(described.takeError());
      return CompileStatus::CheckFailed;
    }
    if (described->size() != 1) {
      error = where + "expected one kernel in the code object";
      return CompileStatus::CheckFailed;
    }
    kernel.resources = described->front().resources;
    const rt::KernelResources &r = kernel.resources;
    if (!options.allowSpills && (r.vgprSpill > 0 || r.sgprSpill > 0)) {
      error = where + "spills " + std::to_string(r.vgprSpill) + " VGPRs and " +
              std::to_string(r.sgprSpill) + " SGPRs (resource gate)";
      return CompileStatus::CheckFailed;
    }
    if (r.privateSegmentBytes > 0 && !options.allowSpills) {
      error = where + "uses " + std::to_string(r.privateSegmentBytes) +
              " bytes of scratch (resource gate)";
      return CompileStatus::CheckFailed;
    }
    if (r.ldsBytes > target.chip.ldsBytesPerCu) {
      error = where + "uses " + std::to_string(r.ldsBytes) + " bytes of LDS; " +
              target.chip.arch + " has " +
              std::to_string(target.chip.ldsBytesPerCu);
      return CompileStatus::CheckFailed;
    }
    kernel.contentHash = hex64(rt::xxh64(kernel.hsaco.data(), kernel.hsaco.size()));
    kernel.name = kernel.symbol + "_" + kernel.contentHash.substr(0, 8);
  }
  return CompileStatus::Ok;
}

} // namespace moec
