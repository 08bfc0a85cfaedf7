//===- CachePolicy.h - SC0/SC1 bits on weight loads -------------*- C++ -*-===//

#ifndef MOEC_COMPILER_LIB_CACHEPOLICY_H
#define MOEC_COMPILER_LIB_CACHEPOLICY_H

#include "llvm/IR/PassManager.h"

namespace llvm {
class Module;
class PassBuilder;
} // namespace llvm

namespace moec {

/// For every kernel carrying kBCachePolicyAttr (tile.b_cache = sc0, sc1 or
/// sc0_sc1): lowers the module's buffer fat pointers to buffer intrinsics
/// (the AMDGPU pass the backend would run anyway) and gives each of the
/// kernel's non-temporal buffer loads, which are its weight loads, the
/// attribute's cache-policy bits instead of NT. A module without such a
/// kernel is left alone.
void applyWeightCachePolicy(llvm::Module &module, llvm::PassBuilder &builder,
                            llvm::ModuleAnalysisManager &analyses);

} // namespace moec

#endif // MOEC_COMPILER_LIB_CACHEPOLICY_H
