//===- MfmaLayoutTest.cpp - invariants of the scaled-MFMA lane table ------===//
//
// Hand-computed cases from the layout's sources (docs/target-gfx950.md), and
// the coverage invariants: every (row, k) of each operand and every (m, n) of
// the accumulator is owned by exactly one (lane, element).
//
//===----------------------------------------------------------------------===//

#include "moec/target/mfma_layout.h"

#include <catch2/catch.hpp>

#include <set>
#include <utility>

using namespace moec::mfma;

TEST_CASE("FP8 bytes interleave in 16-byte chunks", "[mfma-layout]") {
  // 32x32x64: byte e of lane group g holds k = 32 (e/16) + 16 g + e%16.
  CHECK(operandK(Shape::M32N32K64, OperandFormat::Fp8, 0, 0) == 0);
  CHECK(operandK(Shape::M32N32K64, OperandFormat::Fp8, 0, 15) == 15);
  CHECK(operandK(Shape::M32N32K64, OperandFormat::Fp8, 0, 16) == 32);
  CHECK(operandK(Shape::M32N32K64, OperandFormat::Fp8, 32, 0) == 16);
  CHECK(operandK(Shape::M32N32K64, OperandFormat::Fp8, 33, 31) == 63);
  // 16x16x128: k = 64 (e/16) + 16 g + e%16.
  CHECK(operandK(Shape::M16N16K128, OperandFormat::Fp8, 16, 0) == 16);
  CHECK(operandK(Shape::M16N16K128, OperandFormat::Fp8, 48, 16) == 112);
  CHECK(operandK(Shape::M16N16K128, OperandFormat::Fp8, 63, 31) == 127);
}

TEST_CASE("FP4 elements are contiguous per lane group", "[mfma-layout]") {
  CHECK(operandK(Shape::M32N32K64, OperandFormat::Fp4, 40, 5) == 37);
  CHECK(operandK(Shape::M16N16K128, OperandFormat::Fp4, 35, 31) == 95);
  CHECK(operandK(Shape::M16N16K128, OperandFormat::Fp4, 15, 0) == 0);
}

TEST_CASE("accumulator layout", "[mfma-layout]") {
  // 32x32: acc[4i+j] -> (m = 8i + 4g + j, n = r).
  CHECK(accRow(Shape::M32N32K64, 33, 5) == 8 + 4 + 1);
  CHECK(accCol(Shape::M32N32K64, 33) == 1);
  // 16x16: acc[j] -> (m = 4g + j, n = r).
  CHECK(accRow(Shape::M16N16K128, 50, 2) == 12 + 2);
  CHECK(accCol(Shape::M16N16K128, 50) == 2);
}

TEST_CASE("every operand element and accumulator has exactly one owner",
          "[mfma-layout]") {
  for (Shape shape : {Shape::M16N16K128, Shape::M32N32K64}) {
    const ShapeInfo info = shapeInfo(shape);
    for (OperandFormat format : {OperandFormat::Fp8, OperandFormat::Fp4}) {
      std::set<std::pair<int, int>> owned;
      for (int lane = 0; lane < 64; ++lane)
        for (int e = 0; e < 32; ++e) {
          int k = operandK(shape, format, lane, e);
          REQUIRE(k >= 0);
          REQUIRE(k < info.k);
          CHECK(owned.insert({operandRow(shape, lane), k}).second);
        }
      CHECK(owned.size() == size_t(info.dim * info.k));
    }
    std::set<std::pair<int, int>> outputs;
    for (int lane = 0; lane < 64; ++lane)
      for (int a = 0; a < info.accPerLane; ++a)
        CHECK(outputs.insert({accRow(shape, lane, a), accCol(shape, lane)}).second);
    CHECK(outputs.size() == size_t(info.dim * info.dim));
    // Each lane's scale block covers 32 consecutive k of the instruction.
    for (int lane = 0; lane < 64; ++lane)
      CHECK(scaleBlock(shape, lane) * 32 < info.k);
  }
}
