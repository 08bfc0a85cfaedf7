//===- StageTest.cpp - the dialect's stage ops and abi::Stage agree -------===//
///
/// \file
/// The runtime knows a layer's stages as abi::Stage (abi/include/moec/abi/
/// stage.h, parsed from the manifest's text once); the compiler knows them
/// as the stage ops of the moe dialect, listed by the knob table generated
/// from ODS. A stage op added to ODS without a Stage, or a Stage without
/// its op, fails here.
///
//===----------------------------------------------------------------------===//

#include "moec/Compiler/Registration.h"
#include "moec/Dialect/Moe/MoeKnobs.h"
#include "moec/abi/stage.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"

#include <catch2/catch.hpp>

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
