//===- CodeObjectMetadataTest.cpp - metadata reader vs llvm-readobj -------===//
//
// The resource reader must agree with llvm-readobj-22 --notes on the same
// HSACO, field by field.
//
//===----------------------------------------------------------------------===//

#include "TestKernels.h"

#include "moec/Compiler/CodeObjectMetadata.h"
#include "moec/Compiler/Pipeline.h"
#include "moec/Compiler/Registration.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/raw_ostream.h"

#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <unistd.h>

namespace moec::test {

std::string w2Source(const std::string &name, int tileM, int tileN, int waves,
                     const std::string &extraTile) {
  std::ostringstream os;
  os << "moe.w2 @" << name
     << " problem(#moe.problem<hidden = 512, intermediate = 256, experts = 8,"
        " top_k = 2, ep = 2, activation = f8E4M3FN, weight = f4E2M1FN,"
        " output = bf16>) tile(#moe.tile<m = "
     << tileM << ", n = " << tileN << ", k = 256, waves = " << waves
     << extraTile << ">)\n";
  return os.str();
}

std::vector<uint8_t> compileToHsaco(const std::string &mlir,
                                    const std::string &name) {
  mlir::DialectRegistry registry;
  registerMoecDialects(registry);
  mlir::MLIRContext context(registry);
  auto module = mlir::parseSourceString<mlir::ModuleOp>(mlir, &context);
  REQUIRE(module);
  REQUIRE(mlir::succeeded(lowerToKernelIR(*module)));
  auto hsaco = compileKernel(*module, name, CompileTarget::of(target::kGfx950));
  if (!static_cast<bool>(hsaco)) {
    std::string message = llvm::toString(hsaco.takeError());
    FAIL(message);
  }
  return *hsaco;
}

std::string runCommand(const std::string &command) {
  std::string output;
  FILE *pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe))
    output.append(buffer.data(), n);
  REQUIRE(pclose(pipe) == 0);
  return output;
}

} // namespace moec::test

namespace {

using moec::test::runCommand;

/// Reads `key: value` of the one kernel in llvm-readobj's YAML dump.
long readobjField(const std::string &notes, const std::string &key) {
  std::regex pattern("\\s" + std::regex_replace(key, std::regex("\\."), "\\.") +
                     ":\\s+(\\d+)");
  std::smatch match;
  if (!std::regex_search(notes, match, pattern))
    return -1;
  return std::stol(match[1]);
}

} // namespace

TEST_CASE("metadata reader agrees with llvm-readobj-22 --notes", "[metadata]") {
  const std::string name = "w2_meta";
  std::vector<uint8_t> hsaco = moec::test::compileToHsaco(
      moec::test::w2Source(name, 32, 128, 4), name);

  auto kernels = moec::readKernelResources(hsaco);
  if (!kernels)
    FAIL(llvm::toString(kernels.takeError()));
  REQUIRE(kernels->size() == 1);
  const moec::CodeObjectKernel &kernel = kernels->front();
  const moec::rt::KernelResources &k = kernel.resources;
  CHECK(kernel.name == name);
  CHECK(kernel.symbol == name + ".kd");

  char path[] = "/tmp/moec-meta-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, hsaco.data(), hsaco.size()) == (ssize_t)hsaco.size());
  close(fd);
  std::string notes =
      runCommand(std::string(MOEC_LLVM_BIN) + "/llvm-readobj --notes " + path);
  unlink(path);

  CHECK(readobjField(notes, ".vgpr_count") == k.vgpr);
  CHECK(readobjField(notes, ".agpr_count") == k.agpr);
  CHECK(readobjField(notes, ".sgpr_count") == k.sgpr);
  CHECK(readobjField(notes, ".group_segment_fixed_size") == k.ldsBytes);
  CHECK(readobjField(notes, ".private_segment_fixed_size") ==
        k.privateSegmentBytes);
  CHECK(readobjField(notes, ".vgpr_spill_count") == k.vgprSpill);
  CHECK(readobjField(notes, ".sgpr_spill_count") == k.sgprSpill);
  CHECK(readobjField(notes, ".wavefront_size") == k.wavefrontSize);
  CHECK(readobjField(notes, ".max_flat_workgroup_size") ==
        k.maxFlatWorkgroupSize);
  // The kernel stages a 32x256 FP8 A tile and a 128x128-byte B tile.
  CHECK(k.ldsBytes == 32 * 256 + 128 * 128);
  CHECK(k.maxFlatWorkgroupSize == 256);
  CHECK(k.wavefrontSize == 64);
}

TEST_CASE("metadata reader refuses what is not an AMDGPU code object",
          "[metadata]") {
  std::vector<uint8_t> garbage(256, 0x5a);
  auto kernels = moec::readKernelResources(garbage);
  bool accepted = static_cast<bool>(kernels);
  CHECK_FALSE(accepted);
  if (!accepted)
    llvm::consumeError(kernels.takeError());
}
