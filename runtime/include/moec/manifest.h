//===- manifest.h - bundle manifest schema v1 as plain structs --*- C++ -*-===//
//
// The manifest is the JSON section of a bundle (docs/bundle-format.md,
// "Manifest schema v1"). The runtime owns the schema: the compiler fills a
// Manifest and writes it with serializeManifest; readers parse it back with
// parseManifest, which checks every field and cross reference.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_MANIFEST_H
#define MOEC_MANIFEST_H

#include "moec/abi/kernel_args.h"
#include "moec/abi/stage.h"
#include "moec/grid_program.h"
#include "moec/target/target_info.h"

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace moec::rt {

/// The kernel argument types live in the leaf ABI library, which the
/// codegen shares without depending on the runtime.
using abi::ArgAccess;
using abi::ArgKind;
using abi::KernelArgInfo;
using abi::argAccessName;
using abi::argKindName;
using abi::Stage;
using abi::stageName;

/// Launch geometry: a fixed workgroup size and the grid rule text per
/// dimension (evaluated by computeLaunchGrid in grid_rule.h).
struct LaunchInfo {
  std::array<uint32_t, 3> workgroupSize{{1, 1, 1}};
  std::string gridX, gridY, gridZ;
  /// gridX, gridY, gridZ compiled by parseManifest, so computeLaunchGrid
  /// neither parses nor allocates; not serialised. Empty for a missing rule.
  std::array<GridProgram, 3> gridPrograms;
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
  /// The code object's `.wavefront_size`; absent in a manifest: the wave
  /// size of the manifest's part (parseManifest fills it in). 0: not known.
  uint32_t wavefrontSize = 0;
  uint32_t maxFlatWorkgroupSize = 0;
};

/// Where a kernel's kernel-level IR (MLIR bytecode of its gpu.module, as
/// the code object was compiled from) is stored.
struct KernelIrInfo {
  /// Index into the code-object table of an entry with encoding
  /// kEncodingMlirBytecode; kNoKernelIr when the bundle holds no IR.
  uint32_t object = kNoKernelIr;
  /// XXH64 of the IR bytes, 16 hex digits.
  std::string hash;
  static constexpr uint32_t kNoKernelIr = UINT32_MAX;
  bool present() const { return object != kNoKernelIr; }
};

/// A hazard the compiler's ISA gate repaired in a kernel
/// (docs/isa-verification.md): `waitStates` inserted as s_nops before the
/// instruction at `address` of the code LLVM emitted, because `rule` fired.
struct IsaRepairInfo {
  uint32_t address = 0;
  uint32_t waitStates = 0;
  std::string rule;
};

/// One kernel of the bundle.
struct KernelInfo {
  std::string name;       ///< readable config name with a content-hash suffix
  std::string symbol;     ///< ELF symbol in the code object
  uint32_t codeObject = 0; ///< index into the code-object table
  /// The manifest's "stage" text, parsed at open (unknown names are
  /// refused there).
  Stage stage = Stage::Quant;
  /// The stage op's attributes as the moe dialect prints them, sorted by
  /// name ("tile" -> "#moe.tile<m = 16, n = 64, b_cache = nt>"): the
  /// kernel can be rebuilt or inspected from them exactly.
  std::vector<std::pair<std::string, std::string>> attributes;
  std::vector<KernelArgInfo> abi;
  LaunchInfo launch;
  KernelResources resources;
  std::string contentHash;
  /// How the kernel reads its expert weights, for weight preparation
  /// ("w2_expert_n_k_e2m1x2_low_nibble_first"); empty without weights.
  std::string weightLayout;
  /// The tuning-table kernels this binary serves (deduplicated).
  std::vector<std::string> tableNames;
  KernelIrInfo ir;
  /// The hazards the ISA gate repaired in this kernel; empty: none fired.
  std::vector<IsaRepairInfo> isaRepairs;
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

/// Why a row selects its configuration (docs/bundle-format.md): ranked by
/// a cost model (its name and version and predicted time) or measured on a
/// device (device, method, date and measured time). Times are microseconds;
/// a negative time is absent.
struct RowProvenance {
  bool present = false;
  Provenance kind = Provenance::ModelRanked;
  std::string model;
  double predictedUs = -1;
  std::string device, method, date;
  double measuredUs = -1;
  bool operator==(const RowProvenance &other) const {
    return present == other.present && kind == other.kind &&
           model == other.model && predictedUs == other.predictedUs &&
           device == other.device && method == other.method &&
           date == other.date && measuredUs == other.measuredUs;
  }
};

/// One row: M bucket -> configuration index.
struct SelectionRow {
  uint32_t m = 0;
  uint32_t config = 0;
  RowProvenance provenance;
};

/// One selection table, keyed by (network, ep, workspace class).
struct SelectionTable {
  std::string network;
  KernelFamily family = KernelFamily::MegaMoe;
  uint32_t ep = 1;
  uint32_t workspace = 0;
  Transport transport = Transport::None;
  AboveMaxPolicy aboveMax = AboveMaxPolicy::Largest;
  /// A fused table's capacity: the most source tokens per rank its peer
  /// kernels are built for (their smallest max_tokens). An M above it is
  /// refused whatever above_max says, since the kernels' buffers would
  /// overflow. 0: no capacity (unfused, TP and FHMoE tables).
  uint32_t maxTokens = 0;
  std::vector<SelectionRow> rows; ///< strictly increasing m
};

struct TargetDescription {
  std::string arch;
  std::string features;
  uint32_t codeObjectVersion = 0;
  /// CUs of the part the bundle was compiled for ("compute_units": 256 for
  /// MI355X, 128 for MI350P); 0 when the manifest does not say, which a
  /// bundle written before parts were recorded means: the arch's first
  /// part (256 CUs for gfx950).
  uint32_t computeUnits = 0;
};

/// The part a manifest's target names (its arch and CU count;
/// target::lookupPart), or nullptr when moec knows no such part.
inline const target::TargetInfo *partOf(const TargetDescription &target) {
  return target::lookupPart(target.arch, target.computeUnits);
}

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

/// One row of an AITER tuned fused-MoE CSV (docs/aiter-tables.md): its
/// lookup key in the CSV's own spellings, what it names, and the moec
/// configuration compiled for it, or why none was. Rows are kept in the
/// merged files' order with AITER's duplicates and `_tag ==
/// flydsl_fallback` rows already removed, so the first row matching a key
/// is the one AITER uses.
struct AiterRowInfo {
  std::string gfx;
  uint32_t cuNum = 0;
  uint32_t token = 0;
  uint32_t modelDim = 0, interDim = 0, expert = 0, topk = 0;
  std::string actType, dtype, qDtypeA, qDtypeW, qType;
  uint32_t useG1u1 = 0, doweightStage1 = 0;
  /// The FHMoE variant (tuned_fhmoe.csv): the four columns below are part
  /// of the key and there is no act_type or tier fallback.
  bool fhmoe = false;
  uint32_t sharedExpertId = 0, hiddenPad = 0, intermediatePad = 0;
  std::string gateMode;
  std::string kernelName1, kernelName2;
  uint32_t blockM = 0, ksplit = 0;
  /// Index into Manifest::sources (the CSV) and the row's line in it
  /// (header = line 1).
  uint32_t source = 0;
  uint32_t line = 0;
  /// The configuration compiled for the row, or kNoConfig with `skipped`
  /// saying why (an unsupported backend, activation or name part).
  uint32_t config = kNoConfig;
  std::string skipped;
  /// Parts of the row moec reproduces differently (docs/aiter-tables.md).
  std::vector<std::string> notes;
  /// A compiled row's kernel of another family (CK, opus) that moec's own
  /// kernel of the same stage, tile and dtypes serves: the AITER name
  /// (kernelName1 or kernelName2), empty when AITER's own name was
  /// compiled. Manifest field substituted_from {kernelName1, kernelName2}.
  std::string substitutedFrom1, substitutedFrom2;
  static constexpr uint32_t kNoConfig = UINT32_MAX;
  bool compiled() const { return config != kNoConfig; }
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
  /// Rows of AITER tuned CSVs a bundle was compiled from ("aiter_rows",
  /// written only when non-empty).
  std::vector<AiterRowInfo> aiterRows;
};

/// Parses and validates manifest JSON text. `codeObjectCount` bounds the
/// kernels' code_object indices. Checks types of every known field, unique
/// kernel names and config ids, every index, and the selection tables (see
/// validateSelectionTables). On failure returns false with a one-line
/// `error` naming the field, e.g. "kernels[3].resources.vgpr: expected an
/// unsigned integer".
bool parseManifest(std::string_view jsonText, uint32_t codeObjectCount,
                   Manifest &out, std::string &error);

/// The canonical JSON text of `manifest` (sorted keys, no whitespace):
/// what the compiler writes and parseManifest reads back into an equal
/// Manifest. bundleFormatVersion is written when non-zero.
std::string serializeManifest(const Manifest &manifest);

/// parseManifest, then the parsed manifest serialised again must equal
/// `jsonText` byte for byte: the only text a bundle may store is what the
/// writer produces (known fields only, sorted keys, no whitespace, no
/// byte-order mark, no duplicate keys, every optional field written). A
/// difference is refused naming its byte offset: "not in canonical form at
/// byte 17 (...)". Throws nothing.
bool parseCanonicalManifest(std::string_view jsonText, uint32_t codeObjectCount,
                            Manifest &out, std::string &error);

const char *kernelFamilyName(KernelFamily family) noexcept;
const char *transportName(Transport transport) noexcept;
const char *aboveMaxPolicyName(AboveMaxPolicy policy) noexcept;
const char *provenanceName(Provenance provenance) noexcept;

} // namespace moec::rt

#endif // MOEC_MANIFEST_H
