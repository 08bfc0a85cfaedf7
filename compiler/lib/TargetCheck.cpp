//===- TargetCheck.cpp - a tuning table against another chip --------------===//

#include "moec/Compiler/TargetCheck.h"
#include "moec/Compiler/Registration.h"
#include "moec/Compiler/StageBuilder.h"
#include "moec/Compiler/TuningTable.h"
#include "moec/Dialect/Moe/MoeTarget.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"


using namespace mlir;

namespace moec {

CompileStatus checkTableTarget(const std::string &tablePath,
                               const target::TargetInfo &chip,
                               std::vector<std::string> &problems,
                               std::string &error) {
  TuningTable table;
  if (!readTuningTable(tablePath, table, error))
    return CompileStatus::BadInput;

  DialectRegistry registry;
  registerMoecDialects(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  OwningOpRef<ModuleOp> module = ModuleOp::create(UnknownLoc::get(&context));
  OpBuilder builder(&context);
  builder.setInsertionPointToEnd(module->getBody());

  problems.clear();
  for (const TableKernel &kernel : table.kernels) {
    StageDescription description;
    Operation *op =
        buildStageOp(builder, stageSpecOf(table, kernel), description, error);
    if (!op)
      return CompileStatus::BadInput;
    const std::string where = kernel.where.file + ":" +
                              std::to_string(kernel.where.line) + ": kernel '" +
                              kernel.name + "': ";
    // Every diagnostic of the check is one problem of this kernel.
    ScopedDiagnosticHandler collect(&context, [&](Diagnostic &diagnostic) {
      problems.push_back(where + diagnostic.str());
      return success();
    });
    (void)moe::verifyOnTarget(op, chip);
  }
  return CompileStatus::Ok;
}

} // namespace moec
