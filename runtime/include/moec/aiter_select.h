//===- aiter_select.h - AITER's tuned-config lookup, key explicit -*- C++ -*-===//
//
// The lookup AITER's fused_moe.get_2stage_cfgs does over its tuned CSVs
// (docs/aiter-tables.md), on the rows a bundle recorded (Manifest::aiterRows):
// token = the next power of two of M below 32768, the tiers 32768 and 131072
// above; an exact key first, then (not for FHMoE) the key with act_type
// disabled, then (above 32768, not for FHMoE) the smaller tiers in
// descending order. A bundle serves only kernels compiled for the requested
// activation, so a row borrowed for another activation is refused, and a row
// that was skipped at compile time is refused naming it: a key never falls
// through to another row. select() is noexcept and allocation-free.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_AITER_SELECT_H
#define MOEC_AITER_SELECT_H

#include "moec/manifest.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moec::rt {

/// The lookup key without the token, in the CSV's spellings. The strings
/// are views: nothing is copied.
struct AiterKey {
  std::string_view gfx;
  uint32_t cuNum = 0;
  uint32_t modelDim = 0, interDim = 0, expert = 0, topk = 0;
  std::string_view actType, dtype, qDtypeA, qDtypeW, qType;
  uint32_t useG1u1 = 0, doweightStage1 = 0;
  /// Look up FHMoE rows (the four columns below are part of the key).
  bool fhmoe = false;
  uint32_t sharedExpertId = 0, hiddenPad = 0, intermediatePad = 0;
  std::string_view gateMode;
};

/// Builds an AiterKey from the CSV's column names and value spellings
/// (`moec select --where`, moec_bundle_select_aiter). set() is noexcept and
/// allocation-free: the key's strings are views of `value`.
class AiterKeyColumns {
public:
  enum class Error : uint8_t { None, UnknownColumn, NotAnInteger, Repeated };
  /// The 13 key columns in the CSV's order (token comes from M).
  static constexpr size_t kKeyColumnCount = 13;
  /// The FHMoE table's 4 extra key columns.
  static constexpr size_t kFhmoeColumnCount = 4;
  static const char *const kColumns[kKeyColumnCount + kFhmoeColumnCount];

  Error set(std::string_view column, std::string_view value) noexcept;
  /// Whether any FHMoE column was given (then all four are needed).
  bool fhmoe() const noexcept { return key_.fhmoe; }
  /// Index into kColumns of the first column still needed, or SIZE_MAX.
  size_t firstMissing() const noexcept;
  /// Every column still needed, space separated. Allocates; error path.
  std::string missingColumns() const;
  /// The key; complete when firstMissing() == SIZE_MAX.
  const AiterKey &key() const noexcept { return key_; }
  static const char *errorText(Error error) noexcept;

private:
  AiterKey key_;
  uint32_t given_ = 0; ///< bit i: kColumns[i] was set
};

enum class AiterRule : uint8_t { Exact, ActTypeFallback, TierFallback };
enum class AiterStatus : uint8_t {
  Hit,             ///< row's configuration serves the key
  Miss,            ///< no row (AITER would find none either)
  Skipped,         ///< AITER's row was not compiled (AiterRowInfo::skipped)
  WrongActivation, ///< the row found is for another activation
};

struct AiterSelection {
  AiterStatus status = AiterStatus::Miss;
  AiterRule rule = AiterRule::Exact;
  /// Index into the rows (Hit, Skipped, WrongActivation).
  uint32_t row = UINT32_MAX;
  /// The token bucket looked up first (get_padded_M of M).
  uint32_t token = 0;
};

/// AITER's get_padded_M: nextPow2(M) below 32768 (nextPow2(0) = 1), 32768
/// for M in [32768, 131072), 131072 from there on.
uint32_t aiterPaddedToken(uint64_t m) noexcept;

/// AITER's lookup for M tokens over `rows` (in their recorded order).
AiterSelection selectAiter(const std::vector<AiterRowInfo> &rows,
                           const AiterKey &key, uint64_t m) noexcept;

const char *aiterRuleName(AiterRule rule) noexcept;

/// One line for a miss: the key with the token bucket, then the nearest keys
/// the rows have (fewest differing columns, at most five), each naming the
/// columns that differ (`topk=6 (key has 7)`). Allocates; error path only.
std::string describeAiterMiss(const std::vector<AiterRowInfo> &rows,
                              const AiterKey &key, uint32_t token);

/// Why `selection` (not a Hit) serves no kernel, in one line starting
/// "m M: ": the miss text (describeAiterMiss), or the row's file:line with
/// the reason it was skipped, or the activation the bundle lacks.
/// Allocates; error path only.
std::string describeAiterRefusal(const Manifest &manifest, const AiterKey &key,
                                 const AiterSelection &selection, uint64_t m);

/// The key as `column=value` pairs in the CSV's column order.
std::string describeAiterKey(const AiterKey &key, uint32_t token);

} // namespace moec::rt

#endif // MOEC_AITER_SELECT_H
