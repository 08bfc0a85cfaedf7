//===- KnobSpelling.cpp - knob spellings moe no longer reads --------------===//

#include "moec/Compiler/KnobSpelling.h"
#include "moec/Dialect/Moe/MoeKnobs.h"

namespace moec {

std::string oldKnobSpelling(abi::Stage stage, const std::string &knob,
                            const std::string &value) {
  const moe::StageKnobs *knobs = moe::lookupStageKnobs(abi::stageName(stage));
  if (!knobs)
    return "";
  if (stage == abi::Stage::Sort && knob == "m")
    return "knob 'm' of a sort kernel is spelled m_tile: write m_tile=" + value;
  const moe::KnobInfo *info = knobs->find(knob);
  if (!info)
    return "";
  if ((info->kind == moe::KnobKind::Bool || info->kind == moe::KnobKind::Flag) &&
      (value == "0" || value == "1"))
    return "knob '" + knob + "': write " + knob + "=" +
           (value == "1" ? "true" : "false") + " (0/1 is the old spelling)";
  if (knob == "mfma" && (value == "16x16x128" || value == "32x32x64"))
    return "knob 'mfma': write mfma=" +
           std::string(value == "16x16x128" ? "m16n16k128" : "m32n32k64") +
           " ('" + value + "' is the old spelling)";
  if (knob == "transport" && value == "fixed-slot")
    return "knob 'transport': write transport=fixed_slot ('fixed-slot' is the "
           "old spelling)";
  if (knob == "transport" && value == "none")
    return "knob 'transport': leave it out for a stage without a peer "
           "transport ('none' is the old spelling)";
  return "";
}

} // namespace moec
