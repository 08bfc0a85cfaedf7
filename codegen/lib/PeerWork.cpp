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
#include "moec/abi/peer_protocol.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;

namespace moec {

Value GemmEmitter::emitPeerWorkList(Value lds, const PeerLds &at,
                                    function_ref<Value(Value)> countOf,
                                    int64_t experts, int64_t fixedCapacity,
                                    int64_t rowsTotal, int64_t nTiles) {
  const int64_t tileM = tile.getM();
  auto store = [&](Value value, int64_t region, Value expert) {
    memref::StoreOp::create(b, loc, value, lds,
                            ValueRange{add(idx(region), expert)});
  };
  auto load = [&](int64_t region, Value expert) {
    return memref::LoadOp::create(b, loc, lds,
                                  ValueRange{add(idx(region), expert)})
        .getResult();
  };
  auto tilesOf = [&](Value count) {
    return arith::DivUIOp::create(
        b, loc, arith::AddIOp::create(b, loc, count, i32(tileM - 1)),
        i32(tileM));
  };
  // Counts, one expert per lane. A fixed-slot expert's count keeps growing
  // past its capacity when routes overflow: cap it.
  auto loop = scf::ForOp::create(b, loc, tid, idx(experts), idx(lanes));
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value expert = loop.getInductionVar();
    Value count = arith::MaxSIOp::create(b, loc, countOf(expert), i32(0));
    if (fixedCapacity > 0) {
      count = arith::MinSIOp::create(b, loc, count, i32(fixedCapacity));
      store(tilesOf(count), at.tileScan, expert);
      store(arith::IndexCastOp::create(b, loc, b.getI32Type(),
                                       mul(expert, fixedCapacity)),
            at.bases, expert);
    }
    store(count, at.counts, expert);
  }
  gpu::BarrierOp::create(b, loc);
  // Thread 0: exclusive scan of the tiles in place (word `experts` gets the
  // total); compact also packs the experts' rows from row 0, cut at
  // rowsTotal (rows past it were never written: the producers counted them
  // as overflow).
  onThreadZero(tid, [&] {
    auto scan = scf::ForOp::create(b, loc, idx(0), idx(experts), idx(1),
                                   ValueRange{i32(0), i32(0)});
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(scan.getBody());
    Value expert = scan.getInductionVar();
    Value tilesBefore = scan.getRegionIterArg(0);
    Value rowsBefore = scan.getRegionIterArg(1);
    Value tiles;
    if (fixedCapacity > 0) {
      tiles = load(at.tileScan, expert);
    } else {
      Value room = arith::MaxSIOp::create(
          b, loc, arith::SubIOp::create(b, loc, i32(rowsTotal), rowsBefore),
          i32(0));
      Value count =
          arith::MinSIOp::create(b, loc, load(at.counts, expert), room);
      store(count, at.counts, expert);
      store(rowsBefore, at.bases, expert);
      tiles = tilesOf(count);
      rowsBefore = arith::AddIOp::create(b, loc, rowsBefore, count);
    }
    store(tilesBefore, at.tileScan, expert);
    scf::YieldOp::create(
        b, loc,
        ValueRange{arith::AddIOp::create(b, loc, tilesBefore, tiles), rowsBefore});
    b.setInsertionPointAfter(scan);
    memref::StoreOp::create(b, loc, scan.getResult(0), lds,
                            ValueRange{idx(at.tileScan + experts)});
  });
  gpu::BarrierOp::create(b, loc);
  Value total = memref::LoadOp::create(b, loc, lds,
                                       ValueRange{idx(at.tileScan + experts)});
  return mul(toIndex(total), nTiles);
}

void GemmEmitter::emitPeerTiles(moe::PeerTransportAttr peer, Value control,
                                Value epoch, Value role, Value lds,
                                const PeerLds &words, int64_t experts,
                                int64_t ep, int64_t nTiles, int64_t stage,
                                function_ref<void(const PeerItem &)> tile) {
  const int64_t rowsTotal = peer.getReceiveRows(experts);
  Value items = emitPeerWorkList(
      lds, words,
      [&](Value expert) {
        return peerReceiveCount(peer, control, epoch, expert, experts, ep);
      },
      experts, peer.isCompact() ? 0 : peer.getCapacity(), rowsTotal, nTiles);
  auto queueWord = [&](Value shard) {
    return bankWord(epoch, peer::queueWord(0, stage, 0, experts, ep),
                    2 * peer::kMaxWorkShards, shard);
  };
  emitPeerWorkLoop(role, items, peer.getWorkgroups(), peer.getWorkShards(),
                   control, queueWord, lds, words, [&](Value index) {
                     tile(decodePeerItem(index, lds, words, experts, nTiles,
                                         rowsTotal));
                   });
}

void GemmEmitter::emitPeerWorkLoop(Value role, Value items, int64_t groups,
                                   int64_t shards, Value control,
                                   function_ref<Value(Value)> queueWord,
                                   Value lds, const PeerLds &at,
                                   function_ref<void(Value)> body) {
  if (shards == 0) {
    auto work = scf::ForOp::create(b, loc, role, items, idx(groups));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(work.getBody());
    body(work.getInductionVar());
    return;
  }
  Value perShard = divC(add(items, idx(shards - 1)), shards);
  auto visit = scf::ForOp::create(b, loc, idx(0), idx(shards), idx(1));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(visit.getBody());
  Value shard = remC(add(role, visit.getInductionVar()), shards);
  Value begin = arith::MinUIOp::create(b, loc, mul(shard, perShard), items);
  Value end = arith::MinUIOp::create(b, loc, add(begin, perShard), items);
  Value count = arith::SubIOp::create(b, loc, end, begin);
  // Thread 0 takes the next ticket of the shard for the whole workgroup.
  auto drain = scf::WhileOp::create(b, loc, TypeRange{b.getIndexType()},
                                    ValueRange{});
  b.createBlock(&drain.getBefore());
  onThreadZero(tid, [&] {
    Value ticket = atomicAddI32(control, queueWord(shard), i32(1));
    memref::StoreOp::create(b, loc, ticket, lds, ValueRange{idx(at.groupWord)});
  });
  gpu::BarrierOp::create(b, loc);
  Value ticket = toIndex(
      memref::LoadOp::create(b, loc, lds, ValueRange{idx(at.groupWord)}));
  // Everyone has read the ticket before thread 0 may write the next one.
  gpu::BarrierOp::create(b, loc);
  Value more =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, ticket, count);
  scf::ConditionOp::create(b, loc, more, ValueRange{ticket});
  Block *after = b.createBlock(&drain.getAfter(), {}, {b.getIndexType()}, {loc});
  body(add(begin, after->getArgument(0)));
  scf::YieldOp::create(b, loc);
}

Value GemmEmitter::bankWord(Value epoch, int64_t region, int64_t bankWords,
                           Value offset) {
  Value bank = toIndex(arith::AndIOp::create(b, loc, epoch, i32(1)));
  return add(add(idx(region), mul(bank, bankWords)), offset);
}

Value GemmEmitter::peerReceiveCount(moe::PeerTransportAttr peer, Value control,
                                    Value epoch, Value expert, int64_t experts,
                                    int64_t ep) {
  if (!peer.isCompact())
    return memref::LoadOp::create(
        b, loc, control,
        ValueRange{bankWord(epoch, peer::kExpertCounts, experts, expert)});
  const int64_t table = peer::sourceCountWord(0, 0, 0, experts, ep);
  Value sum = i32(0);
  for (int64_t source = 0; source < ep; ++source) {
    Value word = bankWord(epoch, table, ep * experts,
                          add(idx(source * experts), expert));
    sum = arith::AddIOp::create(
        b, loc, sum, memref::LoadOp::create(b, loc, control, ValueRange{word}));
  }
  return sum;
}

GemmEmitter::PeerItem GemmEmitter::decodePeerItem(Value item, Value lds,
                                                  const PeerLds &at,
                                                  int64_t experts,
                                                  int64_t nTiles,
                                                  int64_t rowsTotal) {
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
  out.base = memref::LoadOp::create(b, loc, lds,
                                    ValueRange{add(idx(at.bases), out.expert)});
  out.expertI32 =
      arith::IndexCastOp::create(b, loc, b.getI32Type(), out.expert);
  out.colBase = mul(out.nTile, tile.getN());
  out.firstRow = mul(out.mTile, tile.getM());
  out.used = toIndex(out.count);
  out.tileBase = add(toIndex(out.base), out.firstRow);
  out.rowsTotal = rowsTotal;
  return out;
}

Value GemmEmitter::peerReceiveRow(const PeerItem &item, Value row) {
  Value inUse = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult,
                                      add(item.firstRow, row), item.used);
  return arith::SelectOp::create(b, loc, inUse, add(item.tileBase, row),
                                 idx(item.rowsTotal));
}

} // namespace moec
