//===- AiterCsv.h - AITER's tuned fused-MoE CSV as a tuning table -*- C++ -*-===//
///
/// \file
/// Reads AITER's tuned fused-MoE CSVs (tuned_fmoe.csv and the FHMoE variant
/// tuned_fhmoe.csv), merges several as AITER merges them, parses both
/// stages' FlyDSL kernel names into moe-dialect knobs and translates every
/// supported row into a tuning table (problems, quant/sort/w13/w2/combine
/// kernels, one configuration per row) that compileTable compiles; the rows
/// and their keys go into the manifest (Manifest::aiterRows) for AITER's
/// lookup. docs/aiter-tables.md gives the grammar and every rule.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_AITERCSV_H
#define MOEC_COMPILER_AITERCSV_H

#include "moec/Compiler/TableCompiler.h"
#include "moec/Compiler/TuningTable.h"
#include "moec/manifest.h"

#include <map>
#include <string>
#include <vector>

namespace moec {

/// True when `text`'s first line is the header of an AITER tuned fused-MoE
/// CSV (token, model_dim, inter_dim, expert, topk, kernelName1 and
/// kernelName2 among its columns).
bool isAiterCsvHeader(const std::string &text);
/// isAiterCsvHeader of the file's first line; false when it cannot be read.
bool isAiterCsvFile(const std::string &path);

/// One data row as read, before the merge rules.
struct AiterCsvRow {
  std::string file;
  int line = 0;
  std::string tag;
  /// run_1stage, xbf16, flat (0 when the column is absent).
  uint32_t run1Stage = 0, xbf16 = 0, flat = 0;
  /// Why the row cannot be compiled whatever its names say (a flag column
  /// that is not 0 or 1); empty otherwise.
  std::string problem;
  rt::AiterRowInfo info;
  /// The tuner's figures as written (empty when the column is absent):
  /// us1, us2, us in microseconds, err1, err2 as "0.5%". Only the audit
  /// reads them; they never change what is selected.
  std::string us1, us2, us, err1, err2;
};

/// What the merge did, for the compile's report.
struct AiterMergeReport {
  /// "FILE:LINE: ..." lines: rows dropped for `_tag == flydsl_fallback` and
  /// duplicate keys (the first row is kept).
  std::vector<std::string> dropped;
  size_t duplicates = 0, fallbackTags = 0;
};

/// Parses one CSV (header line 1). An unknown spelling of a number, a
/// missing column or a partial FHMoE column set is an error
/// "FILE:LINE: column 'C': ...".
bool parseAiterCsv(const std::string &path, const std::string &text,
                   std::vector<AiterCsvRow> &rows, std::string &error);

/// Reads the files in order and applies AITER's rules: gfx from cu_num
/// where the column is absent or a placeholder, `_tag == flydsl_fallback`
/// rows dropped, duplicate keys keep the first row (an FHMoE duplicate is an
/// error, as AITER raises).
bool readAiterCsvs(const std::vector<std::string> &paths,
                   std::vector<AiterCsvRow> &rows, AiterMergeReport &report,
                   std::string &error);

/// One stage's FlyDSL kernel name parsed into moe-dialect knobs.
struct AiterStageKnobs {
  std::map<std::string, std::string> knobs;
  /// AITER's tile m (for the sort block check).
  int64_t tileM = 0;
  /// _sbm{n}, 0 when absent.
  int64_t sortBlockM = 0;
  /// Stage 1's `_w{n}` (1 without it): the residency cap, and for an FHMoE
  /// row also the register allocator's waves-per-EU hint.
  int64_t wavesPerEu = 0;
  /// Parts reproduced differently (docs/aiter-tables.md).
  std::vector<std::string> notes;
  /// When the name is refused: the reason's class for the per-reason
  /// counts ("family opus", "part '_kw4'", "empty").
  std::string refusalClass;
  /// When the name is of another family (CK ck2stages, opus) and moec's own
  /// kernel for the same stage, tile and dtypes serves it: the AITER name
  /// (recorded as the manifest row's substituted_from); empty for FlyDSL.
  std::string substitutedFrom;
  /// The activation format the stage reads ("fp8": afp8, "fp4": afp4) and,
  /// for stage 1, the intermediate it writes ("fp4" with _fp4, else "fp8";
  /// A4W4 without a suffix: "fp4", the format stage 2 reads).
  std::string aFormat = "fp8", midFormat = "fp8";
  /// The act_type a stage-1 name computes when the name spells it (CK's
  /// `_silu`): the row's act_type must be this one. Empty for names that
  /// leave the activation to the row (FlyDSL, mxmoe).
  std::string actType;
};

/// Parses a stage-1 (`stage` 1) or stage-2 name into moec's knobs. A part
/// moec cannot honour fails with `reason` naming it ("part '_kw4': ...").
/// A name of another family is served by moec's kernel of the same stage,
/// tile and dtypes where the name gives them (out.substitutedFrom), and
/// refused naming the family and why otherwise.
bool parseAiterKernelName(const std::string &name, int stage,
                          AiterStageKnobs &out, std::string &reason);

struct AiterCompileOptions {
  /// Skip unsupported rows (recorded in the manifest with their reason)
  /// instead of failing.
  bool skipUnsupported = false;
  /// No effect: every `_w{n}` and `_xcd{n}` part now compiles exactly.
  /// Accepted so that existing build scripts keep working.
  bool approximateSchedule = false;
  /// The W13 clamp (swiglu_limit knob): for ActivationType.Silu rows 0 is
  /// plain SiLU; ActivationType.Swiglu rows take 7 (AITER's default) when
  /// it is 0. AITER passes it at run time; the CSV does not hold it.
  int64_t swigluLimit = 0;
  /// Compile every row's W13 and W2 with `bias`, taking AITER's per-expert
  /// FP32 biases (bias1, bias2) as the kernels' `bias` argument. AITER
  /// passes them for every per_1x32 FlyDSL row of a BF16 model, but the CSV
  /// does not say whether a model has them; off by default.
  bool bias = false;
  /// SiTUv2's constants for ActivationType.Situv2 rows (W13's situ_beta
  /// and situ_linear_beta): AITER passes them at run time, the CSV does
  /// not hold them. The defaults are its tuner's, DEFAULT_SITUV2_BETA and
  /// DEFAULT_SITUV2_LINEAR_BETA; must be > 0.
  double situBeta = 4.0, situLinearBeta = 25.0;
};

/// The tuning table for the merged rows plus the manifest rows, for `part`:
/// a row compiles only when its gfx is the part's arch and its cu_num the
/// part's CU count. Every row moec cannot compile is listed in
/// `unsupported` ("FILE:LINE: reason"); it is an error unless
/// options.skipUnsupported. `refusalsByReason`, when given, counts the
/// refused rows per reason class ("family opus", "act_type X", ...), a row
/// under each of its reasons. A row with an empty kernel name (one-stage)
/// is refused like any other.
bool buildAiterTable(const std::vector<AiterCsvRow> &rows,
                     const target::TargetInfo &part,
                     const AiterCompileOptions &options, TuningTable &table,
                     std::vector<rt::AiterRowInfo> &manifestRows,
                     std::vector<std::string> &unsupported, std::string &error,
                     std::map<std::string, size_t> *refusalsByReason = nullptr);

/// What a tuner should not have written, found by auditAiterRows. Each
/// warning is "FILE:LINE: columns 'C', ...: what". The audit never changes
/// what is selected.
struct AiterAudit {
  std::vector<std::string> warnings;
  /// `us` below that of a smaller token of the same key.
  size_t fallingUs = 0;
  /// err1 or err2 above AiterAuditOptions::maxErrorPercent.
  size_t highError = 0;
  /// us1, us2 and us all equal to those of a row of another key.
  size_t copiedTimings = 0;
};

struct AiterAuditOptions {
  /// AITER's tuner rejects a kernel whose error ratio exceeds --errRatio,
  /// 0.05 by default (aiter/utility/base_tuner.py): a row above 5 % should
  /// not have been written.
  double maxErrorPercent = 5.0;
};

/// Audits rows (as merged by readAiterCsvs): for one key (the shape
/// columns without token) `us` that falls as the token rises, err1/err2
/// above the threshold, and us1/us2/us copied from a row of another key.
/// Rows without the columns are not audited for them.
AiterAudit auditAiterRows(const std::vector<AiterCsvRow> &rows,
                          const AiterAuditOptions &options = {});

/// The whole of `moec compile A.csv [B.csv ...] -o B.moeb`, for the part
/// CompileOptions::target names (required).
struct AiterCompileSummary {
  size_t rows = 0, compiledRows = 0, skippedRows = 0;
  /// Compiled rows with a kernel of another family served by moec's own
  /// (AiterRowInfo::substitutedFrom1/2).
  size_t substitutedRows = 0;
  AiterMergeReport merge;
  std::vector<std::string> unsupported;
  /// Refused rows per reason class, a row under each of its reasons
  /// (filled even when the compile then fails).
  std::map<std::string, size_t> refusalsByReason;
  /// The audit of the merged rows (auditAiterRows).
  AiterAudit audit;
};
CompileStatus compileAiterCsvsToBundle(const std::vector<std::string> &paths,
                                       const std::string &bundlePath,
                                       const CompileOptions &options,
                                       const AiterCompileOptions &aiterOptions,
                                       CompileSummary &summary,
                                       AiterCompileSummary &aiterSummary,
                                       std::string &error);

} // namespace moec

#endif // MOEC_COMPILER_AITERCSV_H
