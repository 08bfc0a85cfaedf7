//===- CachePolicy.cpp - SC0/SC1 bits on weight loads ---------------------===//
///
/// \file
/// MLIR's memref and vector loads know "non-temporal" and nothing else, so
/// the codegen marks a kernel's weight loads non-temporal and names the bits
/// it wants in a function attribute. Here, after the buffer fat pointers
/// become llvm.amdgcn.raw.ptr.buffer.load calls (which keep !nontemporal as
/// metadata, turned into the NT bit only at instruction selection), those
/// loads get the requested SC0/SC1 bits in their aux operand and lose the
/// metadata.
///
//===----------------------------------------------------------------------===//

#include "CachePolicy.h"

#include "moec/Codegen/KernelAbi.h"

#include "llvm/IR/Constants.h"
#include "llvm/IR/InstIterator.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/IntrinsicInst.h"
#include "llvm/IR/IntrinsicsAMDGPU.h"
#include "llvm/IR/Module.h"
#include "llvm/Passes/PassBuilder.h"

namespace moec {
namespace {

bool isBufferLoad(llvm::Intrinsic::ID id) {
  return id == llvm::Intrinsic::amdgcn_raw_ptr_buffer_load ||
         id == llvm::Intrinsic::amdgcn_raw_buffer_load;
}

} // namespace

void applyWeightCachePolicy(llvm::Module &module, llvm::PassBuilder &builder,
                            llvm::ModuleAnalysisManager &analyses) {
  bool any = false;
  for (llvm::Function &function : module)
    any |= function.hasFnAttribute(kBCachePolicyAttr);
  if (!any)
    return;
  llvm::ModulePassManager lower;
  if (llvm::Error error =
          builder.parsePassPipeline(lower, "amdgpu-lower-buffer-fat-pointers")) {
    // Without the pass the loads keep their NT bit: still correct code.
    llvm::consumeError(std::move(error));
    return;
  }
  lower.run(module, analyses);
  for (llvm::Function &function : module) {
    llvm::Attribute attr = function.getFnAttribute(kBCachePolicyAttr);
    if (!attr.isStringAttribute())
      continue;
    uint64_t bits = 0;
    if (attr.getValueAsString().getAsInteger(10, bits))
      continue;
    for (llvm::Instruction &inst : llvm::instructions(function)) {
      auto *call = llvm::dyn_cast<llvm::IntrinsicInst>(&inst);
      if (!call || !isBufferLoad(call->getIntrinsicID()))
        continue;
      if (!call->getMetadata(llvm::LLVMContext::MD_nontemporal))
        continue;
      // Operands: resource, offset, soffset, aux.
      unsigned auxIndex = call->arg_size() - 1;
      auto *aux = llvm::dyn_cast<llvm::ConstantInt>(call->getArgOperand(auxIndex));
      if (!aux)
        continue;
      call->setArgOperand(
          auxIndex, llvm::ConstantInt::get(aux->getType(), aux->getZExtValue() | bits));
      call->setMetadata(llvm::LLVMContext::MD_nontemporal, nullptr);
    }
  }
}

} // namespace moec
