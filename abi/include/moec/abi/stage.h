//===- stage.h - the stages of a MoE layer -----------------------*- C++ -*-===//
///
/// \file
/// The kernel stages a layer runs, in pipeline order. Each is one op of the
/// moe dialect (`moe.quant`, `moe.sort`, `moe.w13`, `moe.w2`,
/// `moe.combine`: the name is the op's mnemonic) and one `stage` value of
/// the bundle manifest, which keeps the text on disk; the runtime parses it
/// once, at open, into Stage. Header-only, plain C++17. The compiler's unit
/// test "every stage op of the dialect is a Stage" checks that the dialect
/// and this list agree.
///
//===----------------------------------------------------------------------===//
#ifndef MOEC_ABI_STAGE_H
#define MOEC_ABI_STAGE_H

#include <array>
#include <optional>
#include <string_view>

namespace moec::abi {

/// A layer's stages, in the order a layer runs them.
enum class Stage {
  /// BF16 tokens to FP8 with one E8M0 scale per 1x32 block.
  Quant,
  /// Routes grouped by expert into M tiles.
  Sort,
  /// Gate/up GEMM with the activation and the intermediate's quantisation.
  W13,
  /// Down GEMM.
  W2,
  /// The routing-weighted sum of each token's expert rows.
  Combine,
};

/// Every stage, in pipeline order.
inline constexpr std::array<Stage, 5> kStages = {
    Stage::Quant, Stage::Sort, Stage::W13, Stage::W2, Stage::Combine};

/// The manifest's and the dialect's name of `stage`: "quant", "sort",
/// "w13", "w2", "combine".
constexpr const char *stageName(Stage stage) noexcept {
  switch (stage) {
  case Stage::Quant:
    return "quant";
  case Stage::Sort:
    return "sort";
  case Stage::W13:
    return "w13";
  case Stage::W2:
    return "w2";
  case Stage::Combine:
    return "combine";
  }
  return "?";
}

/// The stage named `name`, or nothing.
constexpr std::optional<Stage> parseStage(std::string_view name) noexcept {
  for (Stage stage : kStages)
    if (name == stageName(stage))
      return stage;
  return std::nullopt;
}

/// The stages a layer multiplies weights in (they carry a weight layout).
constexpr bool isGemmStage(Stage stage) noexcept {
  return stage == Stage::W13 || stage == Stage::W2;
}

} // namespace moec::abi

#endif // MOEC_ABI_STAGE_H
