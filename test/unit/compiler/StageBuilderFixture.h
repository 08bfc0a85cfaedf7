//===- StageBuilderFixture.h - a context to build stage ops in --*- C++ -*-===//

#ifndef MOEC_TEST_STAGEBUILDERFIXTURE_H
#define MOEC_TEST_STAGEBUILDERFIXTURE_H

#include "moec/Compiler/Registration.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"

namespace moec::test {

/// An MLIR context with moec's dialects and a module to build stage ops
/// into (buildStageOp inserts at `builder`).
struct StageBuilderFixture {
  StageBuilderFixture()
      : context(registryWithMoec()),
        module(mlir::ModuleOp::create(mlir::UnknownLoc::get(&context))),
        builder(&context) {
    context.loadAllAvailableDialects();
    builder.setInsertionPointToEnd(module->getBody());
  }

  static mlir::DialectRegistry registryWithMoec() {
    mlir::DialectRegistry registry;
    registerMoecDialects(registry);
    return registry;
  }

  mlir::MLIRContext context;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  mlir::OpBuilder builder;
};

} // namespace moec::test

#endif // MOEC_TEST_STAGEBUILDERFIXTURE_H
