//===- MoeKnobs.cpp - the generated knob tables ---------------------------===//

#include "moec/Dialect/Moe/MoeKnobs.h"

#include "moec/abi/stage.h"

#include <cassert>
#include <charconv>
#include <cstring>
#include <iterator>
#include <string>

namespace moec::moe {
namespace {
#include "moec/Dialect/Moe/MoeKnobs.inc"
} // namespace

const KnobInfo *StageKnobs::find(std::string_view name) const {
  for (const KnobInfo &knob : *this)
    if (name == knob.name)
      return &knob;
  return nullptr;
}

int64_t KnobInfo::integerDefault() const {
  assert(kind == KnobKind::Integer && *defaultValue &&
         "an Integer knob with an ODS default");
  int64_t value = 0;
  std::from_chars(defaultValue, defaultValue + std::strlen(defaultValue),
                  value);
  return value;
}

const StageKnobs *stageKnobsBegin() { return std::begin(kStageKnobs); }
const StageKnobs *stageKnobsEnd() { return std::end(kStageKnobs); }

const StageKnobs *lookupStageKnobs(std::string_view stage) {
  for (const StageKnobs &knobs : kStageKnobs)
    if (stage == knobs.stage)
      return &knobs;
  return nullptr;
}

const KnobInfo *lookupKnob(std::string_view stage, std::string_view knob) {
  const StageKnobs *knobs = lookupStageKnobs(stage);
  return knobs ? knobs->find(knob) : nullptr;
}

const KnobInfo *lookupOwnedKnob(std::string_view ownerSyntax,
                                std::string_view knob) {
  for (const StageKnobs &knobs : kStageKnobs)
    if (const KnobInfo *info = knobs.find(knob);
        info && ownerSyntax == info->ownerSyntax)
      return info;
  return nullptr;
}

std::string stageNameList() {
  // abi::kStages numbers the stages as the ODS enum does (MoeDialect.cpp
  // static_asserts it): plain C++, so the table parser's fuzz target builds
  // without MLIR.
  std::string list;
  for (size_t i = 0; i < abi::kStages.size(); ++i) {
    if (i > 0)
      list += i + 1 == abi::kStages.size() ? " or " : ", ";
    list += abi::stageName(abi::kStages[i]);
  }
  return list;
}

} // namespace moec::moe
