//===- W2Kernel.cpp - moe.w2 -> gpu.func ----------------------------------===//
///
/// \file
/// Builds the W2 (down-projection) kernel: FP8 or MXFP4 (A4W4's FP4
/// intermediate) activations x MXFP4 weights with scaled MFMA, FP32
/// accumulation, BF16 output.
///
/// One workgroup computes a tile.m x tile.n block of the output: tile.m rows
/// of the expert-sorted route list (all of one expert) by tile.n hidden
/// columns. Per K step every lane helps copy the A tile (FP8 rows gathered by
/// route id) and the B tile (the expert's packed E2M1 rows) into LDS with
/// 16-byte buffer loads; after a barrier each wave reads its MFMA fragments
/// from LDS in the lane layout of moec/target/mfma_layout.h and accumulates.
/// Scales are read per lane straight from global memory: each lane needs
/// exactly one E8M0 byte per operand per instruction.
///
/// Padding entries of the route list hold the route id num_routes, which lies
/// past the valid bytes of the activation and output buffers: their loads
/// read zero and their stores are dropped by the buffer bounds check.
///
//===----------------------------------------------------------------------===//

#include "GemmEmitter.h"
#include "PeerBuffer.h"
#include "moec/Codegen/KernelBuilders.h"
#include "moec/Dialect/Moe/MoeDialect.h"
#include "moec/abi/peer_protocol.h"

#include "mlir/Dialect/AMDGPU/IR/AMDGPUDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;

namespace moec {
namespace {

/// Argument positions of the W2 kernel, in ABI order.
enum W2Arg : unsigned {
  kA, kAScale, kB, kBScale, kSortedRoutes, kTileExperts, kOut,
  kNumRoutes, kNumSorted, kW2ArgCount,
  // Only with a shared FP8 expert, after the others.
  kBShared = kW2ArgCount, kBSharedScale
  // With `bias` the FP32 bias is the last argument.
};

/// Argument positions of the fused stage 2 (`peer`): kPSymmetric is this
/// rank's symmetric buffer (receive metadata and control words), and after
/// kPeerFirst come problem.ep symmetric buffers, one per rank (their
/// combine rows and control words: PeerBuffer.h).
enum W2PeerArg : unsigned {
  kPA, kPAScale, kPB, kPBScale, kPSymmetric, kPeerFirst
};

/// Emits one W2 kernel: the shared GEMM plus its arguments and epilogue.
class W2Emitter : GemmEmitter {
public:
  W2Emitter(OpBuilder &builder, moe::W2Op op)
      : GemmEmitter(builder, op, op.getTile()), op(op),
        problem(op.getProblem()) {
    aFp4 = problem.getActivationFormat() == moe::ActivationFormat::fp4;
    aBf16 = problem.getActivationFormat() == moe::ActivationFormat::bf16;
  }

  FailureOr<gpu::GPUModuleOp> emit();

private:
  /// The argument types of the fused stage 2, in W2PeerArg order.
  SmallVector<Type> peerArgTypes(moe::PeerTransportAttr peer);
  /// The route-list kernel.
  void emitBody(gpu::GPUFuncOp func);
  /// The fused MegaMoE stage 2 (`peer`).
  void emitPeerBody(gpu::GPUFuncOp func);
  /// The K loop of one tile; accumulators as GemmEmitter::emitGemm.
  SmallVector<Value> emitTileGemm(const ExpertTile &rows);

  /// The FP8 payload of the fused stage 2: per M fragment, stages its
  /// FP32 accumulators in LDS ([dim][tile.n] over the GEMM tiles), then one
  /// lane per (row, 1x32 block) reads its 32 values and calls
  /// `store(tileRow, blockColumn, values)` (8 vector<4xf32>; blockColumn:
  /// the block's first hidden column).
  void storeFp8PeerRows(
      ArrayRef<Value> accs, Value colBase, Value lds,
      function_ref<void(Value, Value, ArrayRef<Value>)> store);

  /// The end of the fused stage 2: the wave that completes the launch's
  /// count signals every source rank (`sourceControl(r)`, its control
  /// buffer) that its combine rows are complete.
  void emitCombineSignal(Value control,
                         function_ref<Value(int64_t)> sourceControl);

  /// Where the route-list epilogue writes one tile.
  struct OutputTile {
    /// Local expert and the tile's first hidden column (index values).
    Value expert, colBase;
    /// The wave's first column in the tile and the split-K slice (index).
    Value waveCol, kSlice;
    Value outBuf, lds;
    /// The route of a tile row (index).
    function_ref<Value(Value)> routeOfRow;
    /// The route of the lane's row in each M fragment.
    ArrayRef<Value> fragRoute;
  };
  /// Output element (route, column): BF16 [R, H] or FP32 partials
  /// [R, S, H].
  Value outIndex(const OutputTile &out, Value route, Value col);
  /// The expert's bias row (argument `biasArg`) on each route's FP32
  /// result, before it is rounded or stored.
  void addBias(SmallVectorImpl<Value> &accs, const OutputTile &out,
               Value biasArg);
  /// Stores the accumulators: BF16 (rounded once, to nearest even) or
  /// split-K FP32 partials, straight to the route rows or, with bf16_lds,
  /// staged in LDS and written back by whole rows.
  void storeOutputs(ArrayRef<Value> accs, const OutputTile &out);

  moe::W2Op op;
  moe::ProblemAttr problem;
};

FailureOr<gpu::GPUModuleOp> W2Emitter::emit() {
  if (moe::PeerTransportAttr peer = op.getPeerAttr())
    return emitKernel(op.getSymName(), peerArgTypes(peer), getW2KernelAbi(op),
                      op.getLdsBytes() / 4,
                      [&](gpu::GPUFuncOp func) { emitPeerBody(func); });
  const int64_t hidden = problem.getHidden();
  const int64_t inter = problem.getIntermediate();
  // After the shared prefix: out (split-K writes FP32 partials
  // [routes, split_k, H], else BF16 [routes, H]), num_routes, num_sorted.
  SmallVector<Type> argTypes = routeListArgTypes(
      problem, op.getSharedFp8Expert(), hidden * inter,
      {globalBuffer(kRouteIndexedExtent,
                    op.getSplitK() > 1 ? b.getF32Type() : b.getBF16Type()),
       b.getI32Type(), b.getI32Type()},
      op.getBias() ? hidden : 0);
  return emitKernel(op.getSymName(), argTypes, getW2KernelAbi(op),
                    op.getLdsBytes() / 4,
                    [&](gpu::GPUFuncOp func) { emitBody(func); });
}

SmallVector<Type> W2Emitter::peerArgTypes(moe::PeerTransportAttr peer) {
  const int64_t hidden = problem.getHidden();
  const int64_t inter = problem.getIntermediate();
  const int64_t rows = peer.getReceiveRows(problem.getLocalExperts());
  const int64_t ep = problem.getEp();
  SmallVector<Type> argTypes(kPeerFirst);
  argTypes[kPA] = globalBuffer(rows * inter / 4, b.getI32Type());
  argTypes[kPAScale] = globalBuffer(rows * inter / 32, b.getI8Type());
  std::tie(argTypes[kPB], argTypes[kPBScale]) =
      expertWeightTypes(problem, op.getSharedFp8Expert(), hidden * inter);
  Type symmetric = symmetricBufferType(b.getContext());
  argTypes[kPSymmetric] = symmetric;
  argTypes.append(ep, symmetric);
  return argTypes;
}

void W2Emitter::emitBody(gpu::GPUFuncOp func) {
  const int64_t hidden = problem.getHidden();
  const int64_t inter = problem.getIntermediate();
  const int64_t tileM = tile.getM(), tileN = tile.getN(), tileK = tile.getK();
  const int64_t waveN = tile.getWaveN();
  const int64_t dim = layout.dim;
  auto arg = [&](W2Arg which) { return func.getArgument(which); };

  Value numRoutes = arg(kNumRoutes), numSorted = arg(kNumSorted);
  Value numTiles = arith::DivUIOp::create(b, loc, numSorted, i32(tileM));
  Value aBuf =
      asBuffer(arg(kA), bytesOf(numRoutes, inter * 4 / aElementsPerDword()));
  Value aScaleBuf = asBuffer(arg(kAScale), bytesOf(numRoutes, inter / 32));
  Value sortedBuf = asBuffer(arg(kSortedRoutes), bytesOf(numSorted, 4));
  // The sort labels blocks of sort_block_m rows (tile.m when 0); M tile i
  // lies in block i / (sort_block_m / tile.m).
  const int64_t sortBlock = op.getSortBlockM() ? op.getSortBlockM() : tileM;
  const int64_t tilesPerBlock = sortBlock / tileM;
  Value numBlocks =
      tilesPerBlock == 1
          ? numTiles
          : Value(arith::DivUIOp::create(b, loc, numSorted, i32(sortBlock)));
  Value tileExpertBuf = asBuffer(arg(kTileExperts), bytesOf(numBlocks, 4));
  const int64_t splitK = op.getSplitK();
  const int64_t outRowBytes = splitK > 1 ? splitK * hidden * 4 : hidden * 2;
  Value outBuf = asBuffer(arg(kOut), bytesOf(numRoutes, outRowBytes));
  const bool shared = op.getSharedFp8Expert();

  emitLaneIds();
  auto [nTile, mTile] = emitTileIds(hidden / tileN, numTiles);
  // A tile whose expert id is negative (or past this rank's experts) holds
  // no routes: the whole workgroup leaves.
  Value block = tilesPerBlock == 1 ? mTile : divC(mTile, tilesPerBlock);
  Value expertI32 =
      memref::LoadOp::create(b, loc, tileExpertBuf, ValueRange{block});
  emitExpertGuard(expertI32, problem.getLocalExperts());

  Value expert = toIndex(expertI32);
  Value rowBase = mul(mTile, tileM);
  Value colBase = mul(nTile, tileN);
  auto routeOfRow = [&](Value row) {
    return toIndex(memref::LoadOp::create(b, loc, sortedBuf,
                                          ValueRange{add(rowBase, row)}));
  };
  const int64_t mFrags = tileM / dim;
  SmallVector<Value> fragRoute;
  for (int64_t mi = 0; mi < mFrags; ++mi)
    fragRoute.push_back(routeOfRow(add(laneRow, idx(mi * dim))));
  Value waveCol = mul(wave, waveN);
  // Split-K: grid z takes ceil(steps / S) K steps (the last slice may be
  // shorter) and writes the partial row (route, z) of the output. A K tail
  // counts as a step, and lies in the last slice.
  Value kSlice = splitK > 1 ? Value(gpu::BlockIdOp::create(b, loc, gpu::Dimension::z))
                            : idx(0);
  const int64_t sliceDepth =
      llvm::divideCeil(llvm::divideCeil(inter, tileK), splitK) * tileK;
  Value kBegin = mul(kSlice, sliceDepth);
  Value kEnd =
      arith::MinUIOp::create(b, loc, add(kBegin, idx(sliceDepth)), idx(inter));
  ExpertTile rows;
  rows.expert = expert;
  rows.expertI32 = expertI32;
  rows.colBase = colBase;
  rows.aRow = routeOfRow;
  rows.aBuf = aBuf;
  rows.aScaleBuf = aScaleBuf;
  rows.lds = func.getWorkgroupAttributions()[0];
  rows.kBegin = kBegin;
  rows.kEnd = kEnd;
  rows.b = arg(kB);
  rows.bScale = arg(kBScale);
  if (shared) {
    rows.bShared = arg(kBShared);
    rows.bSharedScale = arg(kBSharedScale);
  }
  SmallVector<Value> accs = emitTileGemm(rows);
  OutputTile out{expert,    colBase, waveCol,   kSlice,
                 outBuf,    func.getWorkgroupAttributions()[0],
                 routeOfRow, fragRoute};
  if (op.getBias())
    addBias(accs, out, func.getArgument(func.getNumArguments() - 1));
  storeOutputs(accs, out);
}

Value W2Emitter::outIndex(const OutputTile &out, Value route, Value col) {
  const int64_t hidden = problem.getHidden(), splitK = op.getSplitK();
  if (splitK == 1)
    return add(mul(route, hidden), col);
  return add(mul(add(mul(route, splitK), out.kSlice), hidden), col);
}

void W2Emitter::addBias(SmallVectorImpl<Value> &accs, const OutputTile &out,
                        Value biasArg) {
  const int64_t hidden = problem.getHidden(), dim = layout.dim;
  const int64_t mFrags = tile.getM() / dim, nFrags = tile.getWaveN() / dim;
  // Split-K: slices z > 0 see an empty buffer (the range check reads
  // zeros), so the partials hold the bias once.
  Value biasBytes = i64(problem.getLocalExperts() * hidden * 4);
  if (op.getSplitK() > 1)
    biasBytes = arith::SelectOp::create(
        b, loc,
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, out.kSlice,
                              idx(0)),
        biasBytes, i64(0));
  Value bias = asBuffer(biasArg, biasBytes);
  Value first = add(mul(out.expert, hidden), out.colBase);
  for (int64_t ni = 0; ni < nFrags; ++ni) {
    Value columnBias =
        loadColumnBias(bias, first, add(out.waveCol, idx(ni * dim)));
    for (int64_t mi = 0; mi < mFrags; ++mi)
      accs[mi * nFrags + ni] =
          arith::AddFOp::create(b, loc, accs[mi * nFrags + ni], columnBias);
  }
}

void W2Emitter::storeOutputs(ArrayRef<Value> accs, const OutputTile &out) {
  const int64_t hidden = problem.getHidden(), dim = layout.dim;
  const int64_t tileM = tile.getM(), tileN = tile.getN();
  const int64_t mFrags = tileM / dim, nFrags = tile.getWaveN() / dim;
  const int64_t splitK = op.getSplitK();
  Value colBase = out.colBase, outBuf = out.outBuf, lds = out.lds;
  // Accumulator value a of a lane sits at (accRow(a), accCol) of the MFMA's
  // source-A x source-B block.
  const bool stage = op.getBf16Lds();
  auto bf16x4 = VectorType::get({4}, b.getBF16Type());
  auto i32x2 = VectorType::get({2}, b.getI32Type());
  auto accumulator = [&](int64_t mi, int64_t ni) {
    return accs[mi * nFrags + ni];
  };
  forEachAccQuad(mFrags, nFrags, out.waveCol, accumulator,
                 [&](int64_t mi, Value fragCol, Value rowOfFour, Value quad) {
    if (splitK == 1)
      quad = arith::TruncFOp::create(b, loc, bf16x4, quad);
    if (bMajor) {
      // Four consecutive output columns of one row.
      Value localCol = add(fragCol, rowOfFour);
      if (stage) {
        // Into the LDS tile [tileM][tileN] BF16: 8 bytes = 2 dwords.
        Value dword =
            divC(add(mul(add(laneRow, idx(mi * dim)), tileN), localCol), 2);
        vector::StoreOp::create(
            b, loc, vector::BitCastOp::create(b, loc, i32x2, quad), lds,
            ValueRange{dword}, /*nontemporal=*/false, llvm::MaybeAlign(8));
        return;
      }
      vector::StoreOp::create(
          b, loc, quad, outBuf,
          ValueRange{outIndex(out, out.fragRoute[mi], add(colBase, localCol))},
          /*nontemporal=*/false, llvm::MaybeAlign(splitK == 1 ? 8 : 16));
      return;
    }
    Value localCol = add(fragCol, laneRow);
    for (int64_t j = 0; j < 4; ++j) {
      Value row = add(rowOfFour, idx(mi * dim + j));
      Value value = vector::ExtractOp::create(b, loc, quad, j);
      memref::StoreOp::create(
          b, loc, value, outBuf,
          ValueRange{outIndex(out, out.routeOfRow(row), add(colBase, localCol))});
    }
  });
  if (!stage)
    return;
  // Write the staged tile back: each lane copies 16-byte chunks (8 BF16
  // columns) of whole rows.
  gpu::BarrierOp::create(b, loc);
  const int64_t chunksPerRow = tileN / 8, chunks = tileM * chunksPerRow;
  forEachLaneItem(chunks, [&](Value chunk) {
    Value row = divC(chunk, chunksPerRow);
    Value col = mul(remC(chunk, chunksPerRow), 8);
    Value data = load16(lds, divC(add(mul(row, tileN), col), 2));
    Value outElement =
        add(mul(out.routeOfRow(row), hidden), add(colBase, col));
    vector::StoreOp::create(
        b, loc, vector::BitCastOp::create(
                    b, loc, VectorType::get({8}, b.getBF16Type()), data),
        outBuf, ValueRange{outElement}, /*nontemporal=*/false,
        llvm::MaybeAlign(16));
  });
  emitEndOfTile();
}

void W2Emitter::emitPeerBody(gpu::GPUFuncOp func) {
  moe::PeerTransportAttr peer = op.getPeerAttr();
  const int64_t hidden = problem.getHidden();
  const int64_t inter = problem.getIntermediate();
  const int64_t ep = problem.getEp();
  const int64_t experts = problem.getLocalExperts();
  const int64_t rowsTotal = peer.getReceiveRows(experts);
  const int64_t waves = tile.getWaves();
  const int64_t routesPerRank = peer.getMaxTokens() * problem.getTopK();
  const int64_t tileM = tile.getM(), tileN = tile.getN();
  const int64_t waveN = tile.getWaveN(), dim = layout.dim;
  const int64_t mFrags = tileM / dim, nFrags = waveN / dim;
  auto arg = [&](unsigned which) { return func.getArgument(which); };
  Value lds = func.getWorkgroupAttributions()[0];
  const PeerLds words = PeerLds::at(
      (op.getLdsBytes() - op.getPeerLdsBytes()) / 4, experts, waves);
  const peer::BufferLayout layout =
      peer::bufferLayout(experts, ep, rowsTotal, hidden, problem.getTopK(),
                         peer.getMaxTokens());
  const int64_t controlWords = peer::controlWords(experts, ep);
  auto controlOf = [&](Value base) {
    return symmetricRegion(b, loc, base, layout.control, controlWords,
                           b.getI32Type());
  };
  Value control = controlOf(arg(kPSymmetric));
  // This launch's stage 1 ran before on the stream: its epoch word is final.
  Value epoch =
      memref::LoadOp::create(b, loc, control, ValueRange{idx(peer::kEpoch)});
  Value metaBuf = asBuffer(
      symmetricRegion(b, loc, arg(kPSymmetric), layout.recv_meta,
                      rowsTotal * peer::kMetaWords, b.getI32Type()),
      i64(rowsTotal * peer::kMetaWords * 4));
  // Each rank's combine rows, one buffer descriptor per rank (stage 2
  // holds no other per-rank pointer through its tiles): BF16 elements, or
  // with the FP8 payload bytes (peer_protocol.h: row slots of
  // fp8RowBytes, codes then scales).
  const bool fp8Payload = peer.getPayload() == moe::ActivationFormat::fp8;
  const int64_t fp8Row = peer::fp8RowBytes(hidden);
  SmallVector<Value> combine;
  for (int64_t r = 0; r < ep; ++r)
    combine.push_back(
        fp8Payload
            ? asBuffer(symmetricRegion(b, loc, arg(kPeerFirst + r),
                                       layout.combine_rows,
                                       routesPerRank * fp8Row, b.getI8Type()),
                       i64(routesPerRank * fp8Row))
            : asBuffer(symmetricRegion(b, loc, arg(kPeerFirst + r),
                                       layout.combine_rows,
                                       routesPerRank * hidden, b.getBF16Type()),
                       i64(routesPerRank * hidden * 2)));

  emitLaneIds();
  ExpertTile rows;
  rows.aBuf = asBuffer(arg(kPA), i64(rowsTotal * inter));
  rows.aScaleBuf = asBuffer(arg(kPAScale), i64(rowsTotal * inter / 32));
  rows.lds = lds;
  rows.b = arg(kPB);
  rows.bScale = arg(kPBScale);
  // Stage 1 ran before on this stream: the counts are final.
  Value block = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  emitPeerTiles(peer, control, epoch, block, lds, words, experts, ep,
                hidden / tileN, /*stage=*/1, [&](const PeerItem &item) {
    rows.setItem(item);
    auto receiveRow = [&](Value row) { return peerReceiveRow(item, row); };
    rows.aRow = receiveRow;
    SmallVector<Value> accs = emitTileGemm(rows);

    // Epilogue: value x routing weight, BF16 or FP8 1x32 blocks, into the
    // source rank's combine row. Unused rows read metadata 0 ("no route")
    // and store nothing.
    struct RowRoute {
      Value weight, hasSource, srcRank, route;
    };
    auto routeOf = [&](Value tileRow) {
      Value metaWord = mul(receiveRow(tileRow), peer::kMetaWords);
      RowRoute to;
      to.weight = arith::BitcastOp::create(
          b, loc, b.getF32Type(),
          memref::LoadOp::create(b, loc, metaBuf, ValueRange{metaWord}));
      Value source = memref::LoadOp::create(b, loc, metaBuf,
                                            ValueRange{add(metaWord, idx(1))});
      to.hasSource = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne,
                                           source, i32(0));
      Value packed = arith::SubIOp::create(b, loc, source, i32(1));
      to.srcRank = arith::DivUIOp::create(b, loc, packed, i32(routesPerRank));
      to.route =
          toIndex(arith::RemUIOp::create(b, loc, packed, i32(routesPerRank)));
      return to;
    };
    // Runs `body(r)` under scf.if on the rank the row came from.
    auto onSourceRank = [&](const RowRoute &to,
                            function_ref<void(int64_t)> body) {
      for (int64_t r = 0; r < ep; ++r) {
        Value here = arith::AndIOp::create(
            b, loc, to.hasSource,
            arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, to.srcRank,
                                  i32(r)));
        auto ifHere = scf::IfOp::create(b, loc, here, false);
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPointToStart(ifHere.thenBlock());
        body(r);
      }
    };
    Value waveCol = mul(wave, waveN);
    auto accumulator = [&](int64_t mi, int64_t ni) {
      return accs[mi * nFrags + ni];
    };
    if (fp8Payload) {
      storeFp8PeerRows(accs, rows.colBase, lds, [&](Value tileRow,
                                                    Value blockCol,
                                                    ArrayRef<Value> values) {
        RowRoute to = routeOf(tileRow);
        auto f32x4 = VectorType::get({4}, b.getF32Type());
        Value weight4 = vector::BroadcastOp::create(b, loc, f32x4, to.weight);
        SmallVector<Value> weighted;
        for (Value v : values)
          weighted.push_back(arith::MulFOp::create(b, loc, v, weight4));
        Fp8Block block = quantiseFp8Block(weighted);
        // Row slot `route`: codes at byte route * fp8Row + column, the
        // block's scale at route * fp8Row + hidden + column / 32.
        Value rowByte = mul(to.route, fp8Row);
        Value codeByte = add(rowByte, blockCol);
        Value scaleByte = add(add(rowByte, idx(hidden)), divC(blockCol, 32));
        auto i8x16 = VectorType::get({16}, b.getI8Type());
        Value chunks[2];
        for (int64_t half = 0; half < 2; ++half)
          chunks[half] =
              vector::BitCastOp::create(b, loc, i8x16, block.chunks[half]);
        onSourceRank(to, [&](int64_t r) {
          for (int64_t half = 0; half < 2; ++half)
            vector::StoreOp::create(b, loc, chunks[half], combine[r],
                                    ValueRange{add(codeByte, idx(16 * half))},
                                    /*nontemporal=*/true, llvm::MaybeAlign(16));
          memref::StoreOp::create(b, loc, block.scale, combine[r],
                                  ValueRange{scaleByte}, /*nontemporal=*/true);
        });
      });
      // The next item reuses the LDS tiles.
      gpu::BarrierOp::create(b, loc);
      return;
    }
    auto storeRow = [&](Value tileRow, Value column, Value values) {
      RowRoute to = routeOf(tileRow);
      Value weight = to.weight, route = to.route;
      Value scaled;
      if (auto vectorType = dyn_cast<VectorType>(values.getType())) {
        scaled = arith::MulFOp::create(
            b, loc, values, vector::BroadcastOp::create(b, loc, vectorType, weight));
        scaled = arith::TruncFOp::create(
            b, loc, VectorType::get(vectorType.getShape(), b.getBF16Type()),
            scaled);
      } else {
        scaled = arith::TruncFOp::create(
            b, loc, b.getBF16Type(), arith::MulFOp::create(b, loc, values, weight));
      }
      Value element = add(mul(route, hidden), column);
      onSourceRank(to, [&](int64_t r) {
        Value rowsOfR = combine[r];
        if (isa<VectorType>(scaled.getType()))
          vector::StoreOp::create(b, loc, scaled, rowsOfR, ValueRange{element},
                                  /*nontemporal=*/true, llvm::MaybeAlign(8));
        else
          memref::StoreOp::create(b, loc, scaled, rowsOfR, ValueRange{element},
                                  /*nontemporal=*/true);
      });
    };
    forEachAccQuad(mFrags, nFrags, waveCol, accumulator,
                   [&](int64_t mi, Value fragCol, Value rowOfFour, Value quad) {
      if (bMajor) {
        storeRow(add(laneRow, idx(mi * dim)),
                 add(rows.colBase, add(fragCol, rowOfFour)), quad);
        return;
      }
      Value column = add(rows.colBase, add(fragCol, laneRow));
      for (int64_t j = 0; j < 4; ++j)
        storeRow(add(rowOfFour, idx(mi * dim + j)), column,
                 vector::ExtractOp::create(b, loc, quad, j));
    });
    // The next item reuses the LDS tiles.
    gpu::BarrierOp::create(b, loc);
  });

  emitCombineSignal(control, [&](int64_t r) {
    return controlOf(arg(kPeerFirst + r));
  });
  gpu::ReturnOp::create(b, loc);
}

void W2Emitter::storeFp8PeerRows(
    ArrayRef<Value> accs, Value colBase, Value lds,
    function_ref<void(Value, Value, ArrayRef<Value>)> store) {
  const int64_t tileM = tile.getM(), tileN = tile.getN(), dim = layout.dim;
  const int64_t mFrags = tileM / dim, nFrags = tile.getWaveN() / dim;
  // tile.n is a multiple of 32 (TileAttr admits 32 to 512).
  const int64_t blocksPerRow = tileN / 32;
  // One M fragment (dim rows x tile.n FP32) at a time, so that the staging
  // needs no more LDS than dim x tile.n x 4 bytes. The K loop ended with a
  // barrier: nobody reads the GEMM tiles any more.
  for (int64_t mi = 0; mi < mFrags; ++mi) {
    auto fragment = [&](int64_t, int64_t ni) -> Value {
      return arith::BitcastOp::create(
          b, loc, VectorType::get({layout.accPerLane}, b.getI32Type()),
          accs[mi * nFrags + ni]);
    };
    forEachAccQuad(/*mFrags=*/1, nFrags, mul(wave, tile.getWaveN()), fragment,
                   [&](int64_t, Value fragCol, Value rowOfFour, Value quad) {
      if (bMajor) {
        store16(quad, lds, add(mul(laneRow, tileN), add(fragCol, rowOfFour)));
        return;
      }
      Value col = add(fragCol, laneRow);
      for (int64_t j = 0; j < 4; ++j) {
        Value row = add(rowOfFour, idx(j));
        memref::StoreOp::create(b, loc,
                                vector::ExtractOp::create(b, loc, quad, j), lds,
                                ValueRange{add(mul(row, tileN), col)});
      }
    });
    gpu::BarrierOp::create(b, loc);
    forEachLaneItem(dim * blocksPerRow, [&](Value item) {
      Value row = divC(item, blocksPerRow);
      Value block = remC(item, blocksPerRow);
      Value first = add(mul(row, tileN), mul(block, 32));
      store(add(row, idx(mi * dim)), add(colBase, mul(block, 32)),
            loadF32Block(lds, first));
    });
    // The next fragment (or item) overwrites the staged rows.
    if (mi + 1 < mFrags)
      gpu::BarrierOp::create(b, loc);
  }
}

void W2Emitter::emitCombineSignal(Value control,
                                  function_ref<Value(int64_t)> sourceControl) {
  // Every wave takes a ticket after its stores; the wave that completes
  // the launch's count (acquiring every earlier wave's release) signals
  // each source rank that its combine rows are complete.
  const int64_t groups = op.getPeerAttr().getWorkgroups();
  const int64_t waves = tile.getWaves();
  Value isLaneZero =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, lane, idx(0));
  auto ifLane = scf::IfOp::create(b, loc, isLaneZero, false);
  b.setInsertionPointToStart(ifLane.thenBlock());
  Value ticket = atomicAddI32(control, idx(peer::kStage2Ticket), i32(1));
  Value last = arith::CmpIOp::create(
      b, loc, arith::CmpIPredicate::eq,
      arith::RemUIOp::create(b, loc, arith::AddIOp::create(b, loc, ticket, i32(1)),
                             i32(groups * waves)),
      i32(0));
  auto ifLast = scf::IfOp::create(b, loc, last, false);
  b.setInsertionPointToStart(ifLast.thenBlock());
  for (int64_t r = 0; r < problem.getEp(); ++r)
    (void)atomicAddI32(sourceControl(r), idx(peer::kCombineReady), i32(1));
  b.setInsertionPointAfter(ifLane);
}

SmallVector<Value> W2Emitter::emitTileGemm(const ExpertTile &rows) {
  const int64_t inter = problem.getIntermediate();
  const int64_t hidden = problem.getHidden();
  const int64_t tileM = tile.getM(), tileK = tile.getK();
  const int64_t waveN = tile.getWaveN();
  const int64_t dim = layout.dim;
  const int64_t mFrags = tileM / dim, nFrags = waveN / dim;
  Value waveCol = mul(wave, waveN);
  SmallVector<Value> fragARow = fragmentARows(rows);
  auto makeOperands = [&](bool bFp8) {
    GemmOperands ops = beginGemmOperands(rows, bFp8, inter);
    // Weight row (expert, column) in rows of the [E, H, .] tensors; the
    // shared expert's tensor holds just its own rows.
    Value weightRowBase =
        bFp8 ? rows.colBase : add(mul(rows.expert, hidden), rows.colBase);
    // B rows of a step of `width` K are width / 2 packed bytes (width / 32
    // chunks of 16 bytes), or width FP8 bytes.
    const int64_t bRowDwords = bFp8 ? inter / 4 : inter / 8;
    auto planBCopy = [&](int64_t width) {
      return planCopy(
          tile.getN(), bFp8 ? width / 16 : width / 32,
          [&](Value row) { return mul(add(weightRowBase, row), bRowDwords); },
          ops.ldsBDword);
    };
    ops.aSlots = planACopy(rows, inter);
    ops.bSlots = planBCopy(tileK);
    // tile.k need not divide I: the remainder (a multiple of 128, the
    // verifier's rule) is the K tail, with copies of rows that wide.
    if (int64_t tail = inter % tileK) {
      StepKScope tailStep(*this, tail);
      ops.tailK = tail;
      ops.aTailSlots = planACopy(rows, inter);
      ops.bTailSlots = planBCopy(tail);
    }
    addAFragments(ops, fragARow, inter);
    for (int64_t ni = 0; ni < nFrags; ++ni) {
      ops.bTileRow.push_back(add(add(waveCol, idx(ni * dim)), laneRow));
      ops.bScaleRow.push_back(
          mul(add(weightRowBase, ops.bTileRow.back()), inter / 32));
      ops.bRowDword.push_back(
          mul(add(weightRowBase, ops.bTileRow.back()), bRowDwords));
    }
    return ops;
  };
  return emitExpertGemm(rows, op.getSharedFp8Expert(),
                        problem.getLocalExperts(), mFrags * nFrags,
                        makeOperands);
}

} // namespace

KernelAbi getW2KernelAbi(moe::W2Op op) {
  using K = KernelArg::Kind;
  using A = KernelArg::Access;
  moe::TileAttr tile = op.getTile();
  KernelAbi abi;
  // [E, H, I/2] E2M1 pairs, even K in the low nibble.
  abi.weightLayout = "w2_expert_n_k_e2m1x2_low_nibble_first";
  abi.workgroupSize = static_cast<unsigned>(
      moe::getVerifiedTarget(op).wavefrontSize * tile.getWaves());
  if (moe::PeerTransportAttr peer = op.getPeerAttr()) {
    abi.args = {
        {"a", K::Buffer, "f8E4M3FN", A::Read, "[local_experts * capacity, I]"},
        {"a_scale", K::Buffer, "f8E8M0FNU", A::Read, "[local_experts * capacity, I/32]"},
        {"b", K::Buffer, "f4E2M1FN x2", A::Read, "[local_experts, H, I/2]"},
        {"b_scale", K::Buffer, "f8E8M0FNU", A::Read, "[local_experts, H, I/32]"},
        {"symmetric", K::Buffer, "i8", A::ReadWrite,
         "[symmetric buffer bytes] (this rank's; regions: moec/abi/peer_protocol.h)"},
    };
    for (int64_t r = 0; r < op.getProblem().getEp(); ++r)
      abi.args.push_back({"peer_symmetric" + std::to_string(r), K::Buffer, "i8",
                          A::ReadWrite,
                          "[symmetric buffer bytes] of rank " + std::to_string(r)});
    abi.gridX = std::to_string(peer.getWorkgroups());
    abi.gridY = "1";
    abi.gridZ = "1";
    return abi;
  }
  const bool aFp4 =
      op.getProblem().getActivationFormat() == moe::ActivationFormat::fp4;
  // A16W4: BF16 intermediate rows; a_scale stays in the ABI, not accessed.
  const bool a16 =
      op.getProblem().getActivationFormat() == moe::ActivationFormat::bf16;
  abi.args = {
      aFp4 ? KernelArg{"a", K::Buffer, "f4E2M1FN x2", A::Read,
                       "[num_routes, I/2]"}
      : a16
          ? KernelArg{"a", K::Buffer, "bf16", A::Read, "[num_routes, I]"}
          : KernelArg{"a", K::Buffer, "f8E4M3FN", A::Read, "[num_routes, I]"},
      a16 ? KernelArg{"a_scale", K::Buffer, "f8E8M0FNU", A::Read,
                      "unused (BF16 A has no scales)"}
          : KernelArg{"a_scale", K::Buffer, "f8E8M0FNU", A::Read,
                      "[num_routes, I/32]"},
      {"b", K::Buffer, "f4E2M1FN x2", A::Read, "[local_experts, H, I/2]"},
      {"b_scale", K::Buffer, "f8E8M0FNU", A::Read, "[local_experts, H, I/32]"},
      {"sorted_routes", K::Buffer, "i32", A::Read, "[num_sorted]"},
      {"tile_experts", K::Buffer, "i32", A::Read,
       op.getSortBlockM() > 0
           ? "[num_sorted/" + std::to_string(op.getSortBlockM()) + "]"
           : std::string("[num_sorted/tile_m]")},
      {"out", K::Buffer, op.getSplitK() > 1 ? "f32" : "bf16", A::Write,
       op.getSplitK() > 1 ? "[num_routes, split_k, H]" : "[num_routes, H]"},
      {"num_routes", K::I32, "i32", A::Read, "scalar"},
      {"num_sorted", K::I32, "i32", A::Read,
       op.getSortBlockM() > 0
           ? "scalar (multiple of " + std::to_string(op.getSortBlockM()) + ")"
           : std::string("scalar (multiple of tile_m)")},
  };
  if (op.getSharedFp8Expert()) {
    abi.args.push_back({"b_shared", K::Buffer, "f8E4M3FN", A::Read, "[H, I]"});
    abi.args.push_back(
        {"b_shared_scale", K::Buffer, "f8E8M0FNU", A::Read, "[H, I/32]"});
  }
  // The shared expert's row is the last.
  if (op.getBias())
    abi.args.push_back({"bias", K::Buffer, "f32", A::Read, "[local_experts, H]"});
  abi.gridX = "H / " + std::to_string(tile.getN());
  abi.gridY = tileGridY(tile);
  abi.gridZ = std::to_string(op.getSplitK());
  return abi;
}

FailureOr<gpu::GPUModuleOp> buildW2Kernel(OpBuilder &builder, moe::W2Op op) {
  if (failed(refuseUnscaledActivations(
          op, op.getProblem(), op.getPeerAttr() || op.getSharedFp8Expert())))
    return failure();
  return W2Emitter(builder, op).emit();
}

} // namespace moec
