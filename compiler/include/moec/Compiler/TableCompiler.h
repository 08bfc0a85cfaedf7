//===- TableCompiler.h - tuning table -> compiled kernels -> bundle -*- C++ -*-===//
///
/// \file
/// Compiles every unique kernel of a tuning table, gates its resources, and
/// builds the bundle manifest.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_TABLECOMPILER_H
#define MOEC_COMPILER_TABLECOMPILER_H

#include "moec/Codegen/KernelAbi.h"
#include "moec/Compiler/TuningTable.h"
#include "moec/manifest.h"

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace moec {

/// One unique kernel of a table, compiled.
struct CompiledKernel {
  /// The table kernels that resolved to this binary (deduplicated).
  std::vector<std::string> tableNames;
  /// ELF symbol: a readable name that encodes the problem and every knob.
  std::string symbol;
  /// symbol plus the first 8 hex digits of the content hash, so a name never
  /// refers to two different binaries.
  std::string name;
  std::string stage;
  /// Effective knob values (defaults filled in), as text.
  std::vector<std::pair<std::string, std::string>> config;
  KernelAbi abi;
  rt::KernelResources resources;
  std::vector<uint8_t> hsaco;
  /// XXH64 of the HSACO, 16 hex digits.
  std::string contentHash;
  SourceLine where;
};

struct CompiledTable {
  std::vector<CompiledKernel> kernels;
  /// Table kernel name -> index into kernels.
  std::map<std::string, size_t> kernelIndex;
};

/// XXH64 of `size` bytes as 16 hex digits: content hashes and fingerprints.
std::string hashHex(const void *data, size_t size);

/// Exit-status classes of a compile (docs/cli.md).
enum class CompileStatus { Ok = 0, CheckFailed = 1, BadInput = 2 };

struct CompileOptions {
  /// Accept kernels that spill registers (the resource gate otherwise fails).
  bool allowSpills = false;
};

/// Builds, verifies, lowers and compiles every kernel of `table`, then gates
/// its resources: no spills (unless allowed), no scratch, LDS within the
/// chip. On failure `error` is one line naming the file, line and field or
/// kernel.
CompileStatus compileTable(const TuningTable &table,
                           const CompileOptions &options,
                           CompiledTable &compiled, std::string &error);

/// The bundle manifest (schema v1, docs/bundle-format.md) of a compiled
/// table; `tableText` is hashed into the provenance of the sources.
std::string buildManifestJson(const TuningTable &table,
                              const CompiledTable &compiled,
                              const std::string &tableText);

/// The code objects in manifest order (kernel i uses code object i).
std::vector<std::vector<uint8_t>> collectCodeObjects(const CompiledTable &compiled);

} // namespace moec

#endif // MOEC_COMPILER_TABLECOMPILER_H
