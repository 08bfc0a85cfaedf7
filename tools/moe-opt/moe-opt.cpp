//===- moe-opt.cpp - MlirOptMain with the moe dialect and passes ----------===//

#include "moec/Codegen/Passes.h"
#include "moec/Compiler/Registration.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  moec::registerMoecDialects(registry);
  moec::registerMoecPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "moec optimizer driver\n", registry));
}
