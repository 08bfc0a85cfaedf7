//===- Program.h - a gpu.func decoded for execution -------------*- C++ -*-===//
///
/// \file
/// Internal to the emulator. Program.cpp walks the gpu.func once and decodes
/// every op into a POp: its kind, value slots, and the attributes its
/// semantics need. The Executor (Executor.h) then runs POps without touching
/// MLIR, so the hot loop is plain C++ and the interpreter compiles quickly.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_EMULATOR_LIB_PROGRAM_H
#define MOEC_EMULATOR_LIB_PROGRAM_H

#include "moec/target/mfma_layout.h"
#include "moec/Emulator/Emulator.h"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace mlir {
class Operation;
} // namespace mlir

namespace moec::emu::detail {

/// Scalar element kinds the emulator computes with.
enum class Elem : uint8_t {
  Int,  ///< iN and index (index is 64 bits)
  F32,
  F64,
  BF16,
  F8E4M3FN, ///< converted to and from (truncf / extf), never computed in
  Other, ///< stored and moved, never computed (f8, f4, E8M0)
};

/// Memory spaces of memref values.
enum class Space : uint8_t { Global, RawBuffer, Lds };

/// How one SSA value is stored per lane.
struct ValueInfo {
  Elem elem = Elem::Int;
  /// Integer width (1..64) for Elem::Int; the float width otherwise.
  unsigned width = 0;
  /// Storage bits of one element: 4, 8, 16, 32 or 64 (i1 takes 8).
  unsigned elemBits = 0;
  /// Elements per lane (1 for scalars).
  unsigned count = 1;
  /// ceil(count * elemBits / 8); 0 for memrefs.
  unsigned laneBytes = 0;
  bool isMemRef = false;
  // Memrefs: static shape (row-major, identity layout) and element bytes.
  Space space = Space::Global;
  std::vector<int64_t> shape;
  unsigned memElemBytes = 0;
};

enum class Kind : uint8_t {
  Constant,
  IntBinary,
  CmpI,
  IntCast, ///< extui, extsi, trunci, index_cast, index_castui
  Bitcast, ///< arith.bitcast and vector.bitcast (same bytes per lane)
  Select,
  FloatBinary,
  FloatUnary,
  FloatCast, ///< extf, truncf
  Interleave,
  MemLoad,   ///< memref.load and vector.load
  MemStore,  ///< memref.store and vector.store
  AtomicRmw, ///< memref.atomic_rmw
  Shuffle,
  Extract,
  ExtractSlice,
  Insert,
  Broadcast,
  ThreadId,
  BlockId,
  BlockDim,
  GridDim,
  Barrier,
  NoOp,
  Return,
  FatRawBufferCast,
  /// memref.view of a global i8 memref: in[0] the source, in[1] the byte
  /// shift (no dynamic sizes).
  MemView,
  ScaledMfma,
  If,
  For,
  While,     ///< scf.while: regions[0] the before block, regions[1] the after
  Condition, ///< scf.condition: in[0] the condition, then forwarded values
  Yield,
  Sleep,     ///< rocdl.s.sleep: gives the scheduler its turn back
  /// amdgpu.gather_to_lds: in[0] the source, in[1 .. 1 + ints[1]) its
  /// indices, then the LDS destination and its indices; ints[0] the bytes
  /// each lane moves.
  GatherToLds,
};

enum class IntOp : uint8_t {
  Add, Sub, Mul, DivU, DivS, RemU, RemS, MinU, MaxU, MinS, MaxS, And, Or, Xor,
  Shl, ShrU, ShrS, CeilDivU, FloorDivS, CeilDivS,
};
enum class FloatOp : uint8_t {
  Add, Sub, Mul, Div, MaxNum, MinNum, Maximum, Minimum,
};
enum class AtomicOp : uint8_t {
  AddI, MulI, MaxS, MaxU, MinS, MinU, AndI, OrI, XorI, Assign,
  AddF, MaximumF, MinimumF, MaxNumF, MinNumF,
};
enum class FloatUnaryOp : uint8_t { Abs, Neg, Exp2 };
/// Same numbering as arith::CmpIPredicate.
enum class CmpPred : uint8_t { Eq, Ne, Slt, Sle, Sgt, Sge, Ult, Ule, Ugt, Uge };

/// One decoded op.
struct POp {
  mlir::Operation *op = nullptr;
  Kind kind = Kind::NoOp;
  /// IntOp, FloatOp, FloatUnaryOp, AtomicOp, CmpPred, or for IntCast: 0 zero-extend, 1 sign-extend.
  uint8_t sub = 0;
  std::vector<unsigned> in;
  std::vector<unsigned> out;
  /// Blocks of scf.if (then, else; -1 when empty), scf.for (body, -1) or
  /// scf.while (before, after).
  int regions[2] = {-1, -1};
  /// Kind-specific integers: shuffle mask, extract position, slice offset,
  /// gpu dimension, scaled-MFMA parameters (m, k, scalesIdxA, scalesIdxB,
  /// format A, format B), fat_raw_buffer_cast's "has validBytes",
  /// gather_to_lds's (transfer bytes, source rank).
  std::vector<int64_t> ints;
  /// Constant bytes in the value's per-lane layout.
  std::vector<uint8_t> constant;
};

/// One block: its ops in order and its argument slots.
struct PBlock {
  std::vector<unsigned> ops;
  std::vector<unsigned> args;
};

/// A decoded gpu.func.
struct Program {
  std::string kernelName;
  std::vector<ValueInfo> values;
  std::vector<POp> ops;
  std::vector<PBlock> blocks;
  /// Entry block index and the slots of the kernel arguments.
  unsigned entry = 0;
  std::vector<unsigned> argSlots;
  /// LDS attributions: slot, byte offset in the workgroup's LDS, bytes.
  struct LdsRegion {
    unsigned slot;
    int64_t offset;
    int64_t bytes;
  };
  std::vector<LdsRegion> lds;
  int64_t ldsBytes = 0;
  /// known_block_size, or zeros.
  std::array<int64_t, 3> knownBlockSize{{0, 0, 0}};
};

/// Decodes `func`; fails with `error` naming the first unsupported op or type.
mlir::LogicalResult decodeProgram(mlir::gpu::GPUFuncOp func, Program &program,
                                  std::string &error);

/// "loc" and op name of `op`, for findings and errors.
std::string describeLocation(mlir::Operation *op);
std::string describeOpName(mlir::Operation *op);

/// One launch of a run: a decoded program, its arguments and geometry.
struct LaunchInput {
  const Program *program = nullptr;
  llvm::ArrayRef<KernelArgValue> args;
  const LaunchConfig *launch = nullptr;
  std::string label;
};

/// Executes the launches at once in one cooperative scheduler over `memory`
/// (Schedule.cpp).
mlir::FailureOr<RunResult> execute(llvm::ArrayRef<LaunchInput> launches,
                                   GlobalMemory &memory, std::string &error);

} // namespace moec::emu::detail

#endif // MOEC_EMULATOR_LIB_PROGRAM_H
