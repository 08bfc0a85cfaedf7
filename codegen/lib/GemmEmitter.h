//===- GemmEmitter.h - shared machinery of the scaled-MFMA stages -*- C++ -*-===//
///
/// \file
/// W13 and W2 are the same GEMM with different operands and epilogues: FP8
/// or MXFP4 rows (gathered by route or token) times the packed E2M1 rows of
/// one expert, staged through LDS with 16-byte buffer loads and multiplied with
/// the gfx950 scaled MFMA in the lane layout of moec/target/mfma_layout.h.
/// This emitter holds that GEMM; each stage adds its arguments and epilogue.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_CODEGEN_LIB_GEMMEMITTER_H
#define MOEC_CODEGEN_LIB_GEMMEMITTER_H

#include "KernelEmitter.h"
#include "moec/target/mfma_layout.h"
#include "moec/Dialect/Moe/MoeDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

#include <string>

namespace moec {

/// Static extent (elements) of buffers indexed by route or token: the real
/// bound comes from the validBytes of the buffer descriptor.
constexpr int64_t kRouteIndexedExtent = int64_t(1) << 28;

/// The GEMM stages read FP8, MXFP4 or (A16W4) BF16 A rows; BF16 A rows are
/// lowered for the route-list stages with routed experts only: a peer
/// transport or an FP8 shared expert with them is refused with a message.
inline mlir::LogicalResult refuseUnscaledActivations(mlir::Operation *op,
                                                     moe::ProblemAttr problem,
                                                     bool peerOrShared) {
  if (problem.getActivationFormat() != moe::ActivationFormat::bf16 ||
      !peerOrShared)
    return mlir::success();
  return op->emitOpError("BF16 activations (A16W4) are lowered without peer "
                         "and shared_fp8_expert only");
}

/// The scaled-MFMA GEMM shared by W13 and W2.
class GemmEmitter : public KernelEmitter {
public:
  GemmEmitter(mlir::OpBuilder &builder, mlir::Operation *op, moe::TileAttr tile);

  /// Global-to-LDS copy of one operand tile: per copy slot of a lane, the
  /// global dword index at K = 0 and the LDS dword index.
  struct CopySlot {
    mlir::Value globalDword;
    mlir::Value ldsDword;
    /// Null when every lane has work in this slot.
    mlir::Value active;
    /// With a direct (LDS DMA) plan: the LDS dword index of the first chunk
    /// of this lane's wave, i.e. lane 0's `ldsDword`, the same for every
    /// lane of the wave. Null otherwise.
    mlir::Value ldsWaveDword;
  };

  /// Everything the K loop reads. Row indices are per lane (index values).
  struct GemmOperands {
    mlir::Value aBuffer, aScaleBuffer, bBuffer, bScaleBuffer;
    /// One LDS buffer of i32; the A tile starts at dword ldsADword, the B
    /// tile (tile.k / 2 bytes per row, tile.k for FP8) at ldsBDword.
    mlir::Value lds;
    int64_t ldsADword = 0, ldsBDword = 0;
    llvm::SmallVector<CopySlot> aSlots, bSlots;
    /// Per M fragment: the lane's row in the A tile and the byte index of
    /// its scale row (scale of block b at aScaleRow + b).
    llvm::SmallVector<mlir::Value> aTileRow, aScaleRow;
    /// Per B fragment: the lane's row in the B tile and its scale row.
    llvm::SmallVector<mlir::Value> bTileRow, bScaleRow;
    /// Per B fragment, for tile.b_direct: the dword index of the lane's
    /// weight row at K = 0 in bBuffer.
    llvm::SmallVector<mlir::Value> bRowDword;
    /// Reduction range [kBegin, kEnd) when both are set, else [0, depth).
    mlir::Value kBegin, kEnd;
    int64_t depth = 0;
    /// K tail: when tile.k does not divide the depth, depth mod tile.k (a
    /// multiple of 128, the verifier's rule), reduced after the whole steps
    /// by one step of this width at K = depth - tailK, with the copy slots
    /// aTailSlots and bTailSlots (planned for rows of tailK). A range
    /// [kBegin, kEnd) takes the tail when kEnd passes depth - tailK.
    int64_t tailK = 0;
    llvm::SmallVector<CopySlot> aTailSlots, bTailSlots;
    bool bNontemporal = false;
    /// B rows are FP8 E4M3 (an FHMoE shared expert) instead of packed E2M1.
    bool bFp8 = false;
  };

  /// Emits the K loop and returns the accumulators after it, indexed
  /// [mFragment * bFragments + bFragment]. Each holds the MFMA's
  /// source-A x source-B block: activations x weights for a_major, weights
  /// x activations for b_major (see accRow/accCol of mfma_layout.h).
  llvm::SmallVector<mlir::Value> emitKLoop(const GemmOperands &operands);

  /// The GEMM of a stage that may have an FP8 shared expert: without
  /// `isShared` (null) it is emitKLoop(makeOperands(false)); otherwise an
  /// scf.if picks, for the whole workgroup, the FP8 or the E2M1 K loop.
  /// `accCount` is the number of accumulators either loop returns.
  llvm::SmallVector<mlir::Value>
  emitGemm(mlir::Value isShared, size_t accCount,
           llvm::function_ref<GemmOperands(bool bFp8)> makeOperands);

  /// Copy slots for `rows` rows of `chunksPerRow` 16-byte chunks spread over
  /// all lanes; `globalRowDword(row)` gives a row's dword index at K = 0.
  /// Slot s gives thread t chunk s * lanes + t, and chunk c lies at LDS
  /// dword ldsBaseDword + 4 c (before the swizzle), so the 64 lanes of a
  /// wave fill 64 consecutive chunks in lane order. `direct` (tile.async_a,
  /// not with `swizzle`) also sets each slot's ldsWaveDword, the base an
  /// LDS DMA (amdgpu.gather_to_lds) writes the wave's chunks from.
  llvm::SmallVector<CopySlot>
  planCopy(int64_t rows, int64_t chunksPerRow,
           llvm::function_ref<mlir::Value(mlir::Value row)> globalRowDword,
           int64_t ldsBaseDword, bool swizzle = false, bool direct = false);

  // The tile schedule (TileSchedule.cpp).

  /// The (N tile, M tile) this workgroup computes. With tile.xcd_swizzle
  /// the linear block id is renumbered so that the hardware's round-robin
  /// over XCDs gives each XCD a contiguous run of tiles, then tile.group_m
  /// orders it in groups of M tiles; `nTiles` is the
  /// constant grid width, `mTilesI32` the runtime number of M tiles. With
  /// tile.persist_cu the builder is left inside a loop over this
  /// workgroup's M tiles, and the function's gpu.return follows the loop.
  std::pair<mlir::Value, mlir::Value> emitTileIds(int64_t nTiles,
                                                  mlir::Value mTilesI32);
  /// tile.xcd_swizzle's renumbering of the linear block id among `total`
  /// workgroups (the plain id when `total` is not a multiple of the XCDs).
  mlir::Value emitXcdRenumbering(mlir::Value linear, mlir::Value total);
  /// The persistent tile loop with tile.persist_skew: workgroup row `y`
  /// visits its own tiles starting at (y * skew) mod their count.
  std::pair<mlir::Value, mlir::Value> emitSkewedTileLoop(mlir::Value nTile,
                                                         mlir::Value y,
                                                         mlir::Value tiles,
                                                         int64_t persist,
                                                         int64_t skew);
  /// Ends the body of one tile: with tile.persist_cu a barrier, because the
  /// workgroup's next tile reuses the LDS.
  void emitEndOfTile();

  // The work of the fused (peer) stages (PeerWork.cpp).

  /// Where a peer stage keeps its work list in LDS (dword offsets): the
  /// received count and first receive row per local expert, the exclusive
  /// prefix of their M tiles (experts + 1 words), then one word per wave
  /// and one for the workgroup to broadcast atomics' results.
  struct PeerLds {
    int64_t counts = 0, bases = 0, tileScan = 0, waveWords = 0, groupWord = 0;
    /// The layout from dword `base`; the ops' getPeerLdsBytes() sizes it.
    static PeerLds at(int64_t base, int64_t experts, int64_t waves) {
      return {base, base + experts, base + 2 * experts,
              base + 3 * experts + 1, base + 3 * experts + 1 + waves};
    }
  };
  /// One item of a peer stage's work: an M tile of one expert's receive
  /// rows (`count` of them used, the first at `base`) by one N tile.
  struct PeerItem {
    mlir::Value expert, mTile, nTile, count, base;
    /// The same, ready for a tile body: expert as i32, first output column,
    /// first row of the tile among the expert's rows, the expert's used
    /// rows and the tile's first receive row (index values).
    mlir::Value expertI32, colBase, firstRow, used, tileBase;
    /// Receive rows of the rank: the out-of-range row for unused rows.
    int64_t rowsTotal = 0;
  };
  /// Builds the work list in LDS from `countOf(expert)` (an i32 per local
  /// expert): with `fixedCapacity` > 0 expert e's rows start at e x
  /// fixedCapacity and at most that many count; with 0 (compact) they are
  /// packed in expert order from row 0 and cut at `rowsTotal`. Returns the
  /// number of work items (index): non-empty M tiles times `nTiles`. Ends
  /// with a barrier.
  mlir::Value emitPeerWorkList(mlir::Value lds, const PeerLds &at,
                               llvm::function_ref<mlir::Value(mlir::Value)> countOf,
                               int64_t experts, int64_t fixedCapacity,
                               int64_t rowsTotal, int64_t nTiles);
  /// The work of a peer GEMM stage (`stage` 0: W13, 1: W2): builds the work
  /// list from this rank's receive counts for launch `epoch`, then runs
  /// `tile(item)` for each item this workgroup takes, statically from
  /// `role` or from the stage's work queue (peer.work_shards).
  void emitPeerTiles(moe::PeerTransportAttr peer, mlir::Value control,
                     mlir::Value epoch, mlir::Value role, mlir::Value lds,
                     const PeerLds &words, int64_t experts, int64_t ep,
                     int64_t nTiles, int64_t stage,
                     llvm::function_ref<void(const PeerItem &)> tile);
  /// What the dispatch of the fused stage 1 reads and writes.
  struct PeerDispatchArgs {
    moe::PeerTransportAttr peer;
    moe::ProblemAttr problem;
    /// The workgroup's LDS, this rank's control buffer and its rank (i32).
    mlir::Value lds, control, rank;
    /// This rank's token rows and scales, top-k ids and weights (raw
    /// buffers), its routes (i32) and the launch epoch (i32).
    mlir::Value aBuf, aScaleBuf, idsBuf, weightsBuf, numRoutesI32, epoch;
    /// Rank `rank`'s symmetric buffer (the base argument).
    llvm::function_ref<mlir::Value(int64_t rank)> peerBase;
    /// Region `kind` of the symmetric buffer `base` (a view made where it
    /// is called): 0 receive rows, 1 receive scales, 2 receive metadata,
    /// 3 control.
    llvm::function_ref<mlir::Value(mlir::Value base, unsigned kind)>
        peerRegion;
  };
  /// Stage 1's producer role (PeerDispatch.cpp): with the compact transport
  /// plans where this rank's rows go, copies this rank's routes into their
  /// destinations' receive rows and signals each destination; the first
  /// producer (`role` 0) clears the banks the next launch uses.
  void emitPeerDispatch(mlir::Value role, const PeerLds &words,
                        const PeerDispatchArgs &args);
  /// Runs `body(item)` (an index) over this workgroup's share of `items`:
  /// with `shards` = 0 the items role, role + groups, ...; otherwise a
  /// dynamic queue of `shards` shards whose counters are the control words
  /// `queueWord(s)` (index), starting at shard role mod shards. The builder
  /// ends after the loops.
  void emitPeerWorkLoop(mlir::Value role, mlir::Value items, int64_t groups,
                        int64_t shards, mlir::Value control,
                        llvm::function_ref<mlir::Value(mlir::Value)> queueWord,
                        mlir::Value lds, const PeerLds &at,
                        llvm::function_ref<void(mlir::Value)> body);
  /// Index of word `offset` in the bank that launch `epoch` (i32) uses of a
  /// two-bank control region at word `region` with `bankWords` per bank.
  mlir::Value bankWord(mlir::Value epoch, int64_t region, int64_t bankWords,
                       mlir::Value offset);
  /// The rows this rank receives for local `expert` in launch `epoch`
  /// (i32): its fixed-slot counter, or the sum of the compact source-count
  /// table's column over the `ep` source ranks.
  mlir::Value peerReceiveCount(moe::PeerTransportAttr peer, mlir::Value control,
                               mlir::Value epoch, mlir::Value expert,
                               int64_t experts, int64_t ep);
  /// Decodes work item `item` (N tile fastest, so consecutive workgroups
  /// share activation rows) with a binary search of the tile scan.
  PeerItem decodePeerItem(mlir::Value item, mlir::Value lds,
                          const PeerLds &at, int64_t experts, int64_t nTiles,
                          int64_t rowsTotal);
  /// The receive row of tile row `row` (index) of `item`; rows past the
  /// expert's count give rowsTotal, past every buffer's valid bytes, so
  /// they read zeros and write nothing.
  mlir::Value peerReceiveRow(const PeerItem &item, mlir::Value row);

  /// Function attributes the tile asks for (waves_per_eu).
  void applyTileHints(mlir::gpu::GPUFuncOp func);

  /// tile.k_waves > 1: adds the wave groups' accumulators of emitKLoop in
  /// increasing group order (deterministic) through LDS, `accs` of groups
  /// 1.. written from dword `baseDword` ((k_waves - 1) x accs.size() x
  /// accPerLane x groupLanes dwords), then runs `body(sums)` in group 0
  /// only. Every wave of the workgroup must reach it (it has a barrier);
  /// `body` must not. With one group it is `body(accs)`.
  void reduceKGroups(llvm::ArrayRef<mlir::Value> accs, mlir::Value lds,
                     int64_t baseDword,
                     llvm::function_ref<void(llvm::ArrayRef<mlir::Value>)> body);

  /// A per-column FP32 bias in the layout of one accumulator of emitKLoop:
  /// value a of the lane's vector<accPerLane x f32> is element `first +
  /// fragCol + c` of the f32 buffer `bias`, c being the value's output
  /// column within the fragment (the weight row: accRow(a) for b_major,
  /// accCol for a_major). `fragCol` is the fragment's first column in the
  /// tile and `first` the element of the tile's column 0 (index values).
  mlir::Value loadColumnBias(mlir::Value bias, mlir::Value first,
                             mlir::Value fragCol);

  // What W13 and W2 build alike around the GEMM (GemmEmitter.cpp).

  /// Creates the kernel `name` as KernelEmitter::createKernel does, applies
  /// the tile's hints, lets `body` fill it and returns its module; the
  /// builder is back where it was.
  mlir::FailureOr<mlir::gpu::GPUModuleOp>
  emitKernel(llvm::StringRef name, llvm::ArrayRef<mlir::Type> argTypes,
             const KernelAbi &abi, int64_t ldsDwords,
             llvm::function_ref<void(mlir::gpu::GPUFuncOp)> body);
  /// The argument types of a route-list GEMM stage in ABI order: A codes
  /// and scales, the routed experts' E2M1 weights and scales
  /// (`expertWeights` = rows x depth elements per expert), sorted routes,
  /// tile experts, then `rest` (outputs and scalars); with `shared` the
  /// shared expert's FP8 weights and scales; with `biasColumns` > 0 the f32
  /// bias, that many columns per local expert.
  llvm::SmallVector<mlir::Type>
  routeListArgTypes(moe::ProblemAttr problem, bool shared,
                    int64_t expertWeights, llvm::ArrayRef<mlir::Type> rest,
                    int64_t biasColumns);
  /// The types of the routed experts' E2M1 weights and of their scales,
  /// `expertWeights` = rows x depth elements per expert.
  std::pair<mlir::Type, mlir::Type>
  expertWeightTypes(moe::ProblemAttr problem, bool shared,
                    int64_t expertWeights);
  /// The type of a rank's control buffer in a peer stage.
  mlir::Type peerControlType(moe::ProblemAttr problem);

  /// What the GEMM of one tile of W13 or W2 reads.
  struct ExpertTile {
    /// Local expert (index and i32) and the tile's first output column.
    mlir::Value expert, expertI32, colBase;
    /// Per tile row (index): the A row to read; past-the-end rows give an
    /// out-of-range row, so their loads read zero.
    llvm::function_ref<mlir::Value(mlir::Value)> aRow;
    mlir::Value aBuf, aScaleBuf, lds;
    /// Weight and scale arguments (the shared expert's may be null).
    mlir::Value b, bScale, bShared, bSharedScale;
    /// The reduction range of GemmOperands (null: the whole depth).
    mlir::Value kBegin, kEnd;

    /// Takes the expert and first column of a peer stage's work item.
    void setItem(const PeerItem &item) {
      expert = item.expert;
      expertI32 = item.expertI32;
      colBase = item.colBase;
    }
  };
  /// The lane's A row (rows.aRow) of each M fragment.
  llvm::SmallVector<mlir::Value> fragmentARows(const ExpertTile &rows);
  /// GemmOperands with what W13 and W2 set alike for a reduction of `depth`:
  /// the buffers (the shared expert's FP8 weights with `bFp8`), the LDS
  /// placement (A tile first, B tile after it), the B cache policy.
  GemmOperands beginGemmOperands(const ExpertTile &rows, bool bFp8,
                                 int64_t depth);
  /// The A tile's copy slots: tile.m rows of stepK elements out of rows
  /// of `depth` (FP8 bytes; half with aFp4, twice with aBf16).
  llvm::SmallVector<CopySlot> planACopy(const ExpertTile &rows, int64_t depth);
  /// Appends the A fragments' tile rows and scale rows (`fragARow` from
  /// fragmentARows) for a reduction of `depth`.
  void addAFragments(GemmOperands &ops, llvm::ArrayRef<mlir::Value> fragARow,
                     int64_t depth);
  /// emitGemm for a tile of `rows.expertI32`: with `shared` the last of
  /// `localExperts` is the FP8 shared expert.
  llvm::SmallVector<mlir::Value>
  emitExpertGemm(const ExpertTile &rows, bool shared, int64_t localExperts,
                 size_t accCount,
                 llvm::function_ref<GemmOperands(bool bFp8)> makeOperands);
  /// Walks accumulator-layout values four at a time: for M fragment mi and
  /// N fragment ni, `fragment(mi, ni)` gives the lane's
  /// vector<accPerLane> (emitted before the fragment's first tile column
  /// fragCol = waveCol + ni * dim); then `body(mi, fragCol, rowOfFour,
  /// quad)` gets each run of four values a..a+3. For b_major they are four
  /// consecutive columns fragCol + rowOfFour of tile row laneRow + mi * dim;
  /// for a_major four rows rowOfFour + mi * dim + j of column fragCol +
  /// laneRow.
  void forEachAccQuad(
      int64_t mFrags, int64_t nFrags, mlir::Value waveCol,
      llvm::function_ref<mlir::Value(int64_t mi, int64_t ni)> fragment,
      llvm::function_ref<void(int64_t mi, mlir::Value fragCol,
                              mlir::Value rowOfFour, mlir::Value quad)>
          body);
  /// Runs `body(item)` (an index) for items [0, count) spread over the
  /// workgroup's lanes, item tid + k * lanes; the last round leaves out
  /// the lanes past `count`.
  void forEachLaneItem(int64_t count, llvm::function_ref<void(mlir::Value)> body);

protected:
  /// Loads an FP8 MFMA fragment: the runs of the FP8 lane layout, each 16
  /// bytes of the row starting at `rowDword` (rows of tile.k bytes in LDS;
  /// with tile.b_direct the weight row in global memory, `nontemporal` its
  /// cache policy). `swizzleRow` (may be null) is the tile row when chunks
  /// are XOR-swizzled.
  mlir::Value loadFp8Fragment(mlir::Value memref, mlir::Value rowDword,
                              int64_t kOffset, mlir::Value swizzleRow,
                              bool nontemporal = false);
  // The steps of emitKLoop's body, at K step `k0` (index).

  /// Copies the A tile (through registers, or by LDS DMA with
  /// tile.async_a) and the B tile (from `bRegs` when given: tile.b_prefetch's
  /// registers; else from global memory; none with tile.b_direct) into LDS.
  void emitTileCopies(const GemmOperands &operands, mlir::Value k0,
                      llvm::ArrayRef<mlir::Value> bRegs);
  /// One K step of stepK at `k0` (index): copies, barrier, the MFMAs into
  /// `accs`, barrier. With `bRegs` (tile.b_prefetch's registers: this
  /// step's B tile) the next step's B tile, the last whole step ending at
  /// `loopEnd`, is loaded and returned. `scaleShift` is the lane group's
  /// scale shift (8 x lane group, i32).
  llvm::SmallVector<mlir::Value>
  emitKStep(const GemmOperands &operands, mlir::Value k0,
            llvm::ArrayRef<mlir::Value> bRegs, mlir::Value loopEnd,
            mlir::Value scaleShift, llvm::MutableArrayRef<mlir::Value> accs);
  /// tile.b_direct: the B fragments of each MFMA sub-step, from global
  /// memory, indexed [sub-step][B fragment].
  llvm::SmallVector<llvm::SmallVector<mlir::Value>>
  loadDirectBFragments(const GemmOperands &operands, mlir::Value k0);
  /// tile.async_a: waits for this wave's LDS DMA before the barrier.
  void emitLdsDmaWait();
  /// tile.b_prefetch: the next K step's B tile (the last step's own again,
  /// the last being the one that ends at `loopEnd`), per copy slot.
  llvm::SmallVector<mlir::Value> loadNextBTile(const GemmOperands &operands,
                                               mlir::Value k0,
                                               mlir::Value loopEnd);
  /// Sub-step `kk`: reads the A and B fragments (B from `directB` when
  /// given) and issues the scaled MFMAs into `accs`.
  void emitMfmaSubStep(const GemmOperands &operands, int64_t kk,
                       llvm::ArrayRef<mlir::Value> aScale,
                       llvm::ArrayRef<mlir::Value> bScale,
                       llvm::ArrayRef<mlir::Value> directB,
                       llvm::MutableArrayRef<mlir::Value> accs);
  /// emitMfmaSubStep for BF16 A: lane group g's 32 K of sub-step `kk` are
  /// four BF16 MFMAs j = 0..3 fed K 32 g + 8 j .. + 7 on both sides (the
  /// same permutation of K for A and B, so the dot products are unchanged),
  /// which makes the weight fragment's dword j their B operand. `bScale` is
  /// per B fragment the scale word shifted as for the scaled MFMA.
  void emitBf16SubStep(const GemmOperands &operands, int64_t kk,
                       llvm::ArrayRef<mlir::Value> bScale,
                       llvm::ArrayRef<mlir::Value> directB,
                       llvm::MutableArrayRef<mlir::Value> accs);
  /// Eight E2M1 codes (`word`, element i in bits 4i..4i+3) times the E8M0
  /// scale `scaleCode` (i32, 0..255) as vector<8xbf16>, by integer
  /// arithmetic: the scale is clamped to [2, 252], where every product is a
  /// normal BF16 and exact; code 255 (NaN) gives NaN (docs/numerics.md).
  mlir::Value upconvertFp4Word(mlir::Value word, mlir::Value scaleCode);
  /// Chunk index `chunk` of tile row `row` after the A swizzle (rows of
  /// stepK elements).
  mlir::Value swizzleChunk(mlir::Value chunk, mlir::Value row);
  /// Loads `words` aligned words of E8M0 scales (four a word) from
  /// `byteIndex` of an i8 buffer as vector<words x i32>.
  mlir::Value loadScaleWords(mlir::Value memref, mlir::Value byteIndex,
                             int64_t words);
  /// Word `word` of `words` shifted right by `shiftI32` bits as
  /// vector<4xf8E8M0FNU>: the scale operand of a scaled MFMA whose op_sel
  /// picks one of its bytes.
  mlir::Value scaleOperand(mlir::Value words, int64_t word,
                           mlir::Value shiftI32);
  /// Emits the lane/wave decomposition of the thread id (sets tid, wave,
  /// lane, laneRow, laneGroup).
  void emitLaneIds();
  /// `scf.if` on `expertI32` in [0, localExperts): the body goes into the
  /// returned block, the builder is moved there; gpu.return follows the if.
  mlir::Block *emitExpertGuard(mlir::Value expertI32, int64_t localExperts);

  // The steps of emitPeerDispatch (PeerDispatch.cpp), on the state they
  // share.
  struct DispatchState;
  /// The first producer clears the control banks the next launch uses.
  void emitDispatchClear(DispatchState &s, mlir::Value isFirst,
                         mlir::Value nextEpoch);
  /// Compact: the planners count this rank's routes per destination expert
  /// into every destination's source-count table and signal it.
  void emitDispatchPlan(DispatchState &s);
  /// Compact: each producer's starts of this rank's rows per destination
  /// expert, in LDS.
  void emitDispatchStarts(DispatchState &s);
  /// Every producer wave's routes: each to its destination rank.
  void emitDispatchRoutes(DispatchState &s);
  /// One valid route to destination rank `dest` (i32, the same on every
  /// lane of the wave), whose symmetric buffer is `destBase`: takes its
  /// receive row and copies the token's row, scales and metadata there, or
  /// counts an overflow.
  void emitRouteToRank(DispatchState &s, mlir::Value dest, mlir::Value destBase,
                       mlir::Value expert, mlir::Value token,
                       mlir::Value weight, mlir::Value source);

  moe::TileAttr tile;
  mfma::Shape shape;
  mfma::ShapeInfo layout;
  bool bMajor;
  /// A rows are MXFP4 (E2M1 pairs, tile.k / 2 bytes a row: A4W4) instead of
  /// FP8; set by the stage from problem.activation before the GEMM.
  bool aFp4 = false;
  /// A rows are BF16 (tile.k * 2 bytes a row, no scales: A16W4): each
  /// scaled-MFMA K step becomes four BF16 MFMAs on up-converted weights
  /// (emitBf16SubStep); set by the stage from problem.activation.
  bool aBf16 = false;
  /// A elements per dword: 8 (MXFP4), 2 (BF16) or 4 (FP8).
  int64_t aElementsPerDword() const { return aFp4 ? 8 : aBf16 ? 2 : 4; }
  /// K of the step being emitted: tile.k, or the K tail's width while
  /// its step (and its copy plan) is emitted. The LDS tiles of a step hold
  /// rows of stepK elements; the fragment reads, the swizzle, the scale
  /// words and the sub-step count follow it.
  int64_t stepK;
  /// Sets stepK for the lifetime of the object.
  struct StepKScope {
    StepKScope(GemmEmitter &emitter, int64_t k)
        : emitter(emitter), saved(emitter.stepK) {
      emitter.stepK = k;
    }
    ~StepKScope() { emitter.stepK = saved; }
    GemmEmitter &emitter;
    int64_t saved;
  };
  /// Set by emitTileIds when the tile body runs inside a persistent loop.
  bool inTileLoop = false;
  /// Lanes of the workgroup: tile.waves x tile.k_waves waves.
  int64_t lanes;
  mlir::Value tid, wave, lane, laneRow, laneGroup;
  /// tile.k_waves: the workgroup is k_waves groups of tile.waves waves, each
  /// with its own GEMM tiles in LDS, kGroupLdsDwords apart; the copies and
  /// the N split use the ids within the group (groupTid < groupLanes,
  /// groupWave < tile.waves: tid, lanes and wave with one group). kGroup is
  /// the wave's group (null with one group); the stage sets the K range.
  int64_t groupLanes;
  int64_t kGroupLdsDwords = 0;
  mlir::Value groupTid, groupWave, kGroup;
  /// LDS dword `base` of this wave group's GEMM tiles.
  mlir::Value groupLdsDword(int64_t base);
};

/// The launch grid's Y rule of a GEMM stage without a peer transport: one
/// row per M tile, or tile.persist_cu persistent rows (TileSchedule.cpp).
std::string tileGridY(moe::TileAttr tile);

} // namespace moec

#endif // MOEC_CODEGEN_LIB_GEMMEMITTER_H
