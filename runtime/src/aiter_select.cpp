//===- aiter_select.cpp - AITER's tuned-config lookup ---------------------===//
#include "moec/aiter_select.h"

#include <algorithm>
#include <iterator>

namespace moec::rt {
namespace {

constexpr uint32_t kFirstTier = 32768;
constexpr uint32_t kSecondTier = 131072;

/// Every key column but token and act_type.
bool sameKeyButActType(const AiterRowInfo &row, const AiterKey &key) noexcept {
  if (row.fhmoe != key.fhmoe || row.cuNum != key.cuNum ||
      row.modelDim != key.modelDim || row.interDim != key.interDim ||
      row.expert != key.expert || row.topk != key.topk ||
      row.useG1u1 != key.useG1u1 || row.doweightStage1 != key.doweightStage1)
    return false;
  if (std::string_view(row.gfx) != key.gfx ||
      std::string_view(row.dtype) != key.dtype ||
      std::string_view(row.qDtypeA) != key.qDtypeA ||
      std::string_view(row.qDtypeW) != key.qDtypeW ||
      std::string_view(row.qType) != key.qType)
    return false;
  if (key.fhmoe &&
      (row.sharedExpertId != key.sharedExpertId ||
       row.hiddenPad != key.hiddenPad ||
       row.intermediatePad != key.intermediatePad ||
       std::string_view(row.gateMode) != key.gateMode))
    return false;
  return true;
}

/// The first row with `token` and the key (act_type ignored when
/// `anyActivation`): the row AITER's primary (or act-disabled) dict holds.
uint32_t findRow(const std::vector<AiterRowInfo> &rows, const AiterKey &key,
                 uint32_t token, bool anyActivation) noexcept {
  for (size_t i = 0; i < rows.size(); ++i) {
    const AiterRowInfo &row = rows[i];
    if (row.token != token || !sameKeyButActType(row, key))
      continue;
    if (!anyActivation && std::string_view(row.actType) != key.actType)
      continue;
    return static_cast<uint32_t>(i);
  }
  return UINT32_MAX;
}

} // namespace

uint32_t aiterPaddedToken(uint64_t m) noexcept {
  if (m < kFirstTier) {
    uint32_t p = 1;
    while (p < m)
      p <<= 1;
    return p;
  }
  return m >= kSecondTier ? kSecondTier : kFirstTier;
}

const char *const AiterKeyColumns::kColumns[] = {
    "gfx",       "cu_num",   "model_dim", "inter_dim",        "expert",
    "topk",      "act_type", "dtype",     "q_dtype_a",        "q_dtype_w",
    "q_type",    "use_g1u1", "doweight_stage1", "shared_expert_id",
    "hidden_pad", "intermediate_pad", "gate_mode"};

AiterKeyColumns::Error AiterKeyColumns::set(std::string_view column,
                                            std::string_view value) noexcept {
  size_t index = 0;
  while (index < std::size(kColumns) && column != kColumns[index])
    ++index;
  if (index == std::size(kColumns))
    return Error::UnknownColumn;
  if (given_ & (1u << index))
    return Error::Repeated;
  // Integer columns: plain decimal digits that fit 32 bits.
  uint32_t *number = nullptr;
  std::string_view *text = nullptr;
  switch (index) {
  case 0: text = &key_.gfx; break;
  case 1: number = &key_.cuNum; break;
  case 2: number = &key_.modelDim; break;
  case 3: number = &key_.interDim; break;
  case 4: number = &key_.expert; break;
  case 5: number = &key_.topk; break;
  case 6: text = &key_.actType; break;
  case 7: text = &key_.dtype; break;
  case 8: text = &key_.qDtypeA; break;
  case 9: text = &key_.qDtypeW; break;
  case 10: text = &key_.qType; break;
  case 11: number = &key_.useG1u1; break;
  case 12: number = &key_.doweightStage1; break;
  case 13: number = &key_.sharedExpertId; break;
  case 14: number = &key_.hiddenPad; break;
  case 15: number = &key_.intermediatePad; break;
  default: text = &key_.gateMode; break;
  }
  if (number) {
    if (value.empty() || value.size() > 10)
      return Error::NotAnInteger;
    uint64_t v = 0;
    for (char c : value) {
      if (c < '0' || c > '9')
        return Error::NotAnInteger;
      v = v * 10 + uint64_t(c - '0');
    }
    if (v > UINT32_MAX)
      return Error::NotAnInteger;
    *number = static_cast<uint32_t>(v);
  } else {
    *text = value;
  }
  given_ |= 1u << index;
  if (index >= kKeyColumnCount)
    key_.fhmoe = true;
  return Error::None;
}

size_t AiterKeyColumns::firstMissing() const noexcept {
  const size_t needed =
      key_.fhmoe ? kKeyColumnCount + kFhmoeColumnCount : kKeyColumnCount;
  for (size_t i = 0; i < needed; ++i)
    if (!(given_ & (1u << i)))
      return i;
  return SIZE_MAX;
}

std::string AiterKeyColumns::missingColumns() const {
  const size_t needed =
      key_.fhmoe ? kKeyColumnCount + kFhmoeColumnCount : kKeyColumnCount;
  std::string text;
  for (size_t i = 0; i < needed; ++i)
    if (!(given_ & (1u << i)))
      text += (text.empty() ? "" : " ") + std::string(kColumns[i]);
  return text;
}

const char *AiterKeyColumns::errorText(Error error) noexcept {
  switch (error) {
  case Error::None:
    return "ok";
  case Error::UnknownColumn:
    return "not a key column of AITER's CSV (token comes from M)";
  case Error::NotAnInteger:
    return "expected an unsigned 32-bit integer";
  case Error::Repeated:
    return "given twice";
  }
  return "?";
}

const char *aiterRuleName(AiterRule rule) noexcept {
  switch (rule) {
  case AiterRule::Exact:
    return "exact";
  case AiterRule::ActTypeFallback:
    return "act_type_fallback";
  case AiterRule::TierFallback:
    return "tier_fallback";
  }
  return "?";
}

AiterSelection selectAiter(const std::vector<AiterRowInfo> &rows,
                           const AiterKey &key, uint64_t m) noexcept {
  AiterSelection result;
  result.token = aiterPaddedToken(m);
  uint32_t row = findRow(rows, key, result.token, false);
  result.rule = AiterRule::Exact;
  if (row == UINT32_MAX && !key.fhmoe) {
    row = findRow(rows, key, result.token, true);
    result.rule = AiterRule::ActTypeFallback;
  }
  // Above the first tier: the smaller tiers in descending order, each with
  // the exact key first (AITER's _PADDED_M_TIERS walk).
  if (row == UINT32_MAX && !key.fhmoe && result.token > kFirstTier) {
    const uint32_t tiers[] = {kFirstTier};
    for (uint32_t tier : tiers) {
      row = findRow(rows, key, tier, false);
      if (row == UINT32_MAX)
        row = findRow(rows, key, tier, true);
      if (row != UINT32_MAX) {
        result.rule = AiterRule::TierFallback;
        break;
      }
    }
  }
  if (row == UINT32_MAX) {
    result.status = AiterStatus::Miss;
    result.rule = AiterRule::Exact;
    return result;
  }
  result.row = row;
  const AiterRowInfo &found = rows[row];
  if (!found.compiled())
    result.status = AiterStatus::Skipped;
  else if (std::string_view(found.actType) != key.actType)
    result.status = AiterStatus::WrongActivation;
  else
    result.status = AiterStatus::Hit;
  return result;
}

std::string describeAiterKey(const AiterKey &key, uint32_t token) {
  auto s = [](std::string_view v) { return std::string(v); };
  std::string text = "gfx=" + s(key.gfx) +
                     " cu_num=" + std::to_string(key.cuNum) +
                     " token=" + std::to_string(token) +
                     " model_dim=" + std::to_string(key.modelDim) +
                     " inter_dim=" + std::to_string(key.interDim) +
                     " expert=" + std::to_string(key.expert) +
                     " topk=" + std::to_string(key.topk) +
                     (key.fhmoe ? " shared_expert_id=" +
                                      std::to_string(key.sharedExpertId)
                                : std::string()) +
                     " act_type=" + s(key.actType) + " dtype=" + s(key.dtype) +
                     " q_dtype_a=" + s(key.qDtypeA) +
                     " q_dtype_w=" + s(key.qDtypeW) + " q_type=" + s(key.qType) +
                     " use_g1u1=" + std::to_string(key.useG1u1) +
                     " doweight_stage1=" + std::to_string(key.doweightStage1);
  if (key.fhmoe)
    text += " hidden_pad=" + std::to_string(key.hiddenPad) +
            " intermediate_pad=" + std::to_string(key.intermediatePad) +
            " gate_mode=" + s(key.gateMode);
  return text;
}

std::string describeAiterMiss(const std::vector<AiterRowInfo> &rows,
                              const AiterKey &key, uint32_t token) {
  // Columns of a row's key (token aside) that differ from `key`.
  auto differences = [&](const AiterRowInfo &row) {
    std::vector<std::string> out;
    auto num = [&](const char *name, uint32_t have, uint32_t want) {
      if (have != want)
        out.push_back(std::string(name) + "=" + std::to_string(have) +
                      " (key has " + std::to_string(want) + ")");
    };
    auto str = [&](const char *name, const std::string &have,
                   std::string_view want) {
      if (std::string_view(have) != want)
        out.push_back(std::string(name) + "=" + have + " (key has " +
                      std::string(want) + ")");
    };
    str("gfx", row.gfx, key.gfx);
    num("cu_num", row.cuNum, key.cuNum);
    num("model_dim", row.modelDim, key.modelDim);
    num("inter_dim", row.interDim, key.interDim);
    num("expert", row.expert, key.expert);
    num("topk", row.topk, key.topk);
    str("act_type", row.actType, key.actType);
    str("dtype", row.dtype, key.dtype);
    str("q_dtype_a", row.qDtypeA, key.qDtypeA);
    str("q_dtype_w", row.qDtypeW, key.qDtypeW);
    str("q_type", row.qType, key.qType);
    num("use_g1u1", row.useG1u1, key.useG1u1);
    num("doweight_stage1", row.doweightStage1, key.doweightStage1);
    if (key.fhmoe) {
      num("shared_expert_id", row.sharedExpertId, key.sharedExpertId);
      num("hidden_pad", row.hiddenPad, key.hiddenPad);
      num("intermediate_pad", row.intermediatePad, key.intermediatePad);
      str("gate_mode", row.gateMode, key.gateMode);
    }
    return out;
  };
  std::string text = "no AITER row for " + describeAiterKey(key, token);
  // Distinct keys (token aside) of the same variant, fewest differences.
  std::vector<std::pair<size_t, std::string>> nearest;
  size_t best = SIZE_MAX;
  for (const AiterRowInfo &row : rows) {
    if (row.fhmoe != key.fhmoe)
      continue;
    std::vector<std::string> diff = differences(row);
    if (diff.empty()) {
      // Same key, other tokens: name the buckets that exist.
      continue;
    }
    std::string joined;
    for (const std::string &d : diff)
      joined += (joined.empty() ? "" : ", ") + d;
    if (diff.size() < best) {
      best = diff.size();
      nearest.clear();
    }
    if (diff.size() == best &&
        std::none_of(nearest.begin(), nearest.end(),
                     [&](const auto &n) { return n.second == joined; }))
      nearest.emplace_back(diff.size(), joined);
  }
  std::vector<uint32_t> tokens;
  for (const AiterRowInfo &row : rows)
    if (row.fhmoe == key.fhmoe && differences(row).empty())
      tokens.push_back(row.token);
  if (!tokens.empty()) {
    std::sort(tokens.begin(), tokens.end());
    text += "; the key has rows for token";
    for (size_t i = 0; i < tokens.size(); ++i)
      text += (i ? "," : " ") + std::to_string(tokens[i]);
    return text;
  }
  if (nearest.empty())
    return text + "; the bundle has no " +
           (key.fhmoe ? "FHMoE" : "fused-MoE") + " rows";
  text += "; nearest keys that exist:";
  for (size_t i = 0; i < nearest.size() && i < 5; ++i)
    text += (i ? "; " : " ") + nearest[i].second;
  return text;
}

std::string describeAiterRefusal(const Manifest &manifest, const AiterKey &key,
                                 const AiterSelection &selection, uint64_t m) {
  std::string text = "m " + std::to_string(m);
  if (selection.status == AiterStatus::Miss || selection.row >= manifest.aiterRows.size()) {
    // AITER keys its rows on cu_num (aiter #5342): a device of another CU
    // count than the bundle's part never takes the part's rows.
    const target::TargetInfo *part = partOf(manifest.target);
    if (part && key.gfx == part->arch && key.cuNum != part->computeUnits)
      text += ": cu_num " + std::to_string(key.cuNum) +
              ": the bundle's rows are for " + target::describePart(*part) +
              ", and a " + std::to_string(key.cuNum) +
              "-CU device never takes a row tuned for " +
              std::to_string(part->computeUnits) + " CUs";
    return text + ": " + describeAiterMiss(manifest.aiterRows, key, selection.token);
  }
  const AiterRowInfo &row = manifest.aiterRows[selection.row];
  const std::string at =
      (row.source < manifest.sources.size() ? manifest.sources[row.source].path
                                            : std::string("?")) +
      ":" + std::to_string(row.line);
  text += " (token " + std::to_string(selection.token) + ", " +
          aiterRuleName(selection.rule) + ")";
  if (selection.status == AiterStatus::Skipped)
    return text + " selects AITER row " + at + ", which was not compiled: " +
           row.skipped;
  return text + ": AITER would borrow row " + at + " (act_type " + row.actType +
         ") and JIT it for " + std::string(key.actType) +
         "; this bundle holds no kernel compiled for " + std::string(key.actType);
}

} // namespace moec::rt
