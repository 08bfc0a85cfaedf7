//===- TuningTable.h - the tuning-table text format -------------*- C++ -*-===//
///
/// \file
/// Parses and validates a tuning table (docs/table-format.md). Plain C++: the
/// table is checked before any MLIR is built, and every error names the file,
/// the line and the field.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_TUNINGTABLE_H
#define MOEC_COMPILER_TUNINGTABLE_H

#include "moec/abi/stage.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace moec {

/// Where something was written, for error messages.
struct SourceLine {
  std::string file;
  int line = 0;
};

/// `problem NAME family=... hidden=... intermediate=... experts=... top_k=... ep=...`
struct TableProblem {
  std::string name;
  std::string family;
  int64_t hidden = 0, intermediate = 0, experts = 0, topK = 0, ep = 1;
  /// Quantised activation formats: `a_format`, the token rows moe.quant
  /// writes and moe.w13 reads, and `mid_format`, the intermediate moe.w13
  /// writes and moe.w2 reads; "fp8" (FP8 E4M3, A8W4) or "fp4" (MXFP4,
  /// A4W4); or both "bf16" (A16W4: no quant stage, W13 reads the BF16
  /// tokens and writes a BF16 intermediate).
  std::string aFormat = "fp8", midFormat = "fp8";
  SourceLine where;
};

/// `kernel NAME stage=w2 problem=P m=.. n=.. [knob=value ...]`. Knob names
/// are checked against the dialect's knob table when the line is read;
/// values stay as text until the dialect parses and verifies them, so its
/// messages are the single source of legality.
struct TableKernel {
  std::string name;
  /// Parsed once from the line's `stage=` text (abi::parseStage).
  abi::Stage stage = abi::Stage::Quant;
  std::string problem;
  std::map<std::string, std::string> knobs;
  SourceLine where;
};

/// `config NAME kernels=K1,K2 [provenance=measured|model-ranked]`
struct TableConfig {
  std::string name;
  std::vector<std::string> kernels;
  std::string provenance = "model-ranked";
  SourceLine where;
};

/// Why a row selects its configuration (docs/table-format.md, "Row
/// provenance"): `model-ranked` by a cost model (its name and version and
/// its predicted time) or `measured` on a device (device, method, date and
/// the time). Empty `kind`: the row says nothing.
struct RowProvenance {
  std::string kind;   ///< "", "model-ranked" or "measured"
  std::string model;  ///< the model and its version ("moec-cost-1")
  std::string predictedUs; ///< the model's predicted time, microseconds (text)
  std::string device, method, date;
  std::string measuredUs; ///< the measured time, microseconds (text)
};

/// `row m=.. config=.. [provenance=...]`
struct TableRow {
  int64_t m = 0;
  std::string config;
  SourceLine where;
  RowProvenance provenance;
};

/// `select network=.. family=.. ep=.. workspace=.. transport=fixed_slot|compact|none
/// above_max=..`
/// followed by its `row m=.. config=..` lines.
struct TableSelection {
  std::string network, family, transport, aboveMax = "largest";
  int64_t ep = 1, workspace = 0;
  std::vector<TableRow> rows;
  SourceLine where;
};

struct TuningTable {
  std::string path;
  /// The table's text as read (hashed into the bundle's provenance).
  std::string text;
  std::vector<TableProblem> problems;
  std::vector<TableKernel> kernels;
  std::vector<TableConfig> configs;
  std::vector<TableSelection> selections;

  const TableProblem *findProblem(const std::string &name) const;
  const TableKernel *findKernel(const std::string &name) const;
  const TableConfig *findConfig(const std::string &name) const;
};

/// Parses `text` (read from `path`) and checks names, references and row
/// order. On failure returns false and sets `error` to one line
/// "path:line: field 'f': what is wrong".
bool parseTuningTable(const std::string &path, const std::string &text,
                      TuningTable &table, std::string &error);

/// Reads and parses the file at `path`.
bool readTuningTable(const std::string &path, TuningTable &table,
                     std::string &error);

} // namespace moec

#endif // MOEC_COMPILER_TUNINGTABLE_H
