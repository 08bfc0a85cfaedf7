//===- PeerWork.cpp - work list of the fused MegaMoE GEMM stages ----------===//
///
/// \file
/// A peer stage's GEMM work is every used M tile of every local expert's
/// receive rows, times the N tiles. The counts are known only once the
/// dispatch is complete, so each workgroup builds the list in LDS: lanes
/// read the counts in parallel, thread 0 scans the M tiles per expert, and
/// an item decodes back to (expert, M tile, N tile) by binary search. Empty
/// capacity costs nothing, unlike a loop over every possible tile.
///
//===----------------------------------------------------------------------===//

#include "GemmEmitter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;

namespace moec {

Value GemmEmitter::emitPeerWorkList(Value lds, const PeerLds &at,
                                    Value control, Value countBase,
                                    int64_t experts, int64_t capacity,
                                    int64_t nTiles) {
  const int64_t tileM = tile.getM();
  // Counts (capped: an overflowing expert's count keeps growing) and their
  // M tiles, one expert per lane.
  auto loop = scf::ForOp::create(b, loc, tid, idx(experts), idx(lanes));
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value expert = loop.getInductionVar();
    Value count = memref::LoadOp::create(b, loc, control,
                                         ValueRange{add(countBase, expert)});
    count = arith::MinSIOp::create(b, loc, count, i32(capacity));
    count = arith::MaxSIOp::create(b, loc, count, i32(0));
    memref::StoreOp::create(b, loc, count, lds,
                            ValueRange{add(idx(at.counts), expert)});
    Value tiles = arith::DivUIOp::create(
        b, loc, arith::AddIOp::create(b, loc, count, i32(tileM - 1)),
        i32(tileM));
    memref::StoreOp::create(b, loc, tiles, lds,
                            ValueRange{add(idx(at.tileScan), expert)});
  }
  gpu::BarrierOp::create(b, loc);
  // Exclusive scan in place; word `experts` receives the total.
  onThreadZero(tid, [&] {
    auto scan = scf::ForOp::create(b, loc, idx(0), idx(experts), idx(1),
                                   ValueRange{i32(0)});
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(scan.getBody());
    Value word = add(idx(at.tileScan), scan.getInductionVar());
    Value tiles = memref::LoadOp::create(b, loc, lds, ValueRange{word});
    Value before = scan.getRegionIterArg(0);
    memref::StoreOp::create(b, loc, before, lds, ValueRange{word});
    scf::YieldOp::create(b, loc,
                         ValueRange{arith::AddIOp::create(b, loc, before, tiles)});
    b.setInsertionPointAfter(scan);
    memref::StoreOp::create(b, loc, scan.getResult(0), lds,
                            ValueRange{idx(at.tileScan + experts)});
  });
  gpu::BarrierOp::create(b, loc);
  Value total = memref::LoadOp::create(b, loc, lds,
                                       ValueRange{idx(at.tileScan + experts)});
  return mul(toIndex(total), nTiles);
}

GemmEmitter::PeerItem GemmEmitter::decodePeerItem(Value item, Value lds,
                                                  const PeerLds &at,
                                                  int64_t experts,
                                                  int64_t nTiles) {
  PeerItem out;
  out.nTile = remC(item, nTiles);
  Value tileIndex = arith::IndexCastOp::create(b, loc, b.getI32Type(),
                                               divC(item, nTiles));
  // The last expert whose first tile is <= tileIndex: experts without tiles
  // share their successor's prefix and are skipped by taking the last.
  const int64_t steps = llvm::Log2_64_Ceil(std::max<int64_t>(experts, 2));
  auto search = scf::ForOp::create(b, loc, idx(0), idx(steps), idx(1),
                                   ValueRange{idx(0), idx(experts)});
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(search.getBody());
    Value lo = search.getRegionIterArg(0), hi = search.getRegionIterArg(1);
    Value mid = divC(add(lo, hi), 2);
    Value first = memref::LoadOp::create(b, loc, lds,
                                         ValueRange{add(idx(at.tileScan), mid)});
    Value atOrBefore = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sle,
                                             first, tileIndex);
    scf::YieldOp::create(
        b, loc,
        ValueRange{arith::SelectOp::create(b, loc, atOrBefore, mid, lo),
                   arith::SelectOp::create(b, loc, atOrBefore, hi, mid)});
  }
  out.expert = search.getResult(0);
  Value first = memref::LoadOp::create(
      b, loc, lds, ValueRange{add(idx(at.tileScan), out.expert)});
  out.mTile = toIndex(arith::SubIOp::create(b, loc, tileIndex, first));
  out.count = memref::LoadOp::create(b, loc, lds,
                                     ValueRange{add(idx(at.counts), out.expert)});
  return out;
}

} // namespace moec
