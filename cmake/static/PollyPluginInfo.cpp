//===- PollyPluginInfo.cpp - Polly's plugin hook for a static moec --------===//
///
/// \file
/// Debian builds LLVM with Polly linked into the tools, so libLLVMLTO.a
/// references getPollyPluginInfo(), which Debian ships only inside the LLVM
/// dylib. moec never runs Polly; this empty plugin satisfies the reference
/// when moec-static links the LLVM archives.
///
//===----------------------------------------------------------------------===//

#include "llvm/Plugins/PassPlugin.h"

llvm::PassPluginLibraryInfo getPollyPluginInfo() {
  return {LLVM_PLUGIN_API_VERSION, "Polly (absent)", "none",
          [](llvm::PassBuilder &) {}};
}
