//===- SortKernel.cpp - moe.sort -> gpu.func ------------------------------===//
///
/// \file
/// The routing sort: one workgroup builds the tile-padded sorted route list.
///
///  1. Count the routes of each local expert (LDS atomics).
///  2. Lane 0 turns the counts into each expert's start (an exclusive scan
///     of the counts rounded up to the M tile) and writes the status.
///  3. Every lane writes tile experts, -1 for unused tiles, and padding.
///  4. Routes are scattered in chunks of one per lane. Inside a chunk a
///     lane's position is its expert's cursor plus the number of earlier
///     lanes with the same expert; the last such lane advances the cursor.
///     This keeps routes of one expert in increasing order: deterministic.
///
/// Loops have uniform bounds (per-lane work is masked with scf.if), so every
/// wave runs the same iterations and reaches the same barriers.
///
//===----------------------------------------------------------------------===//

#include "KernelEmitter.h"
#include "moec/Codegen/KernelBuilders.h"
#include "moec/Dialect/Moe/MoeDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;

namespace moec {
namespace {

constexpr int64_t kRouteIndexedExtent = int64_t(1) << 28;

enum SortArg : unsigned {
  kTopkIds, kSortedRoutes, kTileExperts, kStatus, kNumTokens, kExpertOffset,
  kCapacity, kSortArgCount
};

class SortEmitter : KernelEmitter {
public:
  SortEmitter(OpBuilder &builder, moe::SortOp op)
      : KernelEmitter(builder, op), op(op), problem(op.getProblem()),
        experts(problem.getLocalExperts()),
        lanes(chip.wavefrontSize * op.getWaves()),
        mTile(op.getMTile()) {}

  FailureOr<gpu::GPUModuleOp> emit() {
    SmallVector<Type> argTypes(kSortArgCount);
    argTypes[kTopkIds] = globalBuffer(kRouteIndexedExtent, b.getI32Type());
    argTypes[kSortedRoutes] = globalBuffer(kRouteIndexedExtent, b.getI32Type());
    argTypes[kTileExperts] = globalBuffer(kRouteIndexedExtent, b.getI32Type());
    argTypes[kStatus] = globalBuffer(2, b.getI32Type());
    argTypes[kNumTokens] = b.getI32Type();
    argTypes[kExpertOffset] = b.getI32Type();
    argTypes[kCapacity] = b.getI32Type();
    OpBuilder::InsertionGuard guard(b);
    // LDS: counts[experts], cursor[experts], one expert id per lane, and
    // the used length (shared through LDS, not re-read from global memory).
    FailureOr<gpu::GPUFuncOp> func =
        createKernel(op.getSymName(), argTypes, getSortKernelAbi(op),
                     2 * experts + lanes + 1);
    if (failed(func))
      return failure();
    emitBody(*func);
    return (*func)->getParentOfType<gpu::GPUModuleOp>();
  }

private:
  void emitBody(gpu::GPUFuncOp func);
  /// 1. Each local expert's routes, counted in LDS.
  void emitCounts();
  /// 2. Each expert's start (an exclusive scan of the padded counts) and
  /// the used and needed lengths, by lane 0.
  void emitStarts();
  /// 3. Tile experts and padding entries, one expert per lane; then -1 for
  /// every tile past the used ones.
  void emitTileExperts();
  /// 4. Stable scatter of the routes, one chunk of lanes at a time.
  void emitScatter();
  /// Local expert of route `route`, or -1 when the route is not ours (or
  /// invalid; with shared_last_route also when its id breaks the slot rule).
  Value localExpertOf(Value route);
  /// LDS word `offset` of the region at dword `base`.
  Value ldsAt(int64_t base, Value offset) { return add(idx(base), offset); }
  /// for (base = 0; base < limit; base += lanes) body(base + tid, inRange)
  /// with a uniform trip count; the body sees whether its index is < limit.
  void forEachStrided(Value limit,
                      function_ref<void(Value index, Value inRange)> body);
  /// Emits `then` under scf.if `condition` (no results).
  void when(Value condition, function_ref<void()> then);
  Value ult(Value x, Value y) {
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, x, y);
  }

  moe::SortOp op;
  moe::ProblemAttr problem;
  int64_t experts, lanes, mTile;
  /// LDS: counts[experts], cursor[experts], one expert id per lane, and
  /// the used length.
  int64_t countsBase = 0, cursorBase = 0, idsBase = 0, usedSlot = 0;
  Value tid;
  // Set by emitBody for its steps: the buffers, the LDS, the counts (i32
  // and index), the expert offset and the constants 0 and 1 (i32).
  Value ids, sorted, tileExperts, status, lds;
  Value numRoutesI32, capacityI32, numRoutes, capacity, expertOffset;
  Value zero32, one32;
};

void SortEmitter::forEachStrided(
    Value limit, function_ref<void(Value index, Value inRange)> body) {
  auto loop = scf::ForOp::create(b, loc, idx(0), limit, idx(lanes));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  Value index = add(loop.getInductionVar(), tid);
  body(index, ult(index, limit));
}

void SortEmitter::when(Value condition, function_ref<void()> then) {
  auto ifOp = scf::IfOp::create(b, loc, condition, /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(ifOp.thenBlock());
  then();
}

void SortEmitter::emitBody(gpu::GPUFuncOp func) {
  const int64_t topK = problem.getTopK();
  auto arg = [&](SortArg which) { return func.getArgument(which); };
  Value numTokensI32 = arg(kNumTokens);
  numRoutesI32 = arith::MulIOp::create(b, loc, numTokensI32, i32(topK));
  capacityI32 = arg(kCapacity);
  ids = asBuffer(arg(kTopkIds), bytesOf(numRoutesI32, 4));
  sorted = asBuffer(arg(kSortedRoutes), bytesOf(capacityI32, 4));
  tileExperts =
      asBuffer(arg(kTileExperts),
               bytesOf(arith::DivUIOp::create(b, loc, capacityI32, i32(mTile)), 4));
  status = asBuffer(arg(kStatus), Value());
  lds = func.getWorkgroupAttributions()[0];
  countsBase = 0;
  cursorBase = experts;
  idsBase = 2 * experts;
  usedSlot = 2 * experts + lanes;

  numRoutes = toIndex(numRoutesI32);
  capacity = toIndex(capacityI32);
  expertOffset = arg(kExpertOffset);
  tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
  zero32 = i32(0);
  one32 = i32(1);
  emitCounts();
  emitStarts();
  emitTileExperts();
  emitScatter();
  gpu::ReturnOp::create(b, loc);
}

Value SortEmitter::localExpertOf(Value route) {
  Value id = memref::LoadOp::create(b, loc, ids, ValueRange{route});
  Value local = arith::SubIOp::create(b, loc, id, expertOffset);
  Value isLocal = arith::AndIOp::create(
      b, loc,
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, local, zero32),
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, local,
                            i32(experts)));
  if (op.getSharedLastRoute()) {
    // FHMoE (ep 1, ids global): the last slot of a token takes only the
    // shared id experts - 1, every other slot only ids below it.
    const int64_t topK = problem.getTopK();
    Value isSharedSlot = arith::CmpIOp::create(
        b, loc, arith::CmpIPredicate::eq, remC(route, topK), idx(topK - 1));
    Value isSharedId = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                             id, i32(problem.getExperts() - 1));
    Value slotMatches = arith::CmpIOp::create(
        b, loc, arith::CmpIPredicate::eq, isSharedSlot, isSharedId);
    isLocal = arith::AndIOp::create(b, loc, isLocal, slotMatches);
  }
  return arith::SelectOp::create(b, loc, isLocal, local, i32(-1));
}

void SortEmitter::emitCounts() {
  forEachStrided(idx(experts), [&](Value e, Value inRange) {
    when(inRange, [&] {
      memref::StoreOp::create(b, loc, zero32, lds,
                              ValueRange{ldsAt(countsBase, e)});
    });
  });
  gpu::BarrierOp::create(b, loc);
  forEachStrided(numRoutes, [&](Value route, Value inRange) {
    when(inRange, [&] {
      Value local = localExpertOf(route);
      Value isLocal = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge,
                                            local, zero32);
      when(isLocal, [&] {
        memref::AtomicRMWOp::create(b, loc, arith::AtomicRMWKind::addi, one32,
                                    lds,
                                    ValueRange{ldsAt(countsBase, toIndex(local))});
      });
    });
  });
  gpu::BarrierOp::create(b, loc);
}

void SortEmitter::emitStarts() {
  when(arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, tid, idx(0)),
       [&] {
         auto scan = scf::ForOp::create(b, loc, idx(0), idx(experts), idx(1),
                                        ValueRange{zero32});
         {
           OpBuilder::InsertionGuard g(b);
           b.setInsertionPointToStart(scan.getBody());
           Value e = scan.getInductionVar();
           Value running = scan.getRegionIterArgs()[0];
           memref::StoreOp::create(b, loc, running, lds,
                                   ValueRange{ldsAt(cursorBase, e)});
           Value count = memref::LoadOp::create(b, loc, lds,
                                                ValueRange{ldsAt(countsBase, e)});
           Value padded = arith::MulIOp::create(
               b, loc,
               arith::DivUIOp::create(
                   b, loc, arith::AddIOp::create(b, loc, count, i32(mTile - 1)),
                   i32(mTile)),
               i32(mTile));
           scf::YieldOp::create(b, loc,
                                ValueRange{arith::AddIOp::create(b, loc, running,
                                                                 padded)});
         }
         Value needed = scan.getResult(0);
         Value used = arith::MinUIOp::create(b, loc, needed, capacityI32);
         memref::StoreOp::create(b, loc, used, status, ValueRange{idx(0)});
         memref::StoreOp::create(b, loc, used, lds, ValueRange{idx(usedSlot)});
         memref::StoreOp::create(b, loc, needed, status, ValueRange{idx(1)});
       });
  gpu::BarrierOp::create(b, loc);
}

void SortEmitter::emitTileExperts() {
  Value capacityTiles = divC(capacity, mTile);
  forEachStrided(idx(experts), [&](Value e, Value inRange) {
    when(inRange, [&] {
      Value start = toIndex(memref::LoadOp::create(
          b, loc, lds, ValueRange{ldsAt(cursorBase, e)}));
      Value count = toIndex(memref::LoadOp::create(
          b, loc, lds, ValueRange{ldsAt(countsBase, e)}));
      Value padded = mul(divC(add(count, idx(mTile - 1)), mTile), mTile);
      Value eI32 = arith::IndexCastOp::create(b, loc, b.getI32Type(), e);
      auto tiles = scf::ForOp::create(b, loc, divC(start, mTile),
                                      divC(add(start, padded), mTile), idx(1));
      {
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPointToStart(tiles.getBody());
        when(ult(tiles.getInductionVar(), capacityTiles), [&] {
          memref::StoreOp::create(b, loc, eI32, tileExperts,
                                  ValueRange{tiles.getInductionVar()});
        });
      }
      auto pads = scf::ForOp::create(b, loc, add(start, count),
                                     add(start, padded), idx(1));
      {
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPointToStart(pads.getBody());
        when(ult(pads.getInductionVar(), capacity), [&] {
          memref::StoreOp::create(b, loc, numRoutesI32, sorted,
                                  ValueRange{pads.getInductionVar()});
        });
      }
    });
  });
  Value usedTiles = divC(
      toIndex(memref::LoadOp::create(b, loc, lds, ValueRange{idx(usedSlot)})),
      mTile);
  auto unused = scf::ForOp::create(b, loc, usedTiles, capacityTiles, idx(lanes));
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(unused.getBody());
    Value tile = add(unused.getInductionVar(), tid);
    when(ult(tile, capacityTiles), [&] {
      memref::StoreOp::create(b, loc, i32(-1), tileExperts, ValueRange{tile});
    });
  }
  gpu::BarrierOp::create(b, loc);
}

void SortEmitter::emitScatter() {
  forEachStrided(numRoutes, [&](Value route, Value inRange) {
    Value local = arith::SelectOp::create(
        b, loc, inRange,
        // Out-of-range lanes read past the ids' valid bytes: zero, masked
        // by the select.
        localExpertOf(route), i32(-1));
    memref::StoreOp::create(b, loc, local, lds, ValueRange{ldsAt(idsBase, tid)});
    gpu::BarrierOp::create(b, loc);
    // Same-expert lanes before and after this one.
    auto count = scf::ForOp::create(b, loc, idx(0), idx(lanes), idx(1),
                                    ValueRange{zero32, zero32});
    {
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(count.getBody());
      Value j = count.getInductionVar();
      Value other = memref::LoadOp::create(b, loc, lds,
                                           ValueRange{ldsAt(idsBase, j)});
      Value same = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                         other, local);
      Value earlier = arith::AndIOp::create(b, loc, same, ult(j, tid));
      Value later = arith::AndIOp::create(
          b, loc, same,
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ugt, j, tid));
      auto bump = [&](Value flag, Value counter) {
        return arith::AddIOp::create(
            b, loc, counter,
            arith::ExtUIOp::create(b, loc, b.getI32Type(), flag));
      };
      scf::YieldOp::create(
          b, loc,
          ValueRange{bump(earlier, count.getRegionIterArgs()[0]),
                     bump(later, count.getRegionIterArgs()[1])});
    }
    Value before = count.getResult(0), after = count.getResult(1);
    Value isLocal =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, local, zero32);
    Value localIndex = toIndex(arith::MaxSIOp::create(b, loc, local, zero32));
    Value cursorSlot = ldsAt(cursorBase, localIndex);
    when(isLocal, [&] {
      Value cursor = memref::LoadOp::create(b, loc, lds, ValueRange{cursorSlot});
      Value position = toIndex(arith::AddIOp::create(b, loc, cursor, before));
      when(ult(position, capacity), [&] {
        Value routeI32 = arith::IndexCastOp::create(b, loc, b.getI32Type(), route);
        memref::StoreOp::create(b, loc, routeI32, sorted, ValueRange{position});
      });
    });
    // Everyone has read the cursors (and the ids) before any moves.
    gpu::BarrierOp::create(b, loc);
    Value last = arith::AndIOp::create(
        b, loc, isLocal,
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, after, zero32));
    when(last, [&] {
      Value cursor = memref::LoadOp::create(b, loc, lds, ValueRange{cursorSlot});
      Value next = arith::AddIOp::create(
          b, loc, cursor, arith::AddIOp::create(b, loc, before, one32));
      memref::StoreOp::create(b, loc, next, lds, ValueRange{cursorSlot});
    });
    gpu::BarrierOp::create(b, loc);
  });
}

} // namespace

KernelAbi getSortKernelAbi(moe::SortOp op) {
  using K = KernelArg::Kind;
  using A = KernelArg::Access;
  KernelAbi abi;
  abi.args = {
      {"topk_ids", K::Buffer, "i32", A::Read, "[num_tokens, top_k]"},
      {"sorted_routes", K::Buffer, "i32", A::Write, "[capacity]"},
      {"tile_experts", K::Buffer, "i32", A::Write, "[capacity/m_tile]"},
      {"status", K::Buffer, "i32", A::Write, "[2]: num_sorted, needed"},
      {"num_tokens", K::I32, "i32", A::Read, "scalar"},
      {"expert_offset", K::I32, "i32", A::Read, "scalar: first local expert"},
      {"capacity", K::I32, "i32", A::Read, "scalar (multiple of m_tile)"},
  };
  abi.gridX = "1";
  abi.gridY = "1";
  abi.gridZ = "1";
  abi.workgroupSize = static_cast<unsigned>(
      moe::getVerifiedTarget(op).wavefrontSize * op.getWaves());
  return abi;
}

FailureOr<gpu::GPUModuleOp> buildSortKernel(OpBuilder &builder, moe::SortOp op) {
  return SortEmitter(builder, op).emit();
}

} // namespace moec
