//===- MoeKnobs.cpp - the generated knob tables ---------------------------===//

#include "moec/Dialect/Moe/MoeKnobs.h"

#include <iterator>

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

const StageKnobs *stageKnobsBegin() { return std::begin(kStageKnobs); }
const StageKnobs *stageKnobsEnd() { return std::end(kStageKnobs); }

const StageKnobs *lookupStageKnobs(std::string_view stage) {
  for (const StageKnobs &knobs : kStageKnobs)
    if (stage == knobs.stage)
      return &knobs;
  return nullptr;
}

} // namespace moec::moe
