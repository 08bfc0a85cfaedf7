//===- KernelEmitter.h - builder shorthands of the kernel emitters -*- C++ -*-===//
///
/// \file
/// What every stage's emitter needs: index arithmetic, global and LDS buffer
/// types, raw-buffer casts, 16-byte accesses and the kernel skeleton checked
/// against its ABI.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_CODEGEN_LIB_KERNELEMITTER_H
#define MOEC_CODEGEN_LIB_KERNELEMITTER_H

#include "moec/Codegen/KernelAbi.h"
#include "moec/Dialect/Moe/MoeTarget.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

namespace moec {

/// Builder shorthands every kernel emitter uses: index arithmetic, buffer
/// types, raw-buffer casts and 16-byte accesses.
class KernelEmitter {
public:
  /// An emitter for the kernel of stage op `op`, on the chip around it.
  KernelEmitter(mlir::OpBuilder &builder, mlir::Operation *op)
      : b(builder), loc(op->getLoc()), chip(moe::getVerifiedTarget(op)) {}

protected:
  mlir::Value idx(int64_t value);
  mlir::Value add(mlir::Value x, mlir::Value y);
  mlir::Value mul(mlir::Value x, int64_t c);
  mlir::Value mul(mlir::Value x, mlir::Value y);
  mlir::Value divC(mlir::Value x, int64_t c);
  mlir::Value remC(mlir::Value x, int64_t c);
  mlir::Value i32(int64_t value);
  mlir::Value i64(int64_t value);
  mlir::Value toIndex(mlir::Value i32Value);

  mlir::MemRefType globalBuffer(int64_t elements, mlir::Type elementType);
  mlir::MemRefType ldsBuffer(int64_t dwords);
  /// Wraps a kernel argument as a raw-buffer fat pointer; `validBytes` (i64,
  /// may be null) bounds it for the hardware range check.
  mlir::Value asBuffer(mlir::Value memref, mlir::Value validBytes);
  /// countI32 * bytesPerItem as i64.
  mlir::Value bytesOf(mlir::Value countI32, int64_t bytesPerItem);
  mlir::Value load16(mlir::Value memref, mlir::Value dwordIndex,
                     bool nontemporal = false);
  void store16(mlir::Value value, mlir::Value memref, mlir::Value dwordIndex);
  /// The 32 FP32 values of one 1x32 block staged in LDS from dword
  /// `firstDword`, as the 8 vector<4xf32> the block quantisers take.
  llvm::SmallVector<mlir::Value, 8> loadF32Block(mlir::Value lds,
                                                 mlir::Value firstDword);
  /// memref.atomic_rmw addi on element `index` of an i32 global buffer
  /// (acquire-release, system scope once lowered); returns the old value.
  mlir::Value atomicAddI32(mlir::Value memref, mlir::Value index,
                           mlir::Value amountI32);
  /// Emits `body` under scf.if (tid == 0).
  void onThreadZero(mlir::Value tid, llvm::function_ref<void()> body);
  /// Thread 0 polls the i32 word until `word - target >= 0` (signed, so
  /// monotonic counters may wrap), sleeping between polls; then a
  /// workgroup barrier so every wave sees what the signaller wrote.
  void emitWaitUntil(mlir::Value tid, mlir::Value memref, mlir::Value index,
                     mlir::Value targetI32);

  /// Quantises one 1x32 block, given as 8 vector<4xf32> in column order,
  /// with the activation recipe (scale 2^ceil(log2(max(amax, 1e-4) / 448)),
  /// biased exponent clamped to [1, 254], derived exactly from the FP32 bits
  /// of amax; codes rounded to nearest even): stores the 32 FP8 codes as two
  /// 16-byte stores at i32 element `outDword` of `outBuf` and the E8M0 byte
  /// at element `scaleIndex` of the i8 buffer `outScaleBuf`. moe.w13's
  /// intermediate and moe.quant's tokens share it, so W2 and W13 read
  /// blocks quantised by one rule.
  void storeFp8Block(llvm::ArrayRef<mlir::Value> values, mlir::Value outBuf,
                     mlir::Value outDword, mlir::Value outScaleBuf,
                     mlir::Value scaleIndex);

  /// One 1x32 block quantised by storeFp8Block's rule, not yet stored.
  struct Fp8Block {
    /// The 32 FP8 codes as two vector<4xi32> (16 bytes each), in order.
    mlir::Value chunks[2];
    /// The E8M0 scale code (i8).
    mlir::Value scale;
  };
  /// Quantises one 1x32 block (8 vector<4xf32> in column order) as
  /// storeFp8Block does, for a caller that stores it elsewhere (the fused
  /// stage 2's FP8 payload rows).
  Fp8Block quantiseFp8Block(llvm::ArrayRef<mlir::Value> values);

  /// Quantises one 1x32 block, given as 8 vector<4xf32> in column order, to
  /// MXFP4 with the A4W4 activation rule (AITER's `_mxfp4_quant_op`,
  /// docs/numerics.md): E8M0 code = the biased exponent of amax after
  /// adding 0x200000 to its FP32 bits, minus 2, clamped to [0, 254] (254
  /// when the rounding leaves FP32's range); elements RNE(x / scale) to
  /// E2M1, saturating at 6, by integer comparisons of the exact quotient's
  /// bits with the E2M1 rounding boundaries. A block holding NaN or Inf gets
  /// code 0xFF and zero elements. Stores the 16 packed bytes (element 2j in
  /// the low nibble) as one 16-byte store at i32 element `outDword` of
  /// `outBuf` and the E8M0 byte at element `scaleIndex` of `outScaleBuf`.
  void storeFp4Block(llvm::ArrayRef<mlir::Value> values, mlir::Value outBuf,
                     mlir::Value outDword, mlir::Value outScaleBuf,
                     mlir::Value scaleIndex);

  /// A gpu.module named `name` with one kernel gpu.func of `argTypes`, the
  /// workgroup size of `abi` and `ldsDwords` of LDS (none when 0). The
  /// builder is left at the start of the function body. Fails (with an
  /// error) when `argTypes` disagree with `abi` in count or kind, so the
  /// manifest can never describe a signature the kernel does not have.
  mlir::FailureOr<mlir::gpu::GPUFuncOp>
  createKernel(llvm::StringRef name, llvm::ArrayRef<mlir::Type> argTypes,
               const KernelAbi &abi, int64_t ldsDwords);

  mlir::OpBuilder &b;
  mlir::Location loc;
  /// The chip the kernel is for (wave size, XCDs, cache-policy bits).
  const target::TargetInfo &chip;
};

} // namespace moec

#endif // MOEC_CODEGEN_LIB_KERNELEMITTER_H
