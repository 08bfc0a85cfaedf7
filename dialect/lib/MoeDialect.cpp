//===- MoeDialect.cpp - moe dialect registration --------------------------===//

#include "moec/Dialect/Moe/MoeDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace moec::moe;

#include "moec/Dialect/Moe/MoeDialect.cpp.inc"
#include "moec/Dialect/Moe/MoeEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "moec/Dialect/Moe/MoeAttrs.cpp.inc"

#define GET_OP_CLASSES
#include "moec/Dialect/Moe/MoeOps.cpp.inc"

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
