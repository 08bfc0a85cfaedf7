//===- MoeKnobs.h - the knobs of the moe stage ops --------------*- C++ -*-===//
///
/// \file
/// Every knob a tuning table may set on a stage kernel, generated from the
/// dialect's ODS by moec-knob-tblgen (dialect/tblgen/KnobTableGen.cpp): the
/// parameters of the struct attributes a stage op takes (`#moe.tile<...>`,
/// `#moe.peer<...>`, `#moe.problem<...>`) and its plain attributes. Names,
/// owners and requiredness come from ODS; values and defaults are parsed
/// and filled in by the dialect's own attribute parsers. Plain C++ data: no
/// MLIR types, so the table reader can check knob names before building IR.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_DIALECT_MOE_MOEKNOBS_H
#define MOEC_DIALECT_MOE_MOEKNOBS_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace moec::moe {

/// How a knob's value is written in a table and in the dialect's syntax.
enum class KnobKind {
  Integer, ///< a decimal integer
  Bool,    ///< `true` or `false` (a struct parameter)
  Enum,    ///< one of the enum's ODS spellings, e.g. `m16n16k128`
  Type,    ///< an MLIR type, e.g. `f8E4M3FN`
  Flag,    ///< a unit attribute: `true` sets it, `false` leaves it out
  Float,   ///< a decimal number (an f32 attribute)
};

/// One knob of one stage op.
struct KnobInfo {
  /// The knob's name: the ODS parameter or attribute name.
  const char *name;
  /// The op attribute holding it ("tile", "peer", "problem"), or "" when the
  /// knob is a plain attribute of the op.
  const char *owner;
  /// The owner's attribute syntax ("#moe.tile"), or "".
  const char *ownerSyntax;
  KnobKind kind;
  /// MLIR type of a plain Integer or Float attribute ("i64", "f32").
  const char *literalType;
  /// Whether a value must be given (no ODS default).
  bool required;
  /// Whether the owner attribute itself is optional on the op (then its
  /// required parameters are required only once any of its knobs is given).
  bool optionalOwner;
  /// The spellings of an Enum knob ("m16n16k128, m32n32k64"), else "".
  const char *choices;
  /// The ODS default as a table writes it ("256", "false", "a_major",
  /// "0.0"; a Flag's is "false"), or "" when the knob has none (a required
  /// knob, a type). The one home of every default outside ODS itself.
  const char *defaultValue;

  /// The default of an Integer knob; asserts that it has one.
  int64_t integerDefault() const;
  /// The default of a Bool or Flag knob.
  bool boolDefault() const { return std::string_view(defaultValue) == "true"; }
};

/// The knobs of one stage op.
struct StageKnobs {
  /// Stage name in tables and manifests: the op mnemonic ("w13").
  const char *stage;
  /// Full op name ("moe.w13").
  const char *opName;
  const KnobInfo *knobs;
  size_t knobCount;

  const KnobInfo *begin() const { return knobs; }
  const KnobInfo *end() const { return knobs + knobCount; }
  /// The knob called `name`, or nullptr.
  const KnobInfo *find(std::string_view name) const;
};

/// Every stage op's knobs, in ODS order.
const StageKnobs *stageKnobsBegin();
const StageKnobs *stageKnobsEnd();

/// The knobs of `stage` ("w13", "w2", "sort", "combine"), or nullptr.
const StageKnobs *lookupStageKnobs(std::string_view stage);

/// Every stage's name in pipeline order (the dialect's stage enum, equal to
/// abi::Stage), for messages: "quant, sort, w13, w2 or combine".
std::string stageNameList();

/// Knob `knob` of `stage`, or nullptr.
const KnobInfo *lookupKnob(std::string_view stage, std::string_view knob);

/// The knob that is parameter `knob` of the struct attribute spelled
/// `ownerSyntax` ("#moe.tile", "#moe.peer"), which is the same on every
/// stage that takes it; or nullptr.
const KnobInfo *lookupOwnedKnob(std::string_view ownerSyntax,
                                std::string_view knob);

} // namespace moec::moe

#endif // MOEC_DIALECT_MOE_MOEKNOBS_H
