//===- MoeDialect.cpp - moe dialect registration --------------------------===//

#include "moec/Dialect/Moe/MoeDialect.h"
#include "moec/Dialect/Moe/MoeKnobs.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace moec::moe;

#include "moec/Dialect/Moe/MoeDialect.cpp.inc"
#include "moec/Dialect/Moe/MoeEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "moec/Dialect/Moe/MoeAttrs.cpp.inc"

#include "moec/Dialect/Moe/MoeInterfaces.cpp.inc"

#define GET_OP_CLASSES
#include "moec/Dialect/Moe/MoeOps.cpp.inc"

// The ODS stage enum and the runtime's abi::Stage (which stays free of
// tblgen) must agree value for value; the names are checked by the
// compiler test [stage].
static_assert(getMaxEnumValForStage() + 1 == moec::abi::kStages.size(),
              "moe::Stage and abi::Stage list different stages");
static_assert(toAbiStage(Stage::quant) == moec::abi::Stage::Quant &&
                  toAbiStage(Stage::sort) == moec::abi::Stage::Sort &&
                  toAbiStage(Stage::w13) == moec::abi::Stage::W13 &&
                  toAbiStage(Stage::w2) == moec::abi::Stage::W2 &&
                  toAbiStage(Stage::combine) == moec::abi::Stage::Combine,
              "moe::Stage and abi::Stage disagree on a value");

Stage moec::moe::stageOfOpName(StringRef opName) {
  std::optional<Stage> stage = symbolizeStage(
      opName.drop_front(MoeDialect::getDialectNamespace().size() + 1));
  assert(stage && "a stage op's mnemonic is the name of its stage");
  return stage.value_or(Stage::quant);
}

void MoeDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "moec/Dialect/Moe/MoeAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "moec/Dialect/Moe/MoeOps.cpp.inc"
      >();
}
