//===- StageBuilder.cpp - knobs -> moe stage ops --------------------------===//
///
/// \file
/// Routes a stage's knobs through the dialect's generated knob table: the
/// knobs of one struct attribute become its text (`#moe.tile<m = 16, ...>`)
/// and plain attributes their literals, the dialect's parsers read them
/// (filling in ODS defaults and running the attribute verifiers), and the
/// op is created generically and verified. Nothing here knows a knob by
/// name.
///
//===----------------------------------------------------------------------===//

#include "moec/Compiler/StageBuilder.h"
#include "moec/Codegen/StageKernelInterface.h"
#include "moec/Dialect/Moe/MoeDialect.h"
#include "moec/Dialect/Moe/MoeKnobs.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

using namespace mlir;

namespace moec {
namespace {

/// "file:line: " of a spec, or "".
std::string wherePrefix(const StageSpec &spec) {
  if (spec.where.file.empty())
    return "";
  return spec.where.file + ":" + std::to_string(spec.where.line) + ": ";
}

/// Where a stage was written, as an MLIR location for its diagnostics.
Location locationOf(MLIRContext *context, const StageSpec &spec) {
  if (spec.where.file.empty())
    return UnknownLoc::get(context);
  return FileLineColLoc::get(context, spec.where.file, spec.where.line, 1);
}

/// Captures the first diagnostic emitted while it lives, with its column
/// when it points into parsed text.
struct FirstDiagnostic {
  explicit FirstDiagnostic(MLIRContext *context)
      : handler(context, [this](Diagnostic &diag) {
          if (text.empty()) {
            text = diag.str();
            if (auto loc = dyn_cast<FileLineColLoc>(diag.getLocation()))
              column = loc.getColumn();
          }
          return success();
        }) {}
  std::string text;
  unsigned column = 0;
  ScopedDiagnosticHandler handler;
};

/// The element types of a stage's problem, implied by the stage: quant
/// turns the BF16 tokens into the FP8 rows W13 reads, W13 reads FP8 and
/// writes the FP8 intermediate, W2 writes BF16, sort and combine move BF16
/// rows. A switch over the enum, so a new stage is a compiler warning here.
std::map<std::string, std::string> stageTypes(moe::Stage stage) {
  switch (stage) {
  case moe::Stage::w13:
    return {{"activation", "f8E4M3FN"},
            {"weight", "f4E2M1FN"},
            {"output", "f8E4M3FN"}};
  case moe::Stage::quant:
    return {{"activation", "bf16"},
            {"weight", "f4E2M1FN"},
            {"output", "f8E4M3FN"}};
  case moe::Stage::w2:
    return {{"activation", "f8E4M3FN"},
            {"weight", "f4E2M1FN"},
            {"output", "bf16"}};
  case moe::Stage::sort:
  case moe::Stage::combine:
    break;
  }
  return {{"activation", "bf16"}, {"weight", "f4E2M1FN"}, {"output", "bf16"}};
}

/// The text of one struct attribute being assembled from its knobs, with
/// the column range each knob occupies (for messages).
struct StructText {
  std::string syntax;
  std::vector<std::pair<std::string, std::string>> knobs;

  /// The text, and the [begin, end) range of each knob in it.
  std::string text(std::vector<std::pair<std::pair<size_t, size_t>, std::string>>
                       &ranges) const {
    std::string out = syntax + "<";
    for (size_t i = 0; i < knobs.size(); ++i) {
      if (i > 0)
        out += ", ";
      const size_t begin = out.size();
      out += knobs[i].first + " = " + knobs[i].second;
      ranges.push_back({{begin, out.size()}, knobs[i].first});
    }
    return out + ">";
  }
};

/// Names the stages the knob table knows, for messages.
std::string stageList() {
  std::string list;
  for (const moe::StageKnobs *s = moe::stageKnobsBegin(); s != moe::stageKnobsEnd();
       ++s)
    list += (list.empty() ? "" : ", ") + std::string(s->stage);
  return list;
}

/// Parses one plain attribute's literal.
Attribute parseLiteral(MLIRContext *context, const moe::KnobInfo &knob,
                       const std::string &value) {
  std::string literal = value;
  // A float attribute also takes an integer ("10"), as tables write it.
  if (knob.kind == moe::KnobKind::Float &&
      value.find_first_of(".eE") == std::string::npos)
    literal += ".0";
  return parseAttribute(literal + " : " + knob.literalType, context);
}

} // namespace

StageSpec stageSpecOf(const TuningTable &table, const TableKernel &kernel) {
  StageSpec spec{kernel.stage, kernel.knobs, kernel.where};
  if (const TableProblem *problem = table.findProblem(kernel.problem)) {
    spec.fields["hidden"] = std::to_string(problem->hidden);
    spec.fields["intermediate"] = std::to_string(problem->intermediate);
    spec.fields["experts"] = std::to_string(problem->experts);
    spec.fields["top_k"] = std::to_string(problem->topK);
    spec.fields["ep"] = std::to_string(problem->ep);
    // MXFP4 activations: the element types of the stage's problem (FP8,
    // the default of stageTypes, stays implied so A8W4 specs are unchanged).
    auto type = [](const std::string &format) {
      return format == "fp4"    ? "f4E2M1FN"
             : format == "bf16" ? "bf16"
                                : "f8E4M3FN";
    };
    // A16W4 (bf16) is spelled out like MXFP4.
    const bool fp4In = problem->aFormat != "fp8";
    const bool fp4Mid = problem->midFormat != "fp8";
    switch (kernel.stage) {
    case abi::Stage::Quant:
      if (fp4In)
        spec.fields["output"] = type(problem->aFormat);
      break;
    case abi::Stage::W13:
      if (fp4In || fp4Mid) {
        spec.fields["activation"] = type(problem->aFormat);
        spec.fields["output"] = type(problem->midFormat);
      }
      break;
    case abi::Stage::W2:
      if (fp4Mid)
        spec.fields["activation"] = type(problem->midFormat);
      break;
    case abi::Stage::Sort:
    case abi::Stage::Combine:
      // FHMoE: the last of every token's routes is the shared expert's, so
      // a routed slot naming its id must not reach it a second time.
      if (problem->family == "fhmoe")
        spec.fields["shared_last_route"] = "true";
      break;
    }
  }
  return spec;
}

StageSpec stageSpecOfAttributes(
    abi::Stage stage,
    const std::vector<std::pair<std::string, std::string>> &attributes) {
  StageSpec spec;
  spec.stage = stage;
  auto trim = [](std::string s) {
    size_t b = s.find_first_not_of(' '), e = s.find_last_not_of(' ');
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  };
  for (const auto &[name, text] : attributes) {
    size_t open = text.find('<');
    if (!text.empty() && text[0] == '#' && open != std::string::npos &&
        text.back() == '>') {
      // `#moe.tile<m = 16, n = 64>`: one knob per parameter. Values are
      // integers, keywords or types, none of which holds a comma.
      std::string inner = text.substr(open + 1, text.size() - open - 2);
      size_t start = 0;
      while (start < inner.size()) {
        size_t comma = inner.find(',', start);
        std::string item = inner.substr(
            start, comma == std::string::npos ? std::string::npos : comma - start);
        size_t eq = item.find('=');
        if (eq != std::string::npos)
          spec.fields[trim(item.substr(0, eq))] = trim(item.substr(eq + 1));
        if (comma == std::string::npos)
          break;
        start = comma + 1;
      }
      continue;
    }
    if (text == "unit") {
      spec.fields[name] = "true";
      continue;
    }
    // `10 : i64`, `1.000000e+01 : f32`.
    spec.fields[name] = trim(text.substr(0, text.find(" : ")));
  }
  return spec;
}

Operation *buildStageOp(OpBuilder &builder, const StageSpec &spec,
                        StageDescription &description, std::string &error) {
  MLIRContext *context = builder.getContext();
  const std::string where = wherePrefix(spec);
  const std::string stageText = abi::stageName(spec.stage);
  const moe::StageKnobs *knobs = moe::lookupStageKnobs(stageText);
  if (!knobs) {
    error = where + "field 'stage': unsupported stage '" + stageText +
            "' (expected " + stageList() + ")";
    return nullptr;
  }

  // Route every knob to its owner.
  std::map<std::string, StructText> structs;
  std::vector<std::pair<const moe::KnobInfo *, std::string>> plain;
  for (const auto &[name, value] : spec.fields) {
    if (std::string old = oldKnobSpelling(spec.stage, name, value);
        !old.empty()) {
      error = where + old;
      return nullptr;
    }
    const moe::KnobInfo *knob = knobs->find(name);
    if (!knob) {
      error = where + "knob '" + name + "': not a knob of a " + stageText +
              " kernel";
      return nullptr;
    }
    if (*knob->owner) {
      StructText &owner = structs[knob->owner];
      owner.syntax = knob->ownerSyntax;
      owner.knobs.push_back({name, value});
    } else {
      plain.push_back({knob, value});
    }
  }
  // Required owners are built even without knobs, so their parser reports
  // what is missing.
  for (const moe::KnobInfo &knob : *knobs)
    if (*knob.owner && !knob.optionalOwner)
      structs[knob.owner].syntax = knob.ownerSyntax;
  if (structs.count("problem")) {
    StructText &problem = structs["problem"];
    for (const auto &[name, type] : stageTypes(moe::fromAbiStage(spec.stage)))
      if (!spec.fields.count(name))
        problem.knobs.push_back({name, type});
  }

  OperationState state(locationOf(context, spec), knobs->opName);
  state.addAttribute("sym_name", builder.getStringAttr("pending"));
  for (auto &[owner, text] : structs) {
    std::vector<std::pair<std::pair<size_t, size_t>, std::string>> ranges;
    const std::string source = text.text(ranges);
    FirstDiagnostic first(context);
    Attribute attr = parseAttribute(source, context);
    if (!attr) {
      // Name the knob whose text the parser stopped in (columns count
      // from 1); a message about the whole attribute names none.
      std::string knob;
      for (const auto &[range, name] : ranges)
        if (first.column > range.first && first.column <= range.second)
          knob = name;
      const moe::KnobInfo *info = knob.empty() ? nullptr : knobs->find(knob);
      if (info && info->kind == moe::KnobKind::Enum)
        error = where + "knob '" + knob + "': expected one of " +
                info->choices + ", got '" + spec.fields.at(knob) + "'";
      else if (info && info->kind == moe::KnobKind::Bool)
        error = where + "knob '" + knob + "': expected true or false, got '" +
                spec.fields.at(knob) + "'";
      else if (!knob.empty())
        error = where + "knob '" + knob + "': " +
                (first.text.empty() ? "invalid value" : first.text);
      else if (first.text.rfind(owner + ".", 0) == 0)
        error = where + first.text; // a verifier's message names the field
      else
        error = where + owner + ": " +
                (first.text.empty() ? "invalid" : first.text);
      return nullptr;
    }
    state.addAttribute(owner, attr);
  }
  for (const auto &[knob, value] : plain) {
    if (knob->kind == moe::KnobKind::Flag) {
      if (value != "true" && value != "false") {
        error = where + "knob '" + knob->name + "': expected true or false, got '" +
                value + "'";
        return nullptr;
      }
      if (value == "true")
        state.addAttribute(knob->name, builder.getUnitAttr());
      continue;
    }
    FirstDiagnostic first(context);
    Attribute attr = parseLiteral(context, *knob, value);
    if (!attr) {
      error = where + "knob '" + knob->name + "': expected " +
              (knob->kind == moe::KnobKind::Float ? "a number" : "an integer") +
              ", got '" + value + "'";
      return nullptr;
    }
    state.addAttribute(knob->name, attr);
  }

  // The op verifier reports through diagnostics; keep the first as the
  // error, with the table line in front.
  FirstDiagnostic first(context);
  Operation *op = builder.create(state);
  if (failed(mlir::verify(op, /*verifyRecursively=*/false))) {
    error = where + first.text;
    op->erase();
    return nullptr;
  }
  description.symbol = moe::getKernelSymbol(op);
  op->setAttr("sym_name", builder.getStringAttr(description.symbol));
  auto stageKernel = dyn_cast<StageKernelInterface>(op);
  if (!stageKernel) {
    error = where + "'" + stageText +
            "' has no kernel ABI: the moe dialect was loaded without "
            "registerStageKernelInterfaceModels (registerMoecDialects)";
    op->erase();
    return nullptr;
  }
  description.abi = stageKernel.getKernelAbi();
  description.opAttributes = op->getAttrDictionary();
  description.attributes.clear();
  for (NamedAttribute attr : op->getAttrs()) {
    if (attr.getName() == "sym_name")
      continue;
    std::string text;
    llvm::raw_string_ostream os(text);
    attr.getValue().print(os);
    description.attributes.push_back({attr.getName().str(), text});
  }
  std::sort(description.attributes.begin(), description.attributes.end());
  return op;
}

} // namespace moec
