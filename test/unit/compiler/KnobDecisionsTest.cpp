//===- KnobDecisionsTest.cpp - every ODS knob has its decisions recorded --===//
///
/// \file
/// Walks the knob table generated from ODS (MoeKnobs.h) against
/// moec/Compiler/KnobDecisions.h: a knob added to the dialect without its
/// tuner, cost-model and AITER decisions, or a row for a knob or stage the
/// dialect no longer has, fails here, naming the stage and knob. Where the
/// code's own lists are reachable as data (the tuner's SearchSpace, the
/// cost model's GemmStageShape, the AITER importer's name parser and table
/// builder, the generated table's knob owners), the decisions are checked
/// against them too.
///
//===----------------------------------------------------------------------===//

#include "moec/Compiler/AiterCsv.h"
#include "moec/Compiler/CostModel.h"
#include "moec/Compiler/KnobDecisions.h"
#include "moec/Compiler/Tuner.h"
#include "moec/Dialect/Moe/MoeKnobs.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace moec;

namespace {

std::string where(const KnobDecision &row) {
  return std::string(row.stage) + "." + row.knob;
}

std::set<std::string> rowsWith(TunerDecision decision) {
  std::set<std::string> out;
  for (const KnobDecision *r = knobDecisionsBegin(); r != knobDecisionsEnd(); ++r)
    if (r->tuner == decision)
      out.insert(where(*r));
  return out;
}

std::string joined(const std::vector<std::string> &items) {
  std::string text;
  for (const std::string &item : items)
    text += (text.empty() ? "" : ", ") + item;
  return text;
}

bool isMapped(const std::string &stage, const std::string &knob) {
  const KnobDecision *row = lookupKnobDecision(stage, knob);
  return row && row->aiter == AiterDecision::Mapped;
}

} // namespace

TEST_CASE("every knob of the generated table has a decision row, and every "
          "row a knob", "[knobs]") {
  std::vector<std::string> missing, unknown, duplicate;
  for (const moe::StageKnobs *s = moe::stageKnobsBegin();
       s != moe::stageKnobsEnd(); ++s)
    for (const moe::KnobInfo &knob : *s)
      if (!lookupKnobDecision(s->stage, knob.name))
        missing.push_back(std::string(s->stage) + "." + knob.name);
  std::set<std::string> seen;
  for (const KnobDecision *r = knobDecisionsBegin(); r != knobDecisionsEnd();
       ++r) {
    const moe::StageKnobs *stage = moe::lookupStageKnobs(r->stage);
    if (!stage)
      unknown.push_back(where(*r) + " (no such stage)");
    else if (!stage->find(r->knob))
      unknown.push_back(where(*r) + " (no such knob)");
    if (!seen.insert(where(*r)).second)
      duplicate.push_back(where(*r));
  }
  {
    INFO("knobs of the ODS-generated table without a row in "
         "compiler/lib/KnobDecisions.cpp: " << joined(missing));
    CHECK(missing.empty());
  }
  {
    INFO("rows naming a stage or knob the generated table lacks: "
         << joined(unknown));
    CHECK(unknown.empty());
  }
  {
    INFO("rows given twice: " << joined(duplicate));
    CHECK(duplicate.empty());
  }
  size_t knobs = 0;
  for (const moe::StageKnobs *s = moe::stageKnobsBegin();
       s != moe::stageKnobsEnd(); ++s)
    knobs += s->knobCount;
  CHECK(knobDecisionCount() == knobs);
}

TEST_CASE("every decision has its reason", "[knobs]") {
  std::vector<std::string> bare;
  for (const KnobDecision *r = knobDecisionsBegin(); r != knobDecisionsEnd();
       ++r) {
    auto empty = [](const char *text) { return !text || !*text; };
    // The decisions that are a refusal must say why; the others say how
    // (which grid axis, which term of the model, which name part).
    if (empty(r->tunerReason))
      bare.push_back(where(*r) + " tuner " + tunerDecisionName(r->tuner));
    if (empty(r->costReason))
      bare.push_back(where(*r) + " cost " + costDecisionName(r->cost));
    if (empty(r->aiterReason))
      bare.push_back(where(*r) + " aiter " + aiterDecisionName(r->aiter));
  }
  INFO("rows without a reason: " << joined(bare));
  CHECK(bare.empty());
  for (const KnobDecision *r = knobDecisionsBegin(); r != knobDecisionsEnd();
       ++r) {
    INFO(where(*r));
    if (r->tuner == TunerDecision::NotSearched)
      CHECK(std::string(r->tunerReason).size() > 0);
    if (r->cost == CostDecision::NotApplicable)
      CHECK(std::string(r->costReason).size() > 0);
    if (r->aiter == AiterDecision::NotMapped)
      CHECK(std::string(r->aiterReason).size() > 0);
  }
}

TEST_CASE("knob decisions agree with the generated table's owners", "[knobs]") {
  for (const KnobDecision *r = knobDecisionsBegin(); r != knobDecisionsEnd();
       ++r) {
    const moe::StageKnobs *stage = moe::lookupStageKnobs(r->stage);
    const moe::KnobInfo *knob = stage ? stage->find(r->knob) : nullptr;
    if (!knob)
      continue; // an unknown row fails the first test case
    INFO(where(*r) << " (owner '" << knob->owner << "')");
    const std::string owner = knob->owner;
    // The problem is the layer's, never a tuning choice.
    if (owner == "problem")
      CHECK(r->tuner == TunerDecision::Fixed);
    // The selection-wide groups are the fused stages' handshake knobs.
    if (r->tuner == TunerDecision::SelectionWide)
      CHECK(owner == "peer");
    // AITER's rows are single-GPU: nothing of the peer transport maps.
    if (owner == "peer")
      CHECK(r->aiter == AiterDecision::NotMapped);
  }
}

TEST_CASE("Grid rows are the tuner's SearchSpace axes", "[knobs][tuner]") {
  const SearchSpace space;
  // Each axis: the knobs it sets (Tuner.cpp tiledKernel).
  const std::map<std::string, size_t> axes = {
      {"w13.m", space.tileM.size()},     {"w2.m", space.tileM.size()},
      {"sort.m_tile", space.tileM.size()}, {"w13.n", space.w13N.size()},
      {"w2.n", space.w2N.size()},        {"w13.waves", space.waves.size()},
      {"w2.waves", space.waves.size()},  {"w13.b_direct", space.bDirect.size()},
      {"w2.b_direct", space.bDirect.size()}};
  std::set<std::string> expected;
  for (const auto &[knob, values] : axes) {
    INFO(knob);
    CHECK(values > 1);
    expected.insert(knob);
  }
  // The MFMA shape follows tile M: both shapes occur only when the grid
  // has tile M 128 and a smaller one.
  const bool has128 = std::count(space.tileM.begin(), space.tileM.end(), 128);
  const bool hasSmaller = std::any_of(space.tileM.begin(), space.tileM.end(),
                                      [](int64_t m) { return m < 128; });
  CHECK(has128);
  CHECK(hasSmaller);
  expected.insert("w13.mfma");
  expected.insert("w2.mfma");
  CHECK(rowsWith(TunerDecision::Grid) == expected);
  // Refinement rounds are on by default, so the Refined rows are searched.
  CHECK(space.refinementRounds > 0);
  CHECK(!rowsWith(TunerDecision::Refined).empty());
}

TEST_CASE("the knobs GemmStageShape holds are Modeled and reach the model",
          "[knobs][cost]") {
  // The fields Tuner.cpp's shapeOf fills from a GEMM kernel's knobs and
  // problem, each with a change of it.
  using Change = std::function<void(GemmStageShape &)>;
  const std::map<std::string, Change> fields = {
      {"hidden", [](GemmStageShape &s) { s.hidden *= 2; }},
      {"intermediate", [](GemmStageShape &s) { s.intermediate *= 2; }},
      {"experts", [](GemmStageShape &s) { s.experts /= 4; }},
      {"top_k", [](GemmStageShape &s) { s.topK *= 2; }},
      {"ep", [](GemmStageShape &s) { s.ep *= 2; }},
      {"m", [](GemmStageShape &s) { s.tileM = 128; }},
      {"n", [](GemmStageShape &s) { s.tileN *= 2; }},
      {"waves", [](GemmStageShape &s) { s.waves = 2; }},
      {"mfma", [](GemmStageShape &s) { s.mfma32 = !s.mfma32; }},
      {"b_direct", [](GemmStageShape &s) { s.bDirect = !s.bDirect; }},
  };
  rt::KernelResources resources;
  resources.vgpr = 128;
  resources.sgpr = 64;
  resources.ldsBytes = 32768;
  for (abi::Stage gemm : {abi::Stage::W13, abi::Stage::W2})
    for (const auto &[knob, change] : fields) {
      const char *stage = abi::stageName(gemm);
      INFO(stage << "." << knob);
      const KnobDecision *row = lookupKnobDecision(stage, knob);
      REQUIRE(row);
      CHECK(row->cost == CostDecision::Modeled);
      // Flash EP4: the change must reach the tile's counts or some key's
      // prediction (at this shape the HBM term dominates, so the LDS and
      // MFMA terms do not always show in the total).
      GemmStageShape base;
      base.stage = gemm;
      base.hidden = 5120;
      base.intermediate = 2304;
      base.experts = 384;
      base.topK = 6;
      base.ep = 4;
      base.tileM = 32;
      base.tileN = 128;
      base.waves = 4;
      GemmStageShape changed = base;
      change(changed);
      // The model's inputs (the analytic counts of a tile, which the
      // emulator's counts replace) or its prediction at some key.
      const TileCounts a = countTile(base), b = countTile(changed);
      bool moved = a.globalBytesRead != b.globalBytesRead ||
                   a.globalBytesWritten != b.globalBytesWritten ||
                   a.ldsBytesRead != b.ldsBytesRead ||
                   a.ldsBytesWritten != b.ldsBytesWritten ||
                   a.scaledMfmas != b.scaledMfmas ||
                   a.otherInstructions != b.otherInstructions;
      for (int64_t m : {1, 16, 256, 4096}) {
        const double before =
            predictStage(base, resources, 64 * uint32_t(base.waves), m,
                         CostModelParameters(), target::kGfx950)
                .totalUs;
        const double after =
            predictStage(changed, resources, 64 * uint32_t(changed.waves), m,
                         CostModelParameters(), target::kGfx950)
                .totalUs;
        moved |= before != after;
      }
      CHECK(moved);
    }
}

TEST_CASE("every knob the AITER name parser writes is Mapped", "[knobs][aiter]") {
  const std::vector<std::pair<std::string, int>> names = {
      {"flydsl_moe1_afp8_wfp4_bf16_t64x256x256_w3_bnt0_gui_xcd4_fp8", 1},
      {"flydsl_moe1_afp8_wfp4_bf16_t32x128x256_w4_gui", 1},
      {"flydsl_moe1_afp8_wfp4_bf16_t32x64x256_w4_gui_fp8", 1},
      {"flydsl_moe1_afp8_wfp4_bf16_t32x64x256_w4_gui_kw4_fp8", 1},
      {"flydsl_moe2_afp8_wfp4_bf16_t32x256x128_reduce_bnt2_persist", 2},
      {"flydsl_moe2_afp8_wfp4_bf16_t64x128x256_atomic_persist_sbm128", 2},
      {"flydsl_moe2_afp8_wfp4_bf16_t32x256x256_atomic_bnt2_xcd4", 2},
  };
  for (const auto &[name, stage] : names) {
    INFO(name);
    AiterStageKnobs knobs;
    std::string reason;
    REQUIRE(parseAiterKernelName(name, stage, knobs, reason));
    const char *moecStage = stage == 1 ? "w13" : "w2";
    for (const auto &[knob, value] : knobs.knobs) {
      INFO(moecStage << "." << knob << "=" << value);
      CHECK(isMapped(moecStage, knob));
    }
  }
}

TEST_CASE("the AITER table builder writes the Mapped knobs and only those",
          "[knobs][aiter]") {
  const std::string key =
      "torch.bfloat16,torch.float8_e4m3fn,torch.float4_e2m1fn_x2,"
      "QuantType.per_1x32,1,0";
  const std::string header =
      "gfx,cu_num,token,model_dim,inter_dim,expert,topk,act_type,dtype,"
      "q_dtype_a,q_dtype_w,q_type,use_g1u1,doweight_stage1,block_m,ksplit,"
      "kernelName1,kernelName2";
  // Stage 1 with _w, _bnt0, _gui, _xcd; stage 2 with _bnt2, _xcd and a sort
  // block of two tiles (_sbm64); a Silu, a Swiglu and a Situv2 row.
  const std::string names =
      "flydsl_moe1_afp8_wfp4_bf16_t64x128x256_w3_bnt0_gui_xcd4_fp8,"
      "flydsl_moe2_afp8_wfp4_bf16_t32x256x256_atomic_bnt2_xcd4_sbm64";
  const std::string tp =
      header + "\n" +
      "gfx950,256,8,7168,512,384,6,ActivationType.Silu," + key + ",64,0," +
      names + "\n" + "gfx950,256,16,7168,512,384,6,ActivationType.Swiglu," +
      key + ",64,0," + names + "\n" +
      "gfx950,256,32,7168,512,384,6,ActivationType.Situv2," + key + ",64,0," +
      names + "\n" +
      // Stage 1 with _kw2 (k_waves), at tile m 32.
      "gfx950,256,4,7168,512,384,6,ActivationType.Silu," + key + ",32,0," +
      "flydsl_moe1_afp8_wfp4_bf16_t32x64x256_w4_gui_kw2_fp8,"
      "flydsl_moe2_afp8_wfp4_bf16_t32x256x256_atomic_bnt2\n";
  // An FHMoE row: the shared FP8 expert and stage 1's _w as waves per EU.
  const std::string fhmoe =
      header + ",shared_expert_id,hidden_pad,intermediate_pad,gate_mode\n" +
      "gfx950,256,8,7168,512,257,9,ActivationType.Silu," + key + ",32,0," +
      "flydsl_moe1_afp8_wfp4_bf16_t32x128x256_w2_gui_fp8,"
      "flydsl_moe2_afp8_wfp4_bf16_t32x256x256_atomic,256,0,0,"
      "GateMode.INTERLEAVE\n";
  std::vector<AiterCsvRow> rows, more;
  std::string error;
  TuningTable table;
  {
    const bool parsed = parseAiterCsv("tp.csv", tp, rows, error) &&
                        parseAiterCsv("fhmoe.csv", fhmoe, more, error);
    INFO(error);
    REQUIRE(parsed);
    rows.insert(rows.end(), more.begin(), more.end());
    std::vector<rt::AiterRowInfo> manifestRows;
    std::vector<std::string> unsupported;
    const bool built =
        buildAiterTable(rows, target::kGfx950, AiterCompileOptions(), table,
                        manifestRows, unsupported, error);
    INFO(error << " " << joined(unsupported));
    REQUIRE(built);
    REQUIRE(unsupported.empty());
  }

  // W13 and W2 are the kernels AITER names: every knob written is Mapped,
  // and every Mapped knob that is not a problem field is written by some
  // row. The quant, sort and combine are moec's own (waves=4, NotMapped),
  // except the sort's m_tile (block_m).
  std::map<std::string, std::set<std::string>> written;
  for (const TableKernel &kernel : table.kernels)
    for (const auto &[knob, value] : kernel.knobs) {
      const std::string stage = abi::stageName(kernel.stage);
      written[stage].insert(knob);
      INFO(stage << "." << knob << "=" << value);
      if (abi::isGemmStage(kernel.stage) ||
          (kernel.stage == abi::Stage::Sort && knob == "m_tile"))
        CHECK(isMapped(stage, knob));
      else
        CHECK_FALSE(isMapped(stage, knob));
    }
  for (const KnobDecision *r = knobDecisionsBegin(); r != knobDecisionsEnd();
       ++r) {
    const moe::StageKnobs *stage = moe::lookupStageKnobs(r->stage);
    const moe::KnobInfo *knob = stage ? stage->find(r->knob) : nullptr;
    if (!knob || r->aiter != AiterDecision::Mapped ||
        std::string(knob->owner) == "problem")
      continue; // an unknown row fails the first test case
    INFO(where(*r) << ": Mapped, but no sample row's kernel sets it");
    CHECK(written[r->stage].count(r->knob));
  }
  // The problem fields: from the CSV's columns, ep always 1.
  REQUIRE(!table.problems.empty());
  for (const TableProblem &problem : table.problems) {
    CHECK(problem.hidden == 7168);
    CHECK(problem.intermediate == 512);
    CHECK(problem.ep == 1);
  }
  for (const char *stage : {"w13", "w2", "quant", "sort", "combine"}) {
    INFO(stage);
    for (const char *field : {"hidden", "intermediate", "experts", "top_k"})
      CHECK(isMapped(stage, field));
    CHECK_FALSE(isMapped(stage, "ep"));
  }
}
