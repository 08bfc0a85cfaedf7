//===- TileSchedule.cpp - which tiles a GEMM workgroup computes -----------===//
///
/// \file
/// The tile schedule of the scaled-MFMA stages (W13 and W2 alike): the
/// plain grid (one workgroup per N tile x M tile), the XCD swizzle
/// (tile.xcd_swizzle), grouped M tiles (tile.group_m, after the XCD
/// swizzle when both are set) and persistent
/// workgroups (tile.persist_cu, persist_strided, persist_skew), with the
/// grid rule and the end-of-tile barrier that go with them.
///
//===----------------------------------------------------------------------===//

#include "GemmEmitter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <string>

using namespace mlir;

namespace moec {

std::pair<Value, Value> GemmEmitter::emitTileIds(int64_t nTiles,
                                                 Value mTilesI32) {
  Value nTile = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  Value mTile = gpu::BlockIdOp::create(b, loc, gpu::Dimension::y);
  if (int64_t persist = tile.getPersistCu()) {
    // Workgroup row y visits every P-th tile from y, or the contiguous run
    // [y * chunk, (y + 1) * chunk) with chunk = ceil(tiles / P).
    Value tiles = toIndex(mTilesI32);
    if (int64_t skew = tile.getPersistSkew())
      return emitSkewedTileLoop(nTile, mTile, tiles, persist, skew);
    scf::ForOp loop;
    if (tile.getPersistStrided()) {
      loop = scf::ForOp::create(b, loc, mTile, tiles, idx(persist));
    } else {
      Value chunk = divC(add(tiles, idx(persist - 1)), persist);
      Value begin = mul(mTile, chunk);
      Value end = arith::MinUIOp::create(b, loc, add(begin, chunk), tiles);
      loop = scf::ForOp::create(b, loc, begin, end, idx(1));
    }
    gpu::ReturnOp::create(b, loc);
    b.setInsertionPointToStart(loop.getBody());
    inTileLoop = true;
    return {nTile, loop.getInductionVar()};
  }
  if (!tile.getXcdSwizzle() && tile.getGroupM() == 0)
    return {nTile, mTile};
  Value linear = add(mul(mTile, nTiles), nTile);
  Value id = linear;
  if (tile.getXcdSwizzle())
    id = emitXcdRenumbering(linear, mul(toIndex(mTilesI32), nTiles));
  if (int64_t group = tile.getGroupM()) {
    // Id -> group of `group` M tiles (the last one may be shorter); inside
    // it, M is fastest, then N.
    Value tiles = toIndex(mTilesI32);
    Value first = mul(divC(id, group * nTiles), group);
    Value rows = arith::MinUIOp::create(
        b, loc, arith::SubIOp::create(b, loc, tiles, first), idx(group));
    Value within = remC(id, group * nTiles);
    Value m = add(first, arith::RemUIOp::create(b, loc, within, rows));
    Value n = arith::DivUIOp::create(b, loc, within, rows);
    return {n, m};
  }
  return {remC(id, nTiles), divC(id, nTiles)};
}

Value GemmEmitter::emitXcdRenumbering(Value linear, Value total) {
  // Workgroups go to the X XCDs round-robin by linear id. Renumber so XCD x
  // receives the contiguous run [x * total / X, (x + 1) * total / X) of
  // tiles, which in M-major order share activation rows. Only when the grid
  // divides evenly (otherwise the same formula would send two workgroups
  // to one tile and none to others); then the plain numbering stays.
  const int64_t xcds = chip.xcds;
  Value perXcd = divC(total, xcds);
  Value swizzled = add(mul(remC(linear, xcds), perXcd), divC(linear, xcds));
  Value even = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                     remC(total, xcds), idx(0));
  return arith::SelectOp::create(b, loc, even, swizzled, linear);
}

std::pair<Value, Value> GemmEmitter::emitSkewedTileLoop(Value nTile, Value y,
                                                        Value tiles,
                                                        int64_t persist,
                                                        int64_t skew) {
  // This workgroup's tiles are first + j * stride for j in [0, count).
  Value first, stride, count;
  if (tile.getPersistStrided()) {
    first = y;
    stride = idx(persist);
    Value remaining = arith::SubIOp::create(
        b, loc, arith::MaxUIOp::create(b, loc, tiles, y), y);
    count = divC(add(remaining, idx(persist - 1)), persist);
  } else {
    Value chunk = divC(add(tiles, idx(persist - 1)), persist);
    first = arith::MinUIOp::create(b, loc, mul(y, chunk), tiles);
    stride = idx(1);
    count = arith::SubIOp::create(
        b, loc, arith::MinUIOp::create(b, loc, add(first, chunk), tiles),
        first);
  }
  auto loop = scf::ForOp::create(b, loc, idx(0), count, idx(1));
  gpu::ReturnOp::create(b, loc);
  b.setInsertionPointToStart(loop.getBody());
  inTileLoop = true;
  // Start at (y * skew) mod count and wrap around.
  Value start = arith::RemUIOp::create(b, loc, mul(y, skew), count);
  Value j =
      arith::RemUIOp::create(b, loc, add(loop.getInductionVar(), start), count);
  return {nTile, add(first, mul(j, stride))};
}

void GemmEmitter::emitEndOfTile() {
  // A persistent workgroup's next tile reuses the LDS tiles and the staging
  // area that other waves may still be reading.
  if (tile.getPersistCu() > 0)
    gpu::BarrierOp::create(b, loc);
}

std::string tileGridY(moe::TileAttr tile) {
  if (tile.getPersistCu() > 0)
    return std::to_string(tile.getPersistCu());
  return "num_sorted / " + std::to_string(tile.getM());
}

} // namespace moec
