//===- PeerDispatch.cpp - the producers of the fused stage 1 --------------===//
///
/// \file
/// The dispatch of the fused MegaMoE stage 1 (`#moe.peer`, peer_protocol.h):
/// producer workgroups copy this rank's routes (FP8 row, scales, routing
/// weight, source route) into the receive rows of their destination ranks
/// and signal each destination. With the compact transport, planners first
/// count the routes per destination expert and publish the counts, and each
/// producer computes where its rows start. The first producer also clears
/// the control banks the next launch uses. W13Kernel.cpp runs this in the
/// producer role (dispatch = fused) or as the whole kernel (dispatch =
/// only); docs/families.md tells the protocol.
///
//===----------------------------------------------------------------------===//

#include "GemmEmitter.h"
#include "moec/abi/peer_protocol.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;

namespace moec {

/// What the steps of emitPeerDispatch share: its arguments, the layout of
/// the control words and the small builders they all use.
struct GemmEmitter::DispatchState {
  GemmEmitter &g;
  const PeerDispatchArgs &args;
  const PeerLds &words;
  Value role;
  /// lane == 0, emitted once before every step.
  Value isLaneZero;
  int64_t experts, ep, allExperts;
  /// First words of the compact source-count table and of the cursors.
  int64_t tableWord, cursorRegion;
  bool compact;
  /// The LDS word of this wave's receive slot (set by emitDispatchRoutes).
  Value waveSlot = {};

  /// Emits `body` under scf.if (lane == 0).
  void onLaneZero(function_ref<void()> body) {
    auto ifLane = scf::IfOp::create(g.b, g.loc, isLaneZero, false);
    OpBuilder::InsertionGuard guard(g.b);
    g.b.setInsertionPointToStart(ifLane.thenBlock());
    body();
  }
  /// `body(i)` for i in [tid, count) stepping by the workgroup's lanes.
  void forEachLane(int64_t count, function_ref<void(Value)> body) {
    auto loop = scf::ForOp::create(g.b, g.loc, g.tid, g.idx(count),
                                   g.idx(g.lanes));
    OpBuilder::InsertionGuard guard(g.b);
    g.b.setInsertionPointToStart(loop.getBody());
    body(loop.getInductionVar());
  }
  /// Emits `body` under scf.if (condition).
  void ifThen(Value condition, function_ref<void()> body) {
    auto ifOp = scf::IfOp::create(g.b, g.loc, condition, false);
    OpBuilder::InsertionGuard guard(g.b);
    g.b.setInsertionPointToStart(ifOp.thenBlock());
    body();
  }
  /// The LDS word at `index`.
  Value ldsAt(Value index) {
    return memref::LoadOp::create(g.b, g.loc, args.lds, ValueRange{index})
        .getResult();
  }
  /// Rank `d`'s control words.
  Value controlOf(int64_t d) { return args.peerRegion(args.peerBase(d), 3); }
};

void GemmEmitter::emitPeerDispatch(Value role, const PeerLds &words,
                                   const PeerDispatchArgs &args) {
  const int64_t ep = args.problem.getEp();
  const int64_t experts = args.problem.getLocalExperts();
  Value isLaneZero =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, lane, idx(0));
  DispatchState s{*this,
                  args,
                  words,
                  role,
                  isLaneZero,
                  experts,
                  ep,
                  ep * experts,
                  peer::sourceCountWord(0, 0, 0, experts, ep),
                  peer::cursorWord(0, 0, 0, experts, ep),
                  args.peer.isCompact()};
  Value isFirst =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, role, idx(0));
  Value nextEpoch = arith::AddIOp::create(b, loc, args.epoch, i32(1));
  emitDispatchClear(s, isFirst, nextEpoch);
  if (s.compact) {
    emitDispatchPlan(s);
    emitDispatchStarts(s);
  }
  emitDispatchRoutes(s);
  // Each wave signals every destination once its routes are out; the
  // acquire-release atomic orders the wave's copies before the signal.
  s.onLaneZero([&] {
    for (int64_t d = 0; d < ep; ++d)
      (void)atomicAddI32(s.controlOf(d), idx(peer::kDispatchDone), i32(1));
  });
}

void GemmEmitter::emitDispatchClear(DispatchState &s, Value isFirst,
                                    Value nextEpoch) {
  const int64_t experts = s.experts, ep = s.ep, allExperts = s.allExperts;
  Value control = s.args.control;
  // The first producer clears the banks the next launch uses (their
  // previous use ended with this rank's last stage 2).
  s.ifThen(isFirst, [&] {
    // Both stages' work-queue counters of the next launch.
    s.forEachLane(2 * peer::kMaxWorkShards, [&](Value i) {
      memref::StoreOp::create(
          b, loc, i32(0), control,
          ValueRange{bankWord(nextEpoch, peer::queueWord(0, 0, 0, experts, ep),
                              2 * peer::kMaxWorkShards, i)});
    });
    if (!s.compact) {
      s.forEachLane(experts, [&](Value e) {
        memref::StoreOp::create(
            b, loc, i32(0), control,
            ValueRange{bankWord(nextEpoch, peer::kExpertCounts, experts, e)});
      });
      return;
    }
    s.forEachLane(allExperts, [&](Value i) {
      memref::StoreOp::create(
          b, loc, i32(0), control,
          ValueRange{bankWord(nextEpoch, s.tableWord, allExperts, i)});
      memref::StoreOp::create(
          b, loc, i32(0), control,
          ValueRange{bankWord(nextEpoch, s.cursorRegion, allExperts, i)});
    });
  });
}

void GemmEmitter::emitDispatchPlan(DispatchState &s) {
  // The first `plan_cus` producers each count a slice of this rank's
  // routes per destination expert in LDS and add the counts into every
  // destination's source-count table (zeroed by the previous launch), then
  // signal it, one signal per wave after that wave's adds.
  const PeerDispatchArgs &args = s.args;
  const int64_t experts = s.experts, ep = s.ep, allExperts = s.allExperts;
  const int64_t planners = args.peer.getPlanCus();
  Value lds = args.lds, role = s.role;
  Value isPlanner = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult,
                                          role, idx(planners));
  s.ifThen(isPlanner, [&] {
    s.forEachLane(allExperts, [&](Value i) {
      memref::StoreOp::create(b, loc, i32(0), lds, ValueRange{i});
    });
    gpu::BarrierOp::create(b, loc);
    Value routesTotal = toIndex(args.numRoutesI32);
    Value perPlanner = divC(add(routesTotal, idx(planners - 1)), planners);
    Value sliceBegin =
        arith::MinUIOp::create(b, loc, mul(role, perPlanner), routesTotal);
    Value sliceEnd = arith::MinUIOp::create(
        b, loc, add(sliceBegin, perPlanner), routesTotal);
    auto histogram = scf::ForOp::create(b, loc, add(sliceBegin, tid),
                                        sliceEnd, idx(lanes));
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(histogram.getBody());
      Value id = memref::LoadOp::create(
          b, loc, args.idsBuf, ValueRange{histogram.getInductionVar()});
      Value valid = arith::AndIOp::create(
          b, loc,
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, id, i32(0)),
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, id,
                                i32(allExperts)));
      s.ifThen(valid, [&] {
        (void)memref::AtomicRMWOp::create(b, loc, arith::AtomicRMWKind::addi,
                                          i32(1), lds,
                                          ValueRange{toIndex(id)});
      });
    }
    gpu::BarrierOp::create(b, loc);
    Value rankIndex = toIndex(args.rank);
    for (int64_t d = 0; d < ep; ++d)
      s.forEachLane(experts, [&](Value e) {
        (void)atomicAddI32(
            s.controlOf(d),
            bankWord(args.epoch, s.tableWord, allExperts,
                     add(mul(rankIndex, experts), e)),
            s.ldsAt(add(idx(d * experts), e)));
      });
    s.onLaneZero([&] {
      for (int64_t d = 0; d < ep; ++d)
        (void)atomicAddI32(s.controlOf(d), idx(peer::kCountsReady), i32(1));
    });
    gpu::BarrierOp::create(b, loc);
  });
}

void GemmEmitter::emitDispatchStarts(DispatchState &s) {
  // Once a destination's table is complete (every source's planner waves
  // have signalled it), each producer computes where this rank's rows for
  // each of its experts start: the expert's base (the totals of the experts
  // before it) plus the rows of lower source ranks. LDS words
  // [d * experts + e] get those starts, [allExperts, + experts) the totals.
  const PeerDispatchArgs &args = s.args;
  const int64_t experts = s.experts, ep = s.ep, allExperts = s.allExperts;
  const int64_t planners = args.peer.getPlanCus();
  const int64_t waves = tile.getWaves();
  Value lds = args.lds, epoch = args.epoch, rankI32 = args.rank;
  for (int64_t d = 0; d < ep; ++d) {
    Value destControl = s.controlOf(d);
    emitWaitUntil(tid, destControl, idx(peer::kCountsReady),
                  arith::MulIOp::create(b, loc, epoch,
                                        i32(ep * planners * waves)));
    s.forEachLane(experts, [&](Value e) {
      Value total = i32(0), lower = i32(0);
      for (int64_t source = 0; source < ep; ++source) {
        Value rows = memref::LoadOp::create(
            b, loc, destControl,
            ValueRange{bankWord(epoch, s.tableWord, allExperts,
                                add(idx(source * experts), e))});
        total = arith::AddIOp::create(b, loc, total, rows);
        Value below = arith::CmpIOp::create(
            b, loc, arith::CmpIPredicate::slt, i32(source), rankI32);
        lower = arith::AddIOp::create(
            b, loc, lower,
            arith::SelectOp::create(b, loc, below, rows, i32(0)));
      }
      memref::StoreOp::create(b, loc, total, lds,
                              ValueRange{add(idx(allExperts), e)});
      memref::StoreOp::create(b, loc, lower, lds,
                              ValueRange{add(idx(d * experts), e)});
    });
    gpu::BarrierOp::create(b, loc);
    onThreadZero(tid, [&] {
      auto scan = scf::ForOp::create(b, loc, idx(0), idx(experts), idx(1),
                                     ValueRange{i32(0)});
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(scan.getBody());
      Value e = scan.getInductionVar();
      Value at = add(idx(d * experts), e);
      Value before = scan.getRegionIterArg(0);
      memref::StoreOp::create(
          b, loc, arith::AddIOp::create(b, loc, s.ldsAt(at), before), lds,
          ValueRange{at});
      scf::YieldOp::create(
          b, loc,
          ValueRange{arith::AddIOp::create(
              b, loc, before, s.ldsAt(add(idx(allExperts), e)))});
    });
    gpu::BarrierOp::create(b, loc);
  }
}

void GemmEmitter::emitDispatchRoutes(DispatchState &s) {
  // One wave per route: lane 0 takes the receive row with an atomic, every
  // lane copies 16-byte chunks of the row (emitRouteToRank). A wave takes
  // `chunk_routes` consecutive routes at a time (consecutive token rows),
  // then strides over the producers' waves.
  const PeerDispatchArgs &args = s.args;
  const int64_t experts = s.experts, ep = s.ep;
  const int64_t waves = tile.getWaves();
  const int64_t producers = args.peer.getDispatchCus();
  const int64_t topK = args.problem.getTopK();
  const int64_t routesPerRank = args.peer.getMaxTokens() * topK;
  const int64_t chunk = args.peer.getChunkRoutes();
  s.waveSlot = add(idx(s.words.waveWords), wave);
  Value routesTotal = toIndex(args.numRoutesI32);
  Value firstRoute = mul(add(mul(s.role, waves), wave), chunk);
  OpBuilder::InsertionGuard guard(b);
  scf::ForOp routes;
  if (chunk == 1) {
    routes = scf::ForOp::create(b, loc, firstRoute, routesTotal,
                                idx(producers * waves));
  } else {
    auto chunks = scf::ForOp::create(b, loc, firstRoute, routesTotal,
                                     idx(producers * waves * chunk));
    b.setInsertionPointToStart(chunks.getBody());
    Value chunkEnd = arith::MinUIOp::create(
        b, loc, add(chunks.getInductionVar(), idx(chunk)), routesTotal);
    routes = scf::ForOp::create(b, loc, chunks.getInductionVar(), chunkEnd,
                                idx(1));
  }
  b.setInsertionPointToStart(routes.getBody());
  Value route = routes.getInductionVar();
  Value id = memref::LoadOp::create(b, loc, args.idsBuf, ValueRange{route});
  // Invalid ids (negative, or past every rank's experts) go nowhere.
  Value valid = arith::AndIOp::create(
      b, loc,
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, id, i32(0)),
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, id,
                            i32(ep * experts)));
  auto ifValid = scf::IfOp::create(b, loc, valid, false);
  b.setInsertionPointToStart(ifValid.thenBlock());
  Value dest = arith::DivUIOp::create(b, loc, id, i32(experts));
  Value expert = toIndex(arith::RemUIOp::create(b, loc, id, i32(experts)));
  Value token = divC(route, topK);
  Value weight =
      memref::LoadOp::create(b, loc, args.weightsBuf, ValueRange{route});
  Value source = arith::AddIOp::create(
      b, loc,
      arith::MulIOp::create(b, loc, args.rank, i32(routesPerRank)),
      arith::AddIOp::create(
          b, loc,
          arith::IndexCastOp::create(b, loc, b.getI32Type(), route), i32(1)));
  // The destination's base, selected by the route's destination (the
  // same on every lane of the wave): one copy path for every rank, whose
  // region pointers are computed per route, so that only the ep bases
  // stay in scalar registers through the loop.
  Value destBase = args.peerBase(ep - 1);
  for (int64_t d = ep - 2; d >= 0; --d)
    destBase = arith::SelectOp::create(
        b, loc,
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, dest, i32(d)),
        args.peerBase(d), destBase);
  emitRouteToRank(s, dest, destBase, expert, token, weight, source);
}

void GemmEmitter::emitRouteToRank(DispatchState &s, Value dest, Value destBase,
                                  Value expert, Value token, Value weight,
                                  Value source) {
  const PeerDispatchArgs &args = s.args;
  const int64_t hidden = args.problem.getHidden();
  const int64_t experts = s.experts, allExperts = s.allExperts;
  const int64_t capacity = args.peer.getCapacity();
  const int64_t rowsTotal = args.peer.getReceiveRows(experts);
  const bool compact = s.compact;
  Value lds = args.lds, epoch = args.epoch, waveSlot = s.waveSlot;
  Value destControl = args.peerRegion(destBase, 3);
  // This rank's rows for (dest, expert): word dest * experts + expert of
  // the cursors (and of the starts in LDS).
  Value destExpert = add(mul(toIndex(dest), experts), expert);
  // Lane 0 takes the receive row: fixed slot, on the destination's expert
  // count; compact, on this rank's cursor for the destination expert,
  // added to the start emitDispatchStarts computed.
  s.onLaneZero([&] {
    Value slot =
        compact
            ? atomicAddI32(args.control,
                           bankWord(epoch, s.cursorRegion, allExperts,
                                    destExpert),
                           i32(1))
            : atomicAddI32(destControl,
                           bankWord(epoch, peer::kExpertCounts, experts,
                                    expert),
                           i32(1));
    memref::StoreOp::create(b, loc, slot, lds, ValueRange{waveSlot});
  });
  Value slot = memref::LoadOp::create(b, loc, lds, ValueRange{waveSlot});
  // Fixed slot: the expert's rows are [e * capacity, (e + 1) * capacity);
  // compact: this rank's start for the expert plus the slot, below the
  // rank's receive rows.
  Value rowI32 =
      compact ? arith::AddIOp::create(b, loc, s.ldsAt(destExpert), slot)
                    .getResult()
              : arith::AddIOp::create(
                    b, loc,
                    arith::IndexCastOp::create(b, loc, b.getI32Type(),
                                               mul(expert, capacity)),
                    slot)
                    .getResult();
  Value fits = compact
                   ? arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt,
                                           rowI32, i32(rowsTotal))
                         .getResult()
                   : arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt,
                                           slot, i32(capacity))
                         .getResult();
  auto ifFits = scf::IfOp::create(b, loc, fits, /*withElseRegion=*/true);
  b.setInsertionPointToStart(ifFits.thenBlock());
  Value row = toIndex(rowI32);
  // Plain global stores (the row is in range: `fits`), so that no buffer
  // descriptor is built per destination.
  Value recvA = args.peerRegion(destBase, 0);
  auto copy = scf::ForOp::create(b, loc, lane, idx(hidden / 16),
                                 idx(chip.wavefrontSize));
  {
    OpBuilder::InsertionGuard inCopy(b);
    b.setInsertionPointToStart(copy.getBody());
    Value chunk = mul(copy.getInductionVar(), 4);
    store16(load16(args.aBuf, add(mul(token, hidden / 4), chunk)), recvA,
            add(mul(row, hidden / 4), chunk));
  }
  // Scales: 4 bytes per lane.
  auto i8x4 = VectorType::get({4}, b.getI8Type());
  Value recvScale = args.peerRegion(destBase, 1);
  auto copyScales = scf::ForOp::create(b, loc, lane, idx(hidden / 128),
                                       idx(chip.wavefrontSize));
  {
    OpBuilder::InsertionGuard inCopy(b);
    b.setInsertionPointToStart(copyScales.getBody());
    Value at = mul(copyScales.getInductionVar(), 4);
    Value bytes = vector::LoadOp::create(
        b, loc, i8x4, args.aScaleBuf,
        ValueRange{add(mul(token, hidden / 32), at)});
    vector::StoreOp::create(b, loc, bytes, recvScale,
                            ValueRange{add(mul(row, hidden / 32), at)});
  }
  Value meta = args.peerRegion(destBase, 2);
  s.onLaneZero([&] {
    Value weightBits = arith::BitcastOp::create(b, loc, b.getI32Type(), weight);
    memref::StoreOp::create(b, loc, weightBits, meta,
                            ValueRange{mul(row, peer::kMetaWords)});
    memref::StoreOp::create(b, loc, source, meta,
                            ValueRange{add(mul(row, peer::kMetaWords), idx(1))});
  });
  // A full expert: counted on the destination, never silently lost.
  b.setInsertionPointToStart(ifFits.elseBlock());
  s.onLaneZero([&] {
    (void)atomicAddI32(destControl, idx(peer::kOverflow), i32(1));
  });
}

} // namespace moec
