//===- ExtractCommand.cpp - moec extract BUNDLE -o DIR --------------------===//
//
// Writes every code object as a plain .hsaco (one per kernel, named after
// it), the kernel IR it was compiled from as MLIR text (.mlir) where the
// bundle holds it, and the manifest, so llvm-objdump, llvm-readobj and
// mlir-opt can read them.
//
//===----------------------------------------------------------------------===//

#include "CommandSupport.h"
#include "Commands.h"

#include "moec/Compiler/KernelIr.h"
#include "moec/Compiler/Registration.h"
#include "moec/bundle.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <unistd.h>

namespace {

struct ExtractArgs {
  std::string bundle;
  std::string directory;
};

int runExtract(const ExtractArgs &args) {
  std::string error;
  auto bundle = moec::cli::openBundleOrReport(args.bundle);
  if (!bundle)
    return moec::cli::kBadInput;
  std::error_code ec;
  std::filesystem::create_directories(args.directory, ec);
  if (ec) {
    std::cerr << "moec: " << args.directory << ": " << ec.message() << "\n";
    return moec::cli::kBadInput;
  }
  std::filesystem::path dir(args.directory);
  mlir::DialectRegistry registry;
  moec::registerMoecDialects(registry);
  mlir::MLIRContext context(registry);
  context.loadAllAvailableDialects();
  for (const moec::rt::KernelInfo &kernel : bundle->manifest().kernels) {
    moec::rt::CodeObjectView view;
    if (!bundle->codeObject(kernel.codeObject, view, error)) {
      std::cerr << "moec: " << error << "\n";
      return moec::cli::kBadInput;
    }
    // Only an ELF image is written under a .hsaco name.
    if (view.size < 4 || std::memcmp(view.data, "\x7f" "ELF", 4) != 0) {
      std::cerr << "moec: " << args.bundle << ": kernel " << kernel.name
                << ": code object " << kernel.codeObject
                << " is not an ELF image\n";
      return moec::cli::kBadInput;
    }
    if (!moec::cli::writeFileAtomically(dir / (kernel.name + ".hsaco"), view.data, view.size,
                         error)) {
      std::cerr << "moec: " << error << "\n";
      return moec::cli::kCheckFailed;
    }
    std::cout << (dir / (kernel.name + ".hsaco")).string() << "\n";
    if (!kernel.ir.present())
      continue;
    moec::rt::CodeObjectView irView;
    if (!bundle->codeObject(kernel.ir.object, irView, error)) {
      std::cerr << "moec: " << error << "\n";
      return moec::cli::kBadInput;
    }
    auto module = moec::parseKernelIr(
        context, llvm::ArrayRef<uint8_t>(irView.data, irView.size), error);
    if (!module) {
      std::cerr << "moec: " << args.bundle << ": kernel " << kernel.name << ": "
                << error << "\n";
      return moec::cli::kBadInput;
    }
    const std::string text = moec::printKernelIr(*module);
    if (!moec::cli::writeFileAtomically(dir / (kernel.name + ".mlir"), text.data(),
                         text.size(), error)) {
      std::cerr << "moec: " << error << "\n";
      return moec::cli::kCheckFailed;
    }
    std::cout << (dir / (kernel.name + ".mlir")).string() << "\n";
  }
  std::string_view manifest = bundle->manifestText();
  if (!moec::cli::writeFileAtomically(dir / "manifest.json", manifest.data(), manifest.size(),
                       error)) {
    std::cerr << "moec: " << error << "\n";
    return moec::cli::kCheckFailed;
  }
  return moec::cli::kSuccess;
}

} // namespace

void addExtractCommand(CLI::App &app, int &exitStatus) {
  auto args = std::make_shared<ExtractArgs>();
  CLI::App *cmd = app.add_subcommand(
      "extract", "Write the code objects as plain .hsaco files, their kernel IR as .mlir and the manifest");
  cmd->add_option("bundle", args->bundle, "bundle (.moeb)")->required();
  cmd->add_option("-o,--output", args->directory, "directory to write into")
      ->required();
  cmd->callback([args, &exitStatus] { exitStatus = runExtract(*args); });
}
