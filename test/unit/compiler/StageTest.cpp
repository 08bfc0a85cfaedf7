//===- StageTest.cpp - the dialect's stage ops and abi::Stage agree -------===//
///
/// \file
/// The runtime knows a layer's stages as abi::Stage (abi/include/moec/abi/
/// stage.h, parsed from the manifest's text once); the compiler knows them
/// as the stage ops of the moe dialect, listed by the knob table generated
/// from ODS, and as the ODS enum moe::Stage, whose values MoeDialect.cpp
/// static_asserts against abi::Stage. A stage op added to ODS without a
/// Stage, or a Stage without its op, fails here; so does a stage op without
/// the StageOpInterface or the codegen's StageKernelInterface.
///
//===----------------------------------------------------------------------===//

#include "StageBuilderFixture.h"
#include "moec/Codegen/StageKernelInterface.h"
#include "moec/Compiler/Registration.h"
#include "moec/Compiler/StageBuilder.h"
#include "moec/Dialect/Moe/MoeDialect.h"
#include "moec/Dialect/Moe/MoeKnobs.h"
#include "moec/Dialect/Moe/MoeTarget.h"
#include "moec/abi/stage.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"

#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <string>

TEST_CASE("every stage op of the dialect is a Stage", "[stage]") {
  std::set<std::string> fromOds;
  for (const moec::moe::StageKnobs *s = moec::moe::stageKnobsBegin();
       s != moec::moe::stageKnobsEnd(); ++s) {
    INFO(s->opName);
    fromOds.insert(s->stage);
    const std::optional<moec::abi::Stage> stage = moec::abi::parseStage(s->stage);
    REQUIRE(stage);
    CHECK(std::string(moec::abi::stageName(*stage)) == s->stage);
    CHECK(std::string(s->opName) == std::string("moe.") + s->stage);
  }
  std::set<std::string> fromAbi;
  for (moec::abi::Stage stage : moec::abi::kStages)
    fromAbi.insert(moec::abi::stageName(stage));
  CHECK(fromOds == fromAbi);

  // Each is an op the dialect registers under that name.
  mlir::DialectRegistry registry;
  moec::registerMoecDialects(registry);
  mlir::MLIRContext context(registry);
  context.loadAllAvailableDialects();
  for (moec::abi::Stage stage : moec::abi::kStages) {
    const std::string name = std::string("moe.") + moec::abi::stageName(stage);
    INFO(name);
    CHECK(mlir::RegisteredOperationName::lookup(name, &context).has_value());
  }
}

TEST_CASE("stage names parse back and nothing else does", "[stage]") {
  for (moec::abi::Stage stage : moec::abi::kStages)
    CHECK(moec::abi::parseStage(moec::abi::stageName(stage)) == stage);
  for (const char *name : {"", "W13", "w3", "fused", "quant ", "combine2"})
    CHECK_FALSE(moec::abi::parseStage(name));
  CHECK(moec::abi::isGemmStage(moec::abi::Stage::W13));
  CHECK(moec::abi::isGemmStage(moec::abi::Stage::W2));
  CHECK_FALSE(moec::abi::isGemmStage(moec::abi::Stage::Combine));
}

TEST_CASE("the ODS stage enum and abi::Stage name the same stages", "[stage]") {
  namespace moe = moec::moe;
  REQUIRE(moe::getMaxEnumValForStage() + 1 == moec::abi::kStages.size());
  for (moec::abi::Stage stage : moec::abi::kStages) {
    const moe::Stage own = moe::fromAbiStage(stage);
    INFO(moec::abi::stageName(stage));
    CHECK(moe::stringifyStage(own).str() == moec::abi::stageName(stage));
    CHECK(moe::toAbiStage(own) == stage);
    CHECK(moe::symbolizeStage(moec::abi::stageName(stage)) == own);
  }
  CHECK(moe::stageNameList() == "quant, sort, w13, w2 or combine");
}

TEST_CASE("every stage op answers the stage interfaces", "[stage]") {
  namespace moe = moec::moe;
  moec::test::StageBuilderFixture fixture;
  // The knobs each stage needs beyond the problem.
  const std::map<std::string, std::map<std::string, std::string>> required = {
      {"quant", {}},
      {"sort", {{"m_tile", "32"}}},
      {"w13", {{"m", "32"}, {"n", "128"}}},
      {"w2", {{"m", "32"}, {"n", "128"}}},
      {"combine", {}}};
  for (moec::abi::Stage abiStage : moec::abi::kStages) {
    const std::string name = moec::abi::stageName(abiStage);
    INFO(name);
    moec::StageSpec spec;
    spec.stage = abiStage;
    spec.fields = {{"hidden", "1024"}, {"intermediate", "1024"},
                   {"experts", "8"},   {"top_k", "2"}};
    for (const auto &[knob, value] : required.at(name))
      spec.fields[knob] = value;
    moec::StageDescription description;
    std::string error;
    mlir::Operation *op =
        moec::buildStageOp(fixture.builder, spec, description, error);
    INFO(error);
    REQUIRE(op);
    auto stage = llvm::dyn_cast<moe::StageOpInterface>(op);
    REQUIRE(stage);
    CHECK(moe::toAbiStage(stage.getStage()) == abiStage);
    CHECK(stage.getProblem() == op->getAttr("problem"));
    CHECK(stage.getProblem().getHidden() == 1024);
    CHECK(stage.getKernelSymbol() == description.symbol);
    CHECK(stage.getKernelSymbol() == moe::getKernelSymbol(op));
    CHECK(stage.getLdsBytes() >= 0);
    const bool usesLds = moec::abi::isGemmStage(abiStage) ||
                         abiStage == moec::abi::Stage::Sort;
    CHECK((stage.getLdsBytes() > 0) == usesLds);
    CHECK(mlir::succeeded(
        stage.verifyOnTarget(moe::getVerifiedTarget(op))));
    // The codegen's half, attached by registerMoecDialects.
    auto kernel = llvm::dyn_cast<moec::StageKernelInterface>(op);
    REQUIRE(kernel);
    const moec::KernelAbi abi = kernel.getKernelAbi();
    CHECK(!abi.args.empty());
    CHECK(abi.args.size() == description.abi.args.size());
    CHECK(abi.gridX == description.abi.gridX);
    CHECK(abi.workgroupSize == description.abi.workgroupSize);
  }
}
