//===- manifest.h - bundle manifest schema v1 as plain structs --*- C++ -*-===//
//
// The manifest is the JSON section of a bundle (docs/bundle-format.md,
// "Manifest schema v1"). The compiler builds the JSON; the runtime parses it
// into these structs, checks every cross reference, and tolerates fields it
// does not know.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_MANIFEST_H
#define MOEC_MANIFEST_H

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace moec::rt {

/// Kind of one kernel argument (the kernarg layout is derived from it).
enum class ArgKind { Buffer, I32, I64 };
/// How a kernel uses a buffer argument.
enum class ArgAccess { None, Read, Write, ReadWrite };

/// One kernel argument, in kernarg order.
struct KernelArgInfo {
  std::string name;
  ArgKind kind = ArgKind::Buffer;
  std::string dtype;
  ArgAccess access = ArgAccess::None;
};

/// Launch geometry: a fixed workgroup size and the grid rule text per
/// dimension (evaluated by computeLaunchGrid in grid_rule.h).
struct LaunchInfo {
  std::array<uint32_t, 3> workgroupSize{{1, 1, 1}};
  std::string gridX, gridY, gridZ;
};

/// Resource metadata read back from NT_AMDGPU_METADATA by the compiler.
struct KernelResources {
  uint32_t vgpr = 0;
  uint32_t agpr = 0;
  uint32_t sgpr = 0;
  uint32_t ldsBytes = 0;
  uint32_t privateSegmentBytes = 0;
  uint32_t vgprSpill = 0;
  uint32_t sgprSpill = 0;
  uint32_t wavefrontSize = 64;
  uint32_t maxFlatWorkgroupSize = 0;
};

/// One kernel of the bundle.
struct KernelInfo {
  std::string name;       ///< readable config name with a content-hash suffix
  std::string symbol;     ///< ELF symbol in the code object
  uint32_t codeObject = 0; ///< index into the code-object table
  std::string stage;      ///< "w13", "w2", "combine", ...
  /// Tuning knobs as (name, canonical JSON text of the value), sorted by name.
  std::vector<std::pair<std::string, std::string>> config;
  std::vector<KernelArgInfo> abi;
  LaunchInfo launch;
  KernelResources resources;
  std::string contentHash;
};

/// Where a table row's configuration came from.
enum class Provenance { Measured, ModelRanked };

/// A configuration: the kernels one selection launches, in launch order.
struct ConfigInfo {
  std::string id;
  std::vector<uint32_t> kernels;
  Provenance provenance = Provenance::Measured;
};

/// Kernel family a selection table belongs to.
enum class KernelFamily { MegaMoe, Tp, FhMoe };
/// Dispatch transport of a MegaMoE table ("none" for TP/FHMoE).
enum class Transport { FixedSlot, Compact, None };
/// What happens when M is above the largest row.
enum class AboveMaxPolicy {
  Largest, ///< explicit fallback to the largest row, flagged in the result
  Error,   ///< a miss
};

/// One row: M bucket -> configuration index.
struct SelectionRow {
  uint32_t m = 0;
  uint32_t config = 0;
};

/// One selection table, keyed by (network, ep, workspace class).
struct SelectionTable {
  std::string network;
  KernelFamily family = KernelFamily::MegaMoe;
  uint32_t ep = 1;
  uint32_t workspace = 0;
  Transport transport = Transport::None;
  AboveMaxPolicy aboveMax = AboveMaxPolicy::Largest;
  std::vector<SelectionRow> rows; ///< strictly increasing m
};

struct TargetDescription {
  std::string arch;
  std::string features;
  uint32_t codeObjectVersion = 0;
};

struct CompilerDescription {
  std::string name;
  std::string version;
  std::string llvm;
  std::string fingerprint;
};

struct SourceFile {
  std::string path;
  std::string hash;
};

/// The parsed manifest.
struct Manifest {
  uint32_t bundleFormatVersion = 0; ///< "bundle_format.version", added by the writer
  TargetDescription target;
  CompilerDescription compiler;
  /// "numerics" entries as (key, value); string values verbatim, others as JSON text.
  std::vector<std::pair<std::string, std::string>> numerics;
  std::vector<SourceFile> sources;
  std::vector<KernelInfo> kernels;
  std::vector<ConfigInfo> configs;
  std::vector<SelectionTable> selection;
};

/// Parses and validates manifest JSON text. `codeObjectCount` bounds the
/// kernels' code_object indices. Checks types of every known field, unique
/// kernel names and config ids, every index, and the selection tables (see
/// validateSelectionTables). On failure returns false with a one-line
/// `error` naming the field, e.g. "kernels[3].resources.vgpr: expected an
/// unsigned integer".
bool parseManifest(std::string_view jsonText, uint32_t codeObjectCount,
                   Manifest &out, std::string &error);

const char *kernelFamilyName(KernelFamily family) noexcept;
const char *transportName(Transport transport) noexcept;
const char *aboveMaxPolicyName(AboveMaxPolicy policy) noexcept;
const char *provenanceName(Provenance provenance) noexcept;
const char *argKindName(ArgKind kind) noexcept;
const char *argAccessName(ArgAccess access) noexcept;

} // namespace moec::rt

#endif // MOEC_MANIFEST_H
