//===- CompileCache.h - content-addressed cache of code objects -*- C++ -*-===//
///
/// \file
/// Code objects keyed by everything that decides their bytes: the kernel IR
/// they are compiled from (MLIR bytecode, locations stripped), the kernel's
/// stage, attributes and ABI, and the compiler's fingerprint (the moec
/// executable's own bytes, so a rebuilt compiler never reuses an entry, plus
/// the LLVM version and target). One file per entry, written to a temporary
/// name and renamed; each carries the XXH64 of its payload, and an entry
/// whose checksum, size or header does not match is treated as a miss (and
/// rewritten). Over the size limit, the least recently used entries go.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_COMPILECACHE_H
#define MOEC_COMPILER_COMPILECACHE_H

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace moec {

class CompileCache {
public:
  /// The default directory: $MOEC_CACHE_DIR, else $XDG_CACHE_HOME/moec,
  /// else $HOME/.cache/moec ("" when none is set).
  static std::string defaultDirectory();
  /// The default size limit: $MOEC_CACHE_MAX_BYTES, else 2 GiB.
  static uint64_t defaultMaxBytes();
  /// Everything about this compiler that changes its output (hashes the
  /// running executable once).
  static const std::string &compilerFingerprint();

  CompileCache(std::string directory, uint64_t maxBytes)
      : directory_(std::move(directory)), maxBytes_(maxBytes) {}

  /// The key of a kernel: 32 hex digits over its IR and description.
  static std::string key(const std::vector<uint8_t> &kernelIr,
                         const std::string &description);

  /// The cached code object, or nothing (missing, or corrupted: then the
  /// bad entry is removed and counted).
  std::optional<std::vector<uint8_t>> load(const std::string &key);
  /// Stores a code object (best effort: a cache that cannot be written
  /// only costs a recompile next time).
  void store(const std::string &key, const std::vector<uint8_t> &object);
  /// Drops least recently used entries until the cache is within its limit.
  void trim();

  uint64_t corruptEntries() const { return corrupt_; }

private:
  std::string path(const std::string &key) const;
  std::string directory_;
  uint64_t maxBytes_;
  std::mutex mutex_;
  uint64_t corrupt_ = 0;
};

} // namespace moec

#endif // MOEC_COMPILER_COMPILECACHE_H
