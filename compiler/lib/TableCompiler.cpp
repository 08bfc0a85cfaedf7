//===- TableCompiler.cpp - tuning table -> compiled kernels ---------------===//

#include "moec/Compiler/TableCompiler.h"
#include "moec/Compiler/CodeObjectMetadata.h"
#include "moec/Compiler/CompileTarget.h"
#include "moec/Compiler/Pipeline.h"
#include "moec/Compiler/Registration.h"
#include "moec/Compiler/StageBuilder.h"
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
std::string hashHex(const void *data, size_t size) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx",
                static_cast<unsigned long long>(rt::xxh64(data, size)));
  return text;
}

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
    for (const char *field : {"hidden", "intermediate", "experts", "top_k", "ep"})
      if (kernel.knobs.count(field)) {
        error = kernel.where.file + ":" + std::to_string(kernel.where.line) +
                ": field '" + field + "': belongs on the problem line";
        return CompileStatus::BadInput;
      }
    StageSpec spec = stageSpecOf(table, kernel);
    StageDescription description;
    Operation *op = buildStageOp(builder, spec, description, error);
    if (!op)
      return CompileStatus::BadInput;
    auto existing = std::find_if(
        compiled.kernels.begin(), compiled.kernels.end(),
        [&](const CompiledKernel &c) { return c.symbol == description.symbol; });
    if (existing != compiled.kernels.end()) {
      // Same problem and knobs: one binary serves both table names.
      op->erase();
      existing->tableNames.push_back(kernel.name);
      compiled.kernelIndex[kernel.name] = existing - compiled.kernels.begin();
      continue;
    }
    CompiledKernel entry;
    entry.tableNames = {kernel.name};
    entry.symbol = description.symbol;
    entry.stage = kernel.stage;
    entry.config = description.fields;
    entry.abi = description.abi;
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
    kernel.contentHash = hashHex(kernel.hsaco.data(), kernel.hsaco.size());
    kernel.name = kernel.symbol + "_" + kernel.contentHash.substr(0, 8);
  }
  return CompileStatus::Ok;
}

} // namespace moec
