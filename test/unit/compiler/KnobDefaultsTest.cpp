//===- KnobDefaultsTest.cpp - ODS defaults and the decision checker -------===//
///
/// \file
/// The knob table generated from ODS carries every knob's default
/// (KnobInfo::defaultValue), which the symbol, the tuner and the cost model
/// read instead of restating it. This checks that the defaults are usable
/// as the tables spell values, and that the decision checker behind
/// "[knobs]" (knobDecisionProblems) names the stage and knob of a planted
/// fault: a missing row, a row for a knob ODS lacks, a duplicated row. The
/// tuner's refinements read their defaults from the same table; each must
/// be a knob with a default, and the Refined and SelectionWide rows must be
/// exactly the knobs the tuner refines.
///
//===----------------------------------------------------------------------===//

#include "moec/Compiler/KnobDecisions.h"
#include "moec/Compiler/Tuner.h"
#include "moec/Dialect/Moe/MoeKnobs.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

using namespace moec;

namespace {

std::vector<KnobDecision> realRows() {
  return {knobDecisionsBegin(), knobDecisionsEnd()};
}

std::vector<std::string> problemsOf(const std::vector<KnobDecision> &rows) {
  return knobDecisionProblems(rows.data(), rows.data() + rows.size());
}

/// Whether `text` is one of the comma-separated `choices`.
bool isChoice(const std::string &text, const std::string &choices) {
  size_t begin = 0;
  while (begin <= choices.size()) {
    size_t end = choices.find(", ", begin);
    if (end == std::string::npos)
      end = choices.size();
    if (choices.compare(begin, end - begin, text) == 0)
      return true;
    begin = end + 2;
  }
  return false;
}

} // namespace

TEST_CASE("the real decision rows have no problems", "[knobs]") {
  const std::vector<std::string> problems = problemsOf(realRows());
  for (const std::string &problem : problems)
    INFO(problem);
  CHECK(problems.empty());
}

TEST_CASE("a planted fault in the decision rows is named by stage and knob",
          "[knobs]") {
  SECTION("a knob of ODS without its row") {
    std::vector<KnobDecision> rows = realRows();
    auto split =
        std::find_if(rows.begin(), rows.end(), [](const KnobDecision &r) {
          return std::string(r.stage) == "w2" &&
                 std::string(r.knob) == "split_k";
        });
    REQUIRE(split != rows.end());
    rows.erase(split);
    CHECK(problemsOf(rows) ==
          std::vector<std::string>{"w2.split_k: no decision row"});
  }
  SECTION("a row for a knob or a stage ODS does not have") {
    std::vector<KnobDecision> rows = realRows();
    KnobDecision extra = rows.front();
    extra.stage = "w13";
    extra.knob = "no_such_knob";
    rows.push_back(extra);
    extra.stage = "w3";
    extra.knob = "m";
    rows.push_back(extra);
    CHECK(problemsOf(rows) ==
          std::vector<std::string>{"w13.no_such_knob: no such knob",
                                   "w3.m: no such stage"});
  }
  SECTION("a knob with two rows") {
    std::vector<KnobDecision> rows = realRows();
    const KnobDecision *m = lookupKnobDecision("w2", "m");
    REQUIRE(m);
    rows.push_back(*m);
    CHECK(problemsOf(rows) == std::vector<std::string>{"w2.m: 2 rows"});
  }
}

TEST_CASE("every ODS default is a value a table can write", "[knobs]") {
  int defaults = 0;
  for (const moe::StageKnobs *s = moe::stageKnobsBegin();
       s != moe::stageKnobsEnd(); ++s)
    for (const moe::KnobInfo &knob : *s) {
      const std::string value = knob.defaultValue;
      INFO(s->stage << "." << knob.name << " default '" << value << "'");
      // A knob has a default exactly when a table may leave it out.
      CHECK(value.empty() == knob.required);
      if (value.empty())
        continue;
      ++defaults;
      switch (knob.kind) {
      case moe::KnobKind::Integer:
        CHECK(std::to_string(knob.integerDefault()) == value);
        break;
      case moe::KnobKind::Bool:
      case moe::KnobKind::Flag:
        CHECK((value == "true" || value == "false"));
        CHECK(knob.boolDefault() == (value == "true"));
        break;
      case moe::KnobKind::Enum:
        CHECK(isChoice(value, knob.choices));
        break;
      case moe::KnobKind::Float:
        CHECK(value.find_first_not_of("0123456789.") == std::string::npos);
        break;
      case moe::KnobKind::Type:
        FAIL("a type knob has no default");
        break;
      }
    }
  CHECK(defaults > 0);
  // Spot checks against MoeAttrs.td and MoeOps.td, read by hand.
  CHECK(std::string(moe::lookupKnob("w2", "k")->defaultValue) == "256");
  CHECK(std::string(moe::lookupKnob("w13", "mfma")->defaultValue) ==
        "m16n16k128");
  CHECK(std::string(moe::lookupKnob("w13", "swiglu_limit")->defaultValue) ==
        "0.0");
  CHECK(std::string(moe::lookupKnob("combine", "split_k")->defaultValue) ==
        "1");
  CHECK(std::string(moe::lookupKnob("w13", "m")->defaultValue).empty());
  // The tile's waves and the combine tile's share a name, not an owner.
  CHECK(std::string(
            moe::lookupOwnedKnob("#moe.peer", "plan_cus")->defaultValue) ==
        "1");
  CHECK(std::string(moe::lookupOwnedKnob("#moe.combine_tile", "blocks")
                        ->defaultValue) == "0");
  CHECK(moe::lookupOwnedKnob("#moe.tile", "blocks") == nullptr);
}

TEST_CASE("the tuner refines ODS knobs with defaults, as the rows record",
          "[knobs][tuner]") {
  std::set<std::string> refined, selectionWide;
  for (const RefinedKnob &r : refinedKnobs()) {
    const std::string where = r.stage + "." + r.knob;
    INFO(where);
    // The tuner compares a kernel's value with the ODS default
    // (knobOrDefault), so the knob must be the stage's and have one.
    const moe::KnobInfo *knob = moe::lookupKnob(r.stage, r.knob);
    REQUIRE(knob);
    CHECK(*knob->defaultValue);
    (r.selectionWide ? selectionWide : refined).insert(where);
  }
  std::set<std::string> refinedRows, selectionWideRows;
  for (const KnobDecision *r = knobDecisionsBegin(); r != knobDecisionsEnd();
       ++r) {
    const std::string where = std::string(r->stage) + "." + r->knob;
    if (r->tuner == TunerDecision::Refined)
      refinedRows.insert(where);
    if (r->tuner == TunerDecision::SelectionWide)
      selectionWideRows.insert(where);
  }
  CHECK(refined == refinedRows);
  CHECK(selectionWide == selectionWideRows);
}
