//===- selection.h - kernel selection by (network, ep, workspace, m) -*- C++ -*-===//
//
// Rules (docs/selection.md):
//  - the table for (network, ep) with the smallest workspace class >= the
//    requested workspace; none -> a miss with a one-line reason;
//  - rows strictly increasing in m; m picks the nearest row, ties choose the
//    larger; m = 0 (an empty rank) picks the smallest row;
//  - m above the largest row follows the table's above_max policy: "largest"
//    is an explicit, flagged fallback, "error" a miss;
//  - m above a fused table's capacity (max_tokens) is a miss whatever
//    above_max says.
// Two steps keep the hot path allocation-free: resolveTable() once per
// (network, ep, workspace), then select() per batch (a binary search over a
// flat array of row upper bounds).
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_SELECTION_H
#define MOEC_SELECTION_H

#include "moec/manifest.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moec::rt {

/// Handle of a resolved selection table; valid for the Selector that made it.
struct TableHandle {
  uint32_t index = UINT32_MAX;
};

/// Outcome of select().
enum class SelectStatus : uint8_t {
  Hit,      ///< a row within the table's m range (nearest, ties larger)
  Fallback, ///< m above the largest row, policy "largest": the largest row
  Miss,     ///< m above the largest row with policy "error", m above a fused
            ///< table's capacity, or a bad handle
};

/// Result of select(); plain data, no allocation.
struct Selection {
  SelectStatus status = SelectStatus::Miss;
  bool exact = false;      ///< the row's m equals the requested m
  uint32_t row = 0;        ///< row index within the table
  uint32_t rowM = 0;       ///< the row's m bucket
  uint32_t config = 0;     ///< configuration index (Manifest::configs)
};

/// The m values one row serves: [mLow, mHigh] by nearest-row rule, plus
/// every m > mHigh as a declared fallback when servesAboveMax.
struct RowRange {
  uint32_t row = 0;
  uint32_t m = 0;
  uint32_t config = 0;
  uint32_t mLow = 0;
  uint32_t mHigh = 0;
  bool servesAboveMax = false;
};

/// Checks tables: known enums, ep >= 1, unique (network, ep, workspace),
/// non-empty rows, 1 <= m, strictly increasing m (duplicates and unsorted
/// rows are errors naming table and row), config < configCount, and every
/// row reachable (its served m range is non-empty).
bool validateSelectionTables(const std::vector<SelectionTable> &tables,
                             size_t configCount, std::string &error);

/// "flash ep4 ws1024" - the key of a table, as used in messages.
std::string describeTableKey(std::string_view network, uint32_t ep,
                             uint32_t workspace);

/// Why `m` misses `table` (select() returned SelectStatus::Miss), one line
/// naming the key: "flash-fused ep4 ws1024: m 5000 is above the table's
/// capacity of 1024 tokens per rank (its fused kernels' max_tokens)" or
/// "... is above the largest row (m 4096) and above_max is 'error'".
std::string describeSelectionMiss(const SelectionTable &table, uint32_t m);

/// Validated, indexed selection tables.
class Selector {
public:
  Selector() = default;

  /// Validates `tables` (validateSelectionTables) and builds the index.
  /// On failure `out` is left unchanged.
  static bool build(std::vector<SelectionTable> tables, size_t configCount,
                    Selector &out, std::string &error);

  /// Finds the table for (network, ep) with the smallest workspace class
  /// >= `workspace`. Returns false with a reason naming the key on a miss.
  bool resolveTable(std::string_view network, uint32_t ep, uint32_t workspace,
                    TableHandle &out, std::string &error) const;

  /// Selects the row for `m` in a resolved table. Allocation-free, noexcept;
  /// an invalid handle gives SelectStatus::Miss.
  Selection select(TableHandle table, uint32_t m) const noexcept {
    if (table.index >= spans_.size())
      return Selection{};
    const TableSpan &span = spans_[table.index];
    Selection result;
    uint32_t row;
    if (m > span.maxM) {
      if (span.aboveMax == AboveMaxPolicy::Error || m > span.capacity) {
        result.status = SelectStatus::Miss;
        return result;
      }
      result.status = SelectStatus::Fallback;
      row = span.rowCount - 1;
    } else {
      // First row whose upper bound is >= m (the last bound is maxM >= m).
      // Branch-free lower bound: the step is masked arithmetic rather than
      // a branch, so a random m costs no branch mispredictions.
      const uint32_t *bounds = rowUpperBound_.data() + span.firstRow;
      const uint32_t *first = bounds;
      uint32_t length = span.rowCount;
      while (length > 1) {
        const uint32_t half = length / 2;
        const uint32_t advance = 0u - static_cast<uint32_t>(first[half - 1] < m);
        first += half & advance;
        length -= half;
      }
      row = static_cast<uint32_t>(first - bounds) + (*first < m ? 1u : 0u);
      result.status = SelectStatus::Hit;
    }
    result.row = row;
    result.rowM = rowM_[span.firstRow + row];
    result.config = rowConfig_[span.firstRow + row];
    result.exact = result.rowM == m;
    return result;
  }

  /// The m range each row of `table` serves, in row order (empty for an
  /// invalid handle).
  std::vector<RowRange> rowRanges(TableHandle table) const;

  /// The validated tables, in manifest order (TableHandle::index indexes it).
  const std::vector<SelectionTable> &tables() const { return tables_; }

private:
  struct TableSpan {
    uint32_t firstRow = 0;
    uint32_t rowCount = 0;
    uint32_t maxM = 0;
    /// The largest m served at all: maxTokens, or UINT32_MAX without one.
    uint32_t capacity = UINT32_MAX;
    AboveMaxPolicy aboveMax = AboveMaxPolicy::Largest;
  };
  std::vector<SelectionTable> tables_;
  std::vector<TableSpan> spans_;
  std::vector<uint32_t> rowUpperBound_; ///< flat: largest m each row serves
  std::vector<uint32_t> rowM_;
  std::vector<uint32_t> rowConfig_;
};

/// One table's worth of override rows. Fields not given in the override
/// file inherit from the bundle's table (and are required for a new table).
struct SelectionTableOverride {
  std::string network;
  uint32_t ep = 1;
  uint32_t workspace = 0;
  bool hasFamily = false, hasTransport = false, hasAboveMax = false;
  KernelFamily family = KernelFamily::MegaMoe;
  Transport transport = Transport::None;
  AboveMaxPolicy aboveMax = AboveMaxPolicy::Largest;
  std::vector<SelectionRow> rows;
};

/// What one override row did.
struct OverrideChange {
  enum class Kind { Replaced, Added, Unchanged } kind = Kind::Added;
  std::string network;
  uint32_t ep = 0, workspace = 0, m = 0;
  uint32_t oldConfig = UINT32_MAX; ///< UINT32_MAX when added
  uint32_t newConfig = 0;
};

/// Every change a merge applied, so an override is never silently ignored.
struct OverrideReport {
  std::vector<OverrideChange> changes;
  uint32_t replaced = 0, added = 0, unchanged = 0, tablesAdded = 0;
};

/// Parses an override file: {"selection": [...]} (or a bare array) with the
/// manifest's table schema; family/transport/above_max are optional; a row's
/// "config" is a configuration index or a configuration id string.
bool parseSelectionOverrides(std::string_view jsonText,
                             const std::vector<ConfigInfo> &configs,
                             std::vector<SelectionTableOverride> &out,
                             std::string &error);

/// Merges overrides into `tables`, keyed by the full key (network, ep,
/// workspace, m): a row with an existing m replaces that row's config, a new
/// m is inserted in order; a table key not in the bundle becomes a new table.
/// Never replaces a table wholesale. A family/transport/above_max given in an
/// override that differs from the bundle's table is an error. The result is
/// validated; on any failure `tables` is unchanged.
bool mergeSelectionOverrides(std::vector<SelectionTable> &tables,
                             const std::vector<SelectionTableOverride> &overrides,
                             size_t configCount, OverrideReport &report,
                             std::string &error);

} // namespace moec::rt

#endif // MOEC_SELECTION_H
