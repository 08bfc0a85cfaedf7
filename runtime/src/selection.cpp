//===- selection.cpp - selector, row ranges, overrides ----------*- C++ -*-===//
#include "moec/selection.h"

#include "json_fields.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace moec::rt {

std::string describeTableKey(std::string_view network, uint32_t ep,
                             uint32_t workspace) {
  std::string key(network);
  key += " ep" + std::to_string(ep) + " ws" + std::to_string(workspace);
  return key;
}

std::string describeSelectionMiss(const SelectionTable &table, uint32_t m) {
  std::string text = describeTableKey(table.network, table.ep, table.workspace) +
                     ": m " + std::to_string(m);
  if (table.maxTokens != 0 && m > table.maxTokens)
    return text + " is above the table's capacity of " +
           std::to_string(table.maxTokens) +
           " tokens per rank (its fused kernels' max_tokens)";
  return text + " is above the largest row (m " +
         std::to_string(table.rows.empty() ? 0 : table.rows.back().m) +
         ") and above_max is 'error'";
}

namespace {

std::string describeTable(const SelectionTable &table, size_t index) {
  return "selection[" + std::to_string(index) + "] (" +
         describeTableKey(table.network, table.ep, table.workspace) + ")";
}

/// Largest m that row `row` serves by the nearest rule (ties go to the larger
/// row): rows i and i+1 split at ceil((m_i + m_{i+1}) / 2), which goes up.
uint32_t nearestUpperBound(const std::vector<SelectionRow> &rows, size_t row) {
  if (row + 1 == rows.size())
    return rows[row].m;
  const uint64_t sum = uint64_t(rows[row].m) + rows[row + 1].m;
  return static_cast<uint32_t>((sum - 1) / 2);
}

std::vector<RowRange> computeRowRanges(const SelectionTable &table) {
  std::vector<RowRange> ranges;
  ranges.reserve(table.rows.size());
  uint64_t nextLow = 0; // m = 0 (an empty rank) belongs to the smallest row
  for (size_t i = 0; i < table.rows.size(); ++i) {
    RowRange range;
    range.row = static_cast<uint32_t>(i);
    range.m = table.rows[i].m;
    range.config = table.rows[i].config;
    range.mLow = static_cast<uint32_t>(std::min<uint64_t>(nextLow, UINT32_MAX));
    range.mHigh = nearestUpperBound(table.rows, i);
    range.servesAboveMax = i + 1 == table.rows.size() &&
                           table.aboveMax == AboveMaxPolicy::Largest &&
                           (table.maxTokens == 0 || table.rows[i].m < table.maxTokens);
    nextLow = uint64_t(range.mHigh) + 1;
    ranges.push_back(range);
  }
  return ranges;
}

} // namespace

bool validateSelectionTables(const std::vector<SelectionTable> &tables,
                             size_t configCount, std::string &error) {
  std::map<std::tuple<std::string, uint32_t, uint32_t>, size_t> seen;
  for (size_t t = 0; t < tables.size(); ++t) {
    const SelectionTable &table = tables[t];
    const std::string name = describeTable(table, t);
    if (table.network.empty()) {
      error = name + ": network must not be empty";
      return false;
    }
    if (table.ep == 0) {
      error = name + ": ep must be >= 1";
      return false;
    }
    auto [it, inserted] =
        seen.emplace(std::make_tuple(table.network, table.ep, table.workspace), t);
    if (!inserted) {
      error = name + ": same key as selection[" + std::to_string(it->second) +
              "], so one of them is unreachable";
      return false;
    }
    if (table.rows.empty()) {
      error = name + ": no rows";
      return false;
    }
    for (size_t r = 0; r < table.rows.size(); ++r) {
      const SelectionRow &row = table.rows[r];
      const std::string rowName = name + " row " + std::to_string(r);
      if (row.m == 0) {
        error = rowName + ": m must be >= 1 (m = 0 is served by the smallest row)";
        return false;
      }
      if (row.config >= configCount) {
        error = rowName + " (m " + std::to_string(row.m) + "): config index " +
                std::to_string(row.config) + " but the bundle has " +
                std::to_string(configCount) + " configurations";
        return false;
      }
      if (table.maxTokens != 0 && row.m > table.maxTokens) {
        error = rowName + " (m " + std::to_string(row.m) +
                "): above the table's capacity of " +
                std::to_string(table.maxTokens) +
                " tokens per rank, so unreachable";
        return false;
      }
      if (r > 0) {
        const uint32_t previous = table.rows[r - 1].m;
        if (row.m == previous) {
          error = rowName + ": duplicate m " + std::to_string(row.m) +
                  " (row " + std::to_string(r - 1) + " has it; one is unreachable)";
          return false;
        }
        if (row.m < previous) {
          error = rowName + ": rows not sorted by m (m " + std::to_string(row.m) +
                  " after m " + std::to_string(previous) + ")";
          return false;
        }
      }
    }
    // Reachability proof: every row serves a non-empty m range.
    for (const RowRange &range : computeRowRanges(table)) {
      if (range.mLow > range.mHigh || range.m < range.mLow || range.m > range.mHigh) {
        error = name + " row " + std::to_string(range.row) + " (m " +
                std::to_string(range.m) + "): unreachable by any m";
        return false;
      }
    }
  }
  return true;
}

bool Selector::build(std::vector<SelectionTable> tables, size_t configCount,
                     Selector &out, std::string &error) {
  if (!validateSelectionTables(tables, configCount, error))
    return false;
  Selector selector;
  for (const SelectionTable &table : tables) {
    TableSpan span;
    span.firstRow = static_cast<uint32_t>(selector.rowM_.size());
    span.rowCount = static_cast<uint32_t>(table.rows.size());
    span.maxM = table.rows.back().m;
    span.aboveMax = table.aboveMax;
    if (table.maxTokens != 0)
      span.capacity = table.maxTokens;
    for (size_t r = 0; r < table.rows.size(); ++r) {
      selector.rowUpperBound_.push_back(nearestUpperBound(table.rows, r));
      selector.rowM_.push_back(table.rows[r].m);
      selector.rowConfig_.push_back(table.rows[r].config);
    }
    selector.spans_.push_back(span);
  }
  selector.tables_ = std::move(tables);
  out = std::move(selector);
  return true;
}

bool Selector::resolveTable(std::string_view network, uint32_t ep,
                            uint32_t workspace, TableHandle &out,
                            std::string &error) const {
  size_t best = tables_.size();
  uint32_t largestClass = 0;
  bool anyForNetworkEp = false;
  for (size_t t = 0; t < tables_.size(); ++t) {
    const SelectionTable &table = tables_[t];
    if (table.network != network || table.ep != ep)
      continue;
    anyForNetworkEp = true;
    largestClass = std::max(largestClass, table.workspace);
    if (table.workspace >= workspace &&
        (best == tables_.size() || table.workspace < tables_[best].workspace))
      best = t;
  }
  if (best == tables_.size()) {
    if (!anyForNetworkEp)
      error = "no selection table for network '" + std::string(network) +
              "' ep " + std::to_string(ep);
    else
      error = "no selection table for network '" + std::string(network) +
              "' ep " + std::to_string(ep) + " with workspace class >= " +
              std::to_string(workspace) + " (largest is " +
              std::to_string(largestClass) + ")";
    return false;
  }
  out.index = static_cast<uint32_t>(best);
  return true;
}

std::vector<RowRange> Selector::rowRanges(TableHandle table) const {
  if (table.index >= tables_.size())
    return {};
  return computeRowRanges(tables_[table.index]);
}

bool parseSelectionOverrides(std::string_view jsonText,
                             const std::vector<ConfigInfo> &configs,
                             std::vector<SelectionTableOverride> &out,
                             std::string &error) {
  try {
    detail::Json root;
    if (!detail::parseJsonText(jsonText, root, error))
      return false;
    const detail::Json *tables = &root;
    if (root.is_object()) {
      tables = detail::findField(root, "selection");
      if (!tables) {
        error = "selection: missing";
        return false;
      }
    }
    if (!detail::expectArray(*tables, "selection", error))
      return false;
    std::vector<SelectionTableOverride> overrides;
    for (size_t i = 0; i < tables->size(); ++i) {
      SelectionTable table;
      detail::TableFieldsPresent present;
      if (!detail::parseSelectionTableJson((*tables)[i],
                                           detail::indexPath("selection", i),
                                           configs, /*partial=*/true, table,
                                           present, error))
        return false;
      SelectionTableOverride override;
      override.network = table.network;
      override.ep = table.ep;
      override.workspace = table.workspace;
      override.hasFamily = present.family;
      override.hasTransport = present.transport;
      override.hasAboveMax = present.aboveMax;
      override.family = table.family;
      override.transport = table.transport;
      override.aboveMax = table.aboveMax;
      override.rows = std::move(table.rows);
      overrides.push_back(std::move(override));
    }
    out = std::move(overrides);
    return true;
  } catch (const std::exception &e) {
    error = std::string("override: ") + e.what();
    return false;
  } catch (...) {
    error = "override: unexpected error";
    return false;
  }
}

bool mergeSelectionOverrides(std::vector<SelectionTable> &tables,
                             const std::vector<SelectionTableOverride> &overrides,
                             size_t configCount, OverrideReport &report,
                             std::string &error) {
  std::vector<SelectionTable> merged = tables;
  OverrideReport result;
  std::map<std::tuple<std::string, uint32_t, uint32_t, uint32_t>, size_t> keysSeen;
  for (size_t o = 0; o < overrides.size(); ++o) {
    const SelectionTableOverride &override = overrides[o];
    const std::string name =
        "override selection[" + std::to_string(o) + "] (" +
        describeTableKey(override.network, override.ep, override.workspace) + ")";
    auto target = std::find_if(merged.begin(), merged.end(), [&](const SelectionTable &t) {
      return t.network == override.network && t.ep == override.ep &&
             t.workspace == override.workspace;
    });
    if (target == merged.end()) {
      if (!override.hasFamily || !override.hasTransport || !override.hasAboveMax) {
        error = name + ": no such table in the bundle, so family, transport and "
                       "above_max are required to add it";
        return false;
      }
      SelectionTable added;
      added.network = override.network;
      added.ep = override.ep;
      added.workspace = override.workspace;
      added.family = override.family;
      added.transport = override.transport;
      added.aboveMax = override.aboveMax;
      merged.push_back(std::move(added));
      target = merged.end() - 1;
      ++result.tablesAdded;
    } else {
      if (override.hasFamily && override.family != target->family) {
        error = name + ": family '" + kernelFamilyName(override.family) +
                "' conflicts with the bundle's '" + kernelFamilyName(target->family) + "'";
        return false;
      }
      if (override.hasTransport && override.transport != target->transport) {
        error = name + ": transport '" + transportName(override.transport) +
                "' conflicts with the bundle's '" + transportName(target->transport) + "'";
        return false;
      }
      if (override.hasAboveMax && override.aboveMax != target->aboveMax) {
        error = name + ": above_max '" + aboveMaxPolicyName(override.aboveMax) +
                "' conflicts with the bundle's '" +
                aboveMaxPolicyName(target->aboveMax) + "'";
        return false;
      }
    }
    for (size_t r = 0; r < override.rows.size(); ++r) {
      const SelectionRow &row = override.rows[r];
      if (row.m == 0) {
        error = name + " row " + std::to_string(r) + ": m must be >= 1";
        return false;
      }
      if (row.config >= configCount) {
        error = name + " row " + std::to_string(r) + " (m " + std::to_string(row.m) +
                "): config index " + std::to_string(row.config) +
                " but the bundle has " + std::to_string(configCount) + " configurations";
        return false;
      }
      auto [seenAt, firstTime] = keysSeen.emplace(
          std::make_tuple(override.network, override.ep, override.workspace, row.m), o);
      if (!firstTime) {
        error = name + " row " + std::to_string(r) + ": key m " +
                std::to_string(row.m) + " is overridden twice (also in override selection[" +
                std::to_string(seenAt->second) + "])";
        return false;
      }
      OverrideChange change;
      change.network = override.network;
      change.ep = override.ep;
      change.workspace = override.workspace;
      change.m = row.m;
      change.newConfig = row.config;
      auto position = std::lower_bound(
          target->rows.begin(), target->rows.end(), row.m,
          [](const SelectionRow &existing, uint32_t m) { return existing.m < m; });
      if (position != target->rows.end() && position->m == row.m) {
        change.oldConfig = position->config;
        change.kind = position->config == row.config ? OverrideChange::Kind::Unchanged
                                                     : OverrideChange::Kind::Replaced;
        position->config = row.config;
      } else {
        change.kind = OverrideChange::Kind::Added;
        target->rows.insert(position, row);
      }
      switch (change.kind) {
      case OverrideChange::Kind::Replaced:
        ++result.replaced;
        break;
      case OverrideChange::Kind::Added:
        ++result.added;
        break;
      case OverrideChange::Kind::Unchanged:
        ++result.unchanged;
        break;
      }
      result.changes.push_back(std::move(change));
    }
  }
  if (!validateSelectionTables(merged, configCount, error)) {
    error = "after overrides: " + error;
    return false;
  }
  tables = std::move(merged);
  report = std::move(result);
  return true;
}

} // namespace moec::rt
