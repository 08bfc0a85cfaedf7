//===- TargetPartTest.cpp - one table compiled for two parts of gfx950 ----===//
//
// The part a compile is for (CompileOptions::target) reaches the verifiers,
// the code generator and the manifest: MI350P (gfx950 with 128 CUs) refuses
// a persistent grid that MI355X (256 CUs) takes, its XCD renumbering spreads
// tiles over its 4 XCDs instead of 8, and its bundle records 128 CUs.
//
//===----------------------------------------------------------------------===//

#include "moec/Compiler/CompileTarget.h"
#include "moec/Compiler/TableCompiler.h"
#include "moec/Compiler/TuningTable.h"
#include "moec/manifest.h"
#include "moec/target/target_info.h"

#include <catch2/catch.hpp>

#include <string>

using namespace moec;

namespace {

/// A W2 table with a persistent kernel of `persistCu` workgroups and an
/// XCD-renumbered one.
std::string partTable(int persistCu) {
  return "moec-table 1\n"
         "problem small family=megamoe hidden=512 intermediate=512 experts=8 "
         "top_k=2 ep=2\n"
         "kernel persistent stage=w2 problem=small m=32 n=128 waves=4 "
         "persist_cu=" +
         std::to_string(persistCu) +
         "\n"
         "kernel swizzled stage=w2 problem=small m=32 n=128 waves=4 "
         "xcd_swizzle=true\n"
         "config p kernels=persistent\n"
         "config s kernels=swizzled\n"
         "select network=tiny family=megamoe ep=2 workspace=512 "
         "transport=fixed_slot above_max=error\n"
         "row m=1 config=p\n"
         "row m=8 config=s\n";
}

CompileStatus compileFor(const std::string &text,
                         const target::TargetInfo &part, TuningTable &table,
                         CompiledTable &compiled, std::string &error) {
  REQUIRE(parseTuningTable("part.table", text, table, error));
  CompileOptions options;
  options.target = &CompileTarget::of(part);
  options.jobs = 1;
  return compileTable(table, options, compiled, error);
}

const CompiledKernel &kernelNamed(const CompiledTable &compiled,
                                  const std::string &name) {
  return compiled.kernels.at(compiled.kernelIndex.at(name));
}

} // namespace

TEST_CASE("the MI350P part is gfx950 with half the CUs and XCDs", "[part]") {
  const target::TargetInfo *part = target::lookupTargetInfo("mi350p");
  REQUIRE(part == &target::kMi350p);
  CHECK(std::string(part->arch) == target::kGfx950.arch);
  CHECK(part->computeUnits == 128);
  CHECK(part->xcds == 4);
  CHECK(part->computeUnits / part->xcds ==
        target::kGfx950.computeUnits / target::kGfx950.xcds);
  CHECK(part->ldsBytesPerCu == target::kGfx950.ldsBytesPerCu);
  CHECK(part->elfMach == target::kGfx950.elfMach);
  // A bare arch is its first part; a bundle without compute_units is it.
  CHECK(target::lookupTargetInfo("gfx950:sramecc+:xnack-") == &target::kGfx950);
  CHECK(target::lookupPart("gfx950", 0) == &target::kGfx950);
  CHECK(target::lookupPart("gfx950", 128) == &target::kMi350p);
  CHECK(target::lookupPart("gfx950", 304) == nullptr);
  CHECK(CompileTarget::lookup("mi350p") == &CompileTarget::of(target::kMi350p));
  CHECK(std::string(CompileTarget::of(target::kMi350p).chip.arch) == "gfx950");
}

TEST_CASE("a persistent grid of 256 workgroups fits MI355X but not MI350P",
          "[part]") {
  TuningTable table;
  CompiledTable compiled;
  std::string error;
  REQUIRE(compileFor(partTable(256), target::kGfx950, table, compiled,
                     error) == CompileStatus::Ok);
  CHECK(kernelNamed(compiled, "persistent").abi.gridY == "256");
  CHECK(&compiled.target->chip == &target::kGfx950);

  TuningTable table128;
  CompiledTable compiled128;
  CHECK(compileFor(partTable(256), target::kMi350p, table128, compiled128,
                   error) != CompileStatus::Ok);
  CHECK_THAT(error, Catch::Contains("tile.persist_cu must be 0 (not "
                                    "persistent) to 128, got 256"));
}

TEST_CASE("a bundle for MI350P records its part and spreads tiles over 4 XCDs",
          "[part]") {
  TuningTable table256, table128;
  CompiledTable compiled256, compiled128;
  std::string error;
  REQUIRE(compileFor(partTable(128), target::kGfx950, table256, compiled256,
                     error) == CompileStatus::Ok);
  INFO(error);
  REQUIRE(compileFor(partTable(128), target::kMi350p, table128, compiled128,
                     error) == CompileStatus::Ok);

  // Same ISA, same grid; the XCD renumbering is the part's.
  CHECK(kernelNamed(compiled128, "persistent").abi.gridY == "128");
  CHECK(kernelNamed(compiled256, "swizzled").kernelIr !=
        kernelNamed(compiled128, "swizzled").kernelIr);

  const BundleContents bundle256 = buildBundleContents(table256, compiled256);
  const BundleContents bundle128 = buildBundleContents(table128, compiled128);
  CHECK(bundle256.manifest.target.arch == "gfx950");
  CHECK(bundle128.manifest.target.arch == "gfx950");
  CHECK(bundle256.manifest.target.computeUnits == 256);
  CHECK(bundle128.manifest.target.computeUnits == 128);

  // The part survives the manifest's text, and the runtime finds it.
  rt::Manifest parsed;
  const std::string text = rt::serializeManifest(bundle128.manifest);
  REQUIRE(rt::parseManifest(text, uint32_t(bundle128.objects.size()), parsed,
                            error));
  CHECK(rt::partOf(parsed.target) == &target::kMi350p);
  CHECK(text.find("\"compute_units\":128") != std::string::npos);
}
