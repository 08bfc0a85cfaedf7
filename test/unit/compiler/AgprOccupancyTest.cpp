//===- AgprOccupancyTest.cpp - the occupancy model against LLVM's ---------===//
//
// Kernels whose accumulators spill into AGPRs, compiled the way moec
// compiles them (moe op -> kernel IR -> LLVM IR at O3 -> object -> HSACO).
// The expected numbers are LLVM's own, obtained in the test, never the
// model's:
//  - `.vgpr_count` and `.agpr_count` from `llvm-readobj-22 --notes` on the
//    HSACO;
//  - NumVgprs, NumAgprs, TotalNumVgprs and Occupancy from the comments
//    AMDGPUAsmPrinter writes when the same backend, with the same options,
//    emits the same kernel as assembly (moec::emitAssembly; its Occupancy
//    is GCNSubtarget::computeOccupancy). `llc-22` on the optimised IR text
//    is not used: the IR it can be given is not the IR the object came
//    from, and it allocates a few registers differently.
// The model must give LLVM's unified count from LLVM's split, read
// `.vgpr_count` as that unified count (not add the AGPRs again), and
// predict LLVM's waves per SIMD from the metadata alone.
//
//===----------------------------------------------------------------------===//

#include "TestKernels.h"

#include "moec/Compiler/CodeObjectMetadata.h"
#include "moec/Compiler/Pipeline.h"
#include "moec/Compiler/Registration.h"
#include "moec/target/occupancy.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/raw_ostream.h"

#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

using moec::test::runCommand;

/// The first unsigned number after `key` followed by optional spaces,
/// e.g. "; NumAgprs: 168" or ".agpr_count:     168"; -1 when absent.
long numberAfter(const std::string &text, const std::string &key) {
  std::regex pattern(std::regex_replace(key, std::regex("[.]"), "\\.") +
                     "\\s+(\\d+)");
  std::smatch match;
  if (!std::regex_search(text, match, pattern))
    return -1;
  return std::stol(match[1]);
}

/// A temporary file removed at the end of the scope.
struct TempPath {
  explicit TempPath(const char *suffix) {
    path = std::string("/tmp/moec-agpr-XXXXXX") + suffix;
    std::vector<char> name(path.begin(), path.end());
    name.push_back('\0');
    int fd = mkstemps(name.data(), static_cast<int>(std::strlen(suffix)));
    REQUIRE(fd >= 0);
    close(fd);
    path = name.data();
  }
  ~TempPath() { unlink(path.c_str()); }
  std::string path;
};

/// What LLVM says about one kernel, and what the model says.
struct Measured {
  /// llvm-readobj --notes on the HSACO.
  long vgprCount = -1, agprCount = -1;
  /// The backend's assembly comments.
  long numVgprs = -1, numAgprs = -1, totalNumVgprs = -1, occupancy = -1;
  /// moec's own metadata reader (the input of the model).
  moec::rt::KernelResources resources;
};

/// Compiles the W2 op `tile` at the Flash EP4 shape as moec does and
/// measures it.
Measured compileAndMeasure(const std::string &name, const std::string &tile) {
  const std::string source =
      "moe.w2 @" + name +
      " problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = "
      "384, top_k = 6, ep = 4, activation = f8E4M3FN, weight = f4E2M1FN, "
      "output = bf16>) tile(#moe.tile<" +
      tile + ">)\n";
  mlir::DialectRegistry registry;
  moec::registerMoecDialects(registry);
  mlir::MLIRContext context(registry);
  auto module = mlir::parseSourceString<mlir::ModuleOp>(source, &context);
  REQUIRE(module);
  REQUIRE(mlir::succeeded(moec::lowerToKernelIR(*module)));
  const moec::CompileTarget &target =
      moec::CompileTarget::of(moec::target::kGfx950);
  // moec::compileKernel, step by step, to keep the optimised LLVM IR.
  REQUIRE(mlir::succeeded(moec::lowerKernelIRToLLVM(*module, target)));
  auto gpuModule = module->lookupSymbol<mlir::gpu::GPUModuleOp>(name);
  REQUIRE(gpuModule);
  // One translation for the object, one for the assembly: both start from
  // the same unoptimised LLVM IR, as every moec compile does.
  llvm::LLVMContext objectContext, assemblyContext;
  auto objectModule = moec::translateToLLVMIR(gpuModule, objectContext, target);
  REQUIRE(static_cast<bool>(objectModule));
  auto object = moec::emitObject(**objectModule, target);
  REQUIRE(static_cast<bool>(object));
  auto hsaco = moec::linkHsaco(*object);
  REQUIRE(static_cast<bool>(hsaco));
  auto assemblyModule =
      moec::translateToLLVMIR(gpuModule, assemblyContext, target);
  REQUIRE(static_cast<bool>(assemblyModule));
  auto assembly = moec::emitAssembly(**assemblyModule, target);
  REQUIRE(static_cast<bool>(assembly));

  Measured m;
  auto kernels = moec::readKernelResources(*hsaco);
  REQUIRE(static_cast<bool>(kernels));
  REQUIRE(kernels->size() == 1);
  m.resources = kernels->front().resources;

  TempPath hsacoFile(".hsaco");
  {
    std::ofstream out(hsacoFile.path, std::ios::binary);
    out.write(reinterpret_cast<const char *>(hsaco->data()), hsaco->size());
  }
  const std::string notes = runCommand(
      std::string(MOEC_LLVM_BIN) + "/llvm-readobj --notes " + hsacoFile.path);
  m.vgprCount = numberAfter(notes, ".vgpr_count:");
  m.agprCount = numberAfter(notes, ".agpr_count:");

  m.numVgprs = numberAfter(*assembly, "; NumVgprs:");
  m.numAgprs = numberAfter(*assembly, "; NumAgprs:");
  m.totalNumVgprs = numberAfter(*assembly, "; TotalNumVgprs:");
  m.occupancy = numberAfter(*assembly, "; Occupancy:");
  return m;
}

moec::target::OccupancyEstimate modelOf(const moec::rt::KernelResources &r,
                                        uint32_t workgroupSize) {
  moec::target::KernelResourceUse use;
  use.vgprs = r.vgpr;
  use.agprs = r.agpr;
  use.sgprs = r.sgpr;
  use.ldsBytes = r.ldsBytes;
  use.workgroupSize = workgroupSize;
  return moec::target::estimateOccupancy(moec::target::kGfx950, use);
}

void checkAgainstLlvm(const Measured &m, uint32_t workgroupSize) {
  const moec::target::TargetInfo &chip = moec::target::kGfx950;
  INFO("readobj .vgpr_count "
       << m.vgprCount << " .agpr_count " << m.agprCount
       << "; assembly NumVgprs " << m.numVgprs << " NumAgprs " << m.numAgprs
       << " TotalNumVgprs " << m.totalNumVgprs << " Occupancy " << m.occupancy);
  REQUIRE(m.vgprCount > 0);
  REQUIRE(m.occupancy > 0);
  // The assembly is the object's code: the same registers.
  CHECK(m.totalNumVgprs == m.vgprCount);
  CHECK(m.numAgprs == m.agprCount);
  // The metadata's count is the unified one, and the model's formula gives
  // it from LLVM's split.
  CHECK(long(moec::target::unifiedVgprCount(
            chip, uint32_t(m.numVgprs), uint32_t(m.numAgprs))) == m.vgprCount);
  CHECK(long(m.resources.vgpr) == m.vgprCount);
  CHECK(long(m.resources.agpr) == m.agprCount);
  // The model predicts LLVM's occupancy from the metadata alone.
  moec::target::OccupancyEstimate e = modelOf(m.resources, workgroupSize);
  CHECK(e.limiter != moec::target::OccupancyLimiter::Invalid);
  CHECK(long(e.wavesPerSimd) == m.occupancy);
}

} // namespace

TEST_CASE("W2 tiles that use AGPRs: counted once, as LLVM does",
          "[occupancy][agpr]") {
  // LLVM 22.1.8 on this machine (2026-11-29), for each tile:
  //  128x512x256, 4 waves: .vgpr_count 424, .agpr_count 168, NumVgprs 256,
  //    TotalNumVgprs 424, Occupancy 1. The model used to add the 168 AGPRs
  //    again (592 > 512) and call the kernel unlaunchable.
  //  64x512x256, 2 waves: .vgpr_count 474, .agpr_count 218, NumVgprs 256,
  //    Occupancy 1.
  const struct {
    const char *name, *tile;
    uint32_t workgroupSize;
  } tiles[] = {
      {"w2_agpr", "m = 128, n = 512, k = 256, waves = 4", 256},
      {"w2_agpr2", "m = 64, n = 512, k = 256, waves = 2", 128},
  };
  for (const auto &tile : tiles) {
    INFO(tile.tile);
    Measured m = compileAndMeasure(tile.name, tile.tile);
    CHECK(m.agprCount > 0);
    checkAgainstLlvm(m, tile.workgroupSize);
  }
}

TEST_CASE("W2 64x256x256 over 4 waves (no AGPRs) matches LLVM's occupancy",
          "[occupancy][agpr]") {
  // A tile whose accumulators fit the architectural VGPRs, so the model's
  // no-AGPR path is checked against LLVM. (128x256 was such a tile until
  // the word-wide scale loads added a few live registers: LLVM 22 now gives
  // it 8 AGPRs.)
  Measured m =
      compileAndMeasure("w2_noagpr", "m = 64, n = 256, k = 256, waves = 4");
  CHECK(m.agprCount == 0);
  checkAgainstLlvm(m, 256);
}
