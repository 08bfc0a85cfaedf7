//===- TuningTableTest.cpp - the table parser and the stage builder -------===//

#include "moec/Compiler/Registration.h"
#include "moec/Compiler/StageBuilder.h"
#include "StageBuilderFixture.h"
#include "moec/Compiler/TuningTable.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"

#include <algorithm>
#include <catch2/catch.hpp>

namespace {

const char *kGoodTable = R"(moec-table 1
# comment
problem p family=megamoe hidden=512 intermediate=256 experts=8 top_k=2 ep=2
kernel a stage=w2 problem=p m=32 n=128
kernel b stage=w13 problem=p m=16 n=64 swiglu_limit=10
config c kernels=b,a provenance=measured
select network=n family=megamoe ep=2 workspace=512 transport=fixed_slot
row m=4 config=c
row m=1 config=c
)";

std::string parseError(const std::string &text) {
  moec::TuningTable table;
  std::string error;
  bool ok = moec::parseTuningTable("t.table", text, table, error);
  CHECK_FALSE(ok);
  return error;
}

std::string withLine(const std::string &line) {
  // A valid table with `line` inserted after the kernel lines.
  std::string text = kGoodTable;
  auto at = text.find("config c");
  return text.insert(at, line + "\n");
}

} // namespace

TEST_CASE("a valid table parses with every field", "[table]") {
  moec::TuningTable table;
  std::string error;
  REQUIRE(moec::parseTuningTable("t.table", kGoodTable, table, error));
  REQUIRE(table.problems.size() == 1);
  CHECK(table.problems[0].hidden == 512);
  CHECK(table.problems[0].ep == 2);
  REQUIRE(table.kernels.size() == 2);
  CHECK(table.kernels[1].knobs.at("swiglu_limit") == "10");
  CHECK(table.kernels[1].where.line == 5);
  REQUIRE(table.configs.size() == 1);
  CHECK(table.configs[0].kernels == std::vector<std::string>{"b", "a"});
  CHECK(table.configs[0].provenance == "measured");
  REQUIRE(table.selections.size() == 1);
  CHECK(table.selections[0].rows.size() == 2);
  CHECK(table.selections[0].aboveMax == "largest");
}

TEST_CASE("table errors name the file, line and field", "[table]") {
  CHECK(parseError("problem p family=tp\n") ==
        "t.table:1: expected the header 'moec-table 1'");
  CHECK(parseError("") == "t.table:1: empty table: expected the header 'moec-table 1'");
  CHECK(parseError(withLine("kernel x stage=w2 problem=nope m=32 n=128")) ==
        "t.table:6: field 'problem': unknown problem 'nope'");
  CHECK(parseError(withLine("frobnicate x=1")) ==
        "t.table:6: unknown directive 'frobnicate' (expected problem, kernel, "
        "config, select or row)");
  CHECK(parseError(withLine("kernel a stage=w2 problem=p m=32 n=128")) ==
        "t.table:6: kernel 'a' defined twice");
  CHECK(parseError(withLine("kernel z stage=w2 problem=p m=32 n=128")) ==
        "t.table:6: kernel 'z' is used by no config");
  CHECK(parseError(std::string(kGoodTable) + "row m=4 config=c\n") ==
        "t.table:10: field 'm': row m=4 already given at line 8");
  CHECK(parseError(std::string(kGoodTable) + "row m=x config=c\n") ==
        "t.table:10: field 'm': expected an integer, got 'x'");
  CHECK(parseError(std::string(kGoodTable) + "row m=0 config=c\n") ==
        "t.table:10: field 'm': must be in [1, 4294967295], got 0");
  CHECK(parseError(std::string(kGoodTable) + "row m=9\n") ==
        "t.table:10: field 'config': missing");
  CHECK(parseError(std::string(kGoodTable) +
                   "select network=n family=megamoe ep=2 workspace=512 "
                   "transport=fixed_slot\nrow m=1 config=c\n") ==
        "t.table:10: field 'workspace': selection table for network n ep 2 "
        "workspace 512 already defined at line 7");
  CHECK(parseError(withLine("config d kernels=a")) ==
        "t.table:6: config 'd' is not selected by any row, so no key reaches it");
}

TEST_CASE("a stage's description rebuilds the same op", "[stage]") {
  moec::test::StageBuilderFixture fixture;
  mlir::OpBuilder &builder = fixture.builder;

  for (moec::abi::Stage stage : {moec::abi::Stage::W13, moec::abi::Stage::W2}) {
    moec::StageSpec spec;
    spec.stage = stage;
    spec.fields = {{"hidden", "512"}, {"intermediate", "256"},
                   {"experts", "8"},  {"top_k", "2"},
                   {"ep", "2"},       {"m", "32"},
                   {"n", "128"},      {"orientation", "b_major"},
                   {"a_swizzle", "true"}};
    moec::StageDescription first, second;
    std::string error;
    REQUIRE(moec::buildStageOp(builder, spec, first, error));
    // The manifest carries the printed attributes; rebuilding from them
    // must give the same kernel (what `moec run` relies on).
    moec::StageSpec again = moec::stageSpecOfAttributes(stage, first.attributes);
    REQUIRE(moec::buildStageOp(builder, again, second, error));
    CHECK(first.symbol == second.symbol);
    CHECK(first.attributes == second.attributes);
    CHECK(first.opAttributes == second.opAttributes);
    CHECK(first.abi.args.size() == second.abi.args.size());
    // Defaults come from ODS: the printed tile names only what differs.
    auto tile = std::find_if(first.attributes.begin(), first.attributes.end(),
                             [](const auto &a) { return a.first == "tile"; });
    REQUIRE(tile != first.attributes.end());
    CHECK(tile->second ==
          "#moe.tile<m = 32, n = 128, orientation = b_major, a_swizzle = true>");
  }

  moec::StageSpec bad;
  bad.stage = moec::abi::Stage::W2;
  bad.where = {"t.table", 7};
  bad.fields = {{"hidden", "512"}, {"intermediate", "256"}, {"experts", "8"},
                {"top_k", "2"},    {"m", "48"},            {"n", "128"}};
  moec::StageDescription description;
  std::string error;
  CHECK_FALSE(moec::buildStageOp(builder, bad, description, error));
  CHECK(error == "t.table:7: tile.m must be one of 16, 32, 64, 128, got 48");

  bad.fields["m"] = "32";
  bad.fields["mfma"] = "8x8x8";
  CHECK_FALSE(moec::buildStageOp(builder, bad, description, error));
  CHECK(error == "t.table:7: knob 'mfma': expected one of m16n16k128, "
                 "m32n32k64, got '8x8x8'");

  bad.fields["mfma"] = "16x16x128";
  CHECK_FALSE(moec::buildStageOp(builder, bad, description, error));
  CHECK(error == "t.table:7: knob 'mfma': write mfma=m16n16k128 ('16x16x128' "
                 "is the old spelling)");

  bad.fields.erase("mfma");
  bad.fields["b_prefetch"] = "1";
  CHECK_FALSE(moec::buildStageOp(builder, bad, description, error));
  CHECK(error == "t.table:7: knob 'b_prefetch': write b_prefetch=true (0/1 is "
                 "the old spelling)");

  bad.fields["b_prefetch"] = "yes";
  CHECK_FALSE(moec::buildStageOp(builder, bad, description, error));
  CHECK(error == "t.table:7: knob 'b_prefetch': expected true or false, got "
                 "'yes'");

  bad.fields.erase("b_prefetch");
  bad.fields["persist_skew"] = "x";
  CHECK_FALSE(moec::buildStageOp(builder, bad, description, error));
  CHECK(error.rfind("t.table:7: knob 'persist_skew': ", 0) == 0);

  bad.fields.erase("persist_skew");
  bad.fields["colour"] = "blue";
  CHECK_FALSE(moec::buildStageOp(builder, bad, description, error));
  CHECK(error == "t.table:7: knob 'colour': not a knob of a w2 kernel");

  // A knob the stage has no attribute for: dispatch_cus belongs to the
  // peer transport, which a combine kernel does not take.
  bad.fields.erase("colour");
  bad.stage = moec::abi::Stage::Combine;
  bad.fields.erase("m");
  bad.fields.erase("n");
  bad.fields["dispatch_cus"] = "4";
  CHECK_FALSE(moec::buildStageOp(builder, bad, description, error));
  CHECK(error == "t.table:7: knob 'dispatch_cus': not a knob of a combine kernel");
}

TEST_CASE("row provenance: model-ranked or measured, each with its fields",
          "[table][provenance]") {
  auto withRows = [](const std::string &rows) {
    std::string text = kGoodTable;
    text = text.substr(0, text.find("row m=4"));
    return text + rows;
  };
  moec::TuningTable table;
  std::string error;
  REQUIRE(moec::parseTuningTable(
      "t.table",
      withRows("row m=1 config=c provenance=model-ranked model=moec-cost-1 "
               "predicted_us=12.3\n"
               "row m=4 config=c provenance=measured device=MI355X "
               "method=hip-graph-median date=2026-11-30 measured_us=201.5 "
               "model=moec-cost-1 predicted_us=180\n"
               "row m=8 config=c\n"),
      table, error));
  INFO(error);
  const auto &rows = table.selections[0].rows;
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].provenance.kind == "model-ranked");
  CHECK(rows[0].provenance.model == "moec-cost-1");
  CHECK(rows[0].provenance.predictedUs == "12.3");
  CHECK(rows[0].provenance.measuredUs.empty());
  CHECK(rows[1].provenance.kind == "measured");
  CHECK(rows[1].provenance.device == "MI355X");
  CHECK(rows[1].provenance.date == "2026-11-30");
  CHECK(rows[1].provenance.measuredUs == "201.5");
  CHECK(rows[1].provenance.predictedUs == "180");
  CHECK(rows[2].provenance.kind.empty());

  // Nothing unmeasured is labelled measured, and each kind has its fields.
  CHECK(parseError(withRows("row m=1 config=c provenance=model-ranked "
                            "model=moec-cost-1 predicted_us=3 measured_us=3\n")) ==
        "t.table:8: field 'measured_us': only a measured row has it (nothing "
        "unmeasured is labelled measured)");
  CHECK(parseError(withRows("row m=1 config=c provenance=measured device=d "
                            "method=m date=2026-11-30\n")) ==
        "t.table:8: field 'measured_us': missing");
  CHECK(parseError(withRows("row m=1 config=c provenance=model-ranked "
                            "predicted_us=3\n")) ==
        "t.table:8: field 'model': missing");
  CHECK(parseError(withRows("row m=1 config=c predicted_us=3\n")) ==
        "t.table:8: field 'predicted_us': needs provenance=model-ranked or "
        "provenance=measured");
  CHECK(parseError(withRows("row m=1 config=c provenance=model-ranked "
                            "model=x predicted_us=-1\n")) ==
        "t.table:8: field 'predicted_us': expected a time in microseconds (a "
        "decimal number >= 0), got '-1'");
  CHECK(parseError(withRows("row m=1 config=c provenance=measured device=d "
                            "method=m date=yesterday measured_us=1\n")) ==
        "t.table:8: field 'date': expected YYYY-MM-DD, got 'yesterday'");
  CHECK(parseError(withRows("row m=1 config=c provenance=guessed\n")) ==
        "t.table:8: field 'provenance': expected model-ranked or measured, got "
        "'guessed'");
}
