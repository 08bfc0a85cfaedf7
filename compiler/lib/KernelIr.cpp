//===- KernelIr.cpp - a kernel's IR as stored in a bundle -----------------===//

#include "moec/Compiler/KernelIr.h"

#include "mlir/Bytecode/BytecodeWriter.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace moec {

FailureOr<std::vector<uint8_t>> serializeKernelIr(ModuleOp kernelIR,
                                                  llvm::StringRef kernelName) {
  auto source = kernelIR.lookupSymbol<gpu::GPUModuleOp>(kernelName);
  if (!source)
    return failure();
  Location unknown = UnknownLoc::get(kernelIR.getContext());
  OwningOpRef<ModuleOp> single = ModuleOp::create(unknown);
  single.get()->setAttrs(kernelIR->getAttrDictionary());
  single->getBody()->push_back(source->clone());
  single->walk([&](Operation *op) {
    op->setLoc(unknown);
    for (Region &region : op->getRegions())
      for (Block &block : region)
        for (BlockArgument arg : block.getArguments())
          arg.setLoc(unknown);
  });
  std::string bytes;
  llvm::raw_string_ostream os(bytes);
  if (failed(writeBytecodeToFile(*single, os)))
    return failure();
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

OwningOpRef<ModuleOp> parseKernelIr(MLIRContext &context,
                                    llvm::ArrayRef<uint8_t> bytes,
                                    std::string &error) {
  std::string diagnostic;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    if (diagnostic.empty())
      diagnostic = diag.str();
    return success();
  });
  llvm::StringRef text(reinterpret_cast<const char *>(bytes.data()),
                       bytes.size());
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(text, ParserConfig(&context));
  if (!module)
    error = "kernel IR does not parse: " +
            (diagnostic.empty() ? std::string("unknown error") : diagnostic);
  return module;
}

std::string printKernelIr(ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module.print(os);
  return text;
}

} // namespace moec
