//===- Backend.cpp - LLVM IR -> AMDGPU object -> HSACO, in process --------===//

#include "moec/Compiler/Pipeline.h"

#include "CachePolicy.h"

#include "lld/Common/Driver.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/OptimizationLevel.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Triple.h"

#include <mutex>

LLD_HAS_DRIVER(elf)

namespace {

void initializeAmdgpuTarget() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeAMDGPUTargetInfo();
    LLVMInitializeAMDGPUTarget();
    LLVMInitializeAMDGPUTargetMC();
    LLVMInitializeAMDGPUAsmPrinter();
  });
}

/// A file removed when the guard goes out of scope.
struct TempFile {
  llvm::SmallString<128> path;
  ~TempFile() {
    if (!path.empty())
      llvm::sys::fs::remove(path);
  }
};

/// Optimises `module` at O3 and emits it as `fileType` for `target`.
llvm::Expected<std::vector<uint8_t>>
emitFile(llvm::Module &module, const moec::CompileTarget &target,
         llvm::CodeGenFileType fileType) {
  initializeAmdgpuTarget();
  llvm::Triple triple(target.triple);
  std::string error;
  const llvm::Target *llvmTarget =
      llvm::TargetRegistry::lookupTarget(triple, error);
  if (!llvmTarget)
    return llvm::createStringError("no LLVM target for " + triple.str() +
                                   ": " + error);
  llvm::TargetOptions options;
  // Assembly keeps the backend's comments (registers, occupancy).
  options.MCOptions.AsmVerbose =
      fileType == llvm::CodeGenFileType::AssemblyFile;
  std::unique_ptr<llvm::TargetMachine> machine(
      llvmTarget->createTargetMachine(triple, target.chip.arch, target.features,
                                      options, llvm::Reloc::PIC_, std::nullopt,
                                      llvm::CodeGenOptLevel::Aggressive));
  if (!machine)
    return llvm::createStringError("cannot create a target machine for " +
                                   std::string(target.chip.arch));
  module.setDataLayout(machine->createDataLayout());

  // The MLIR translation is unoptimised; run the standard O3 pipeline first.
  {
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PassBuilder builder(machine.get());
    builder.registerModuleAnalyses(mam);
    builder.registerCGSCCAnalyses(cgam);
    builder.registerFunctionAnalyses(fam);
    builder.registerLoopAnalyses(lam);
    builder.crossRegisterProxies(lam, fam, cgam, mam);
    llvm::ModulePassManager passes =
        builder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
    passes.run(module, mam);
    moec::applyWeightCachePolicy(module, builder, mam);
  }

  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream stream(buffer);
  llvm::legacy::PassManager codegen;
  if (machine->addPassesToEmitFile(codegen, stream, nullptr, fileType))
    return llvm::createStringError("the AMDGPU backend cannot emit this file "
                                   "type");
  codegen.run(module);
  return std::vector<uint8_t>(buffer.begin(), buffer.end());
}

} // namespace

llvm::Expected<std::vector<uint8_t>>
moec::emitObject(llvm::Module &module, const CompileTarget &target) {
  return emitFile(module, target, llvm::CodeGenFileType::ObjectFile);
}

llvm::Expected<std::string> moec::emitAssembly(llvm::Module &module,
                                               const CompileTarget &target) {
  auto text = emitFile(module, target, llvm::CodeGenFileType::AssemblyFile);
  if (!text)
    return text.takeError();
  return std::string(text->begin(), text->end());
}

llvm::Expected<std::vector<uint8_t>>
moec::linkHsaco(const std::vector<uint8_t> &object) {
  static std::mutex lldMutex;
  std::lock_guard<std::mutex> lock(lldMutex);

  TempFile input, output;
  int fd = -1;
  if (std::error_code ec =
          llvm::sys::fs::createTemporaryFile("moec-kernel", "o", fd, input.path))
    return llvm::createStringError(ec, "cannot create a temporary object file");
  {
    llvm::raw_fd_ostream stream(fd, /*shouldClose=*/true);
    stream.write(reinterpret_cast<const char *>(object.data()), object.size());
  }
  if (std::error_code ec =
          llvm::sys::fs::createTemporaryFile("moec-kernel", "hsaco", output.path))
    return llvm::createStringError(ec, "cannot create a temporary HSACO file");

  const char *args[] = {"ld.lld",         "-shared",         "--no-undefined",
                        "--build-id=none", input.path.c_str(), "-o",
                        output.path.c_str()};
  std::string diagnostics;
  llvm::raw_string_ostream diagnosticStream(diagnostics);
  lld::Result result = lld::lldMain(args, diagnosticStream, diagnosticStream,
                                    {{lld::Gnu, &lld::elf::link}});
  if (result.retCode != 0)
    return llvm::createStringError("lld failed: " + diagnostics);

  auto buffer = llvm::MemoryBuffer::getFile(output.path);
  if (!buffer)
    return llvm::createStringError(buffer.getError(),
                                   "cannot read the linked HSACO");
  llvm::StringRef bytes = (*buffer)->getBuffer();
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}
