//===- MoeDialect.h - moe dialect -------------------------------*- C++ -*-===//
///
/// \file
/// The `moe` dialect: its attributes and ops. See MoeBase.td for the story.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_DIALECT_MOE_MOEDIALECT_H
#define MOEC_DIALECT_MOE_MOEDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/AMDGPU/IR/AMDGPUDialect.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"

#include "moec/Dialect/Moe/MoeDialect.h.inc"
#include "moec/Dialect/Moe/MoeEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "moec/Dialect/Moe/MoeAttrs.h.inc"

#define GET_OP_CLASSES
#include "moec/Dialect/Moe/MoeOps.h.inc"

#endif // MOEC_DIALECT_MOE_MOEDIALECT_H
