//===- ModelCheck.cpp - the cost model against published times ------------===//
///
/// \file
/// docs/cost-model.md, "Against published measurements", describes what
/// is compared, the split and the fit.
///
//===----------------------------------------------------------------------===//

#include "moec/Compiler/ModelCheck.h"

// The tuner's view of a table kernel (shapeOf, isGemm), so that a figure's
// kernel is modelled exactly as the tuner models it.
#include "TunerInternal.h"

#include "moec/Compiler/AiterCsv.h"
#include "moec/Compiler/CsvText.h"
#include "moec/Compiler/StageBuilder.h"
#include "moec/target/target_info.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <thread>

namespace moec {
namespace {

using csv::fieldsOf;
using csv::parseNumber;
using csv::readText;


/// Reads a CSV: the header's column positions, then `onRow(fields, line)`
/// per non-empty data line; a line with another field count is an error,
/// except that with `padShort` missing trailing fields are empty (AITER's
/// rows leave out an empty last `_tag`).
bool forEachCsvRow(
    const std::string &path, const std::string &text,
    const std::vector<std::string> &required, std::map<std::string, size_t> &column,
    const std::function<bool(const std::vector<std::string> &, int,
                             std::string &)> &onRow,
    std::string &error, bool padShort = false) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line)) {
    error = path + ":1: empty file, expected a header";
    return false;
  }
  const std::vector<std::string> header = fieldsOf(line);
  for (size_t i = 0; i < header.size(); ++i)
    column[header[i]] = i;
  for (const std::string &name : required)
    if (!column.count(name)) {
      error = path + ":1: missing column '" + name + "'";
      return false;
    }
  int lineNumber = 1;
  while (std::getline(in, line)) {
    ++lineNumber;
    if (line.empty() || line == "\r")
      continue;
    std::vector<std::string> fields = fieldsOf(line);
    if (padShort && fields.size() < header.size())
      fields.resize(header.size());
    if (fields.size() != header.size()) {
      error = path + ":" + std::to_string(lineNumber) + ": " +
              std::to_string(fields.size()) + " fields, the header has " +
              std::to_string(header.size());
      return false;
    }
    std::string why;
    if (!onRow(fields, lineNumber, why)) {
      error = path + ":" + std::to_string(lineNumber) + ": " + why;
      return false;
    }
  }
  return true;
}

bool parseInteger(const std::string &text, int64_t &value) {
  double number = 0;
  if (!parseNumber(text, number) || number != std::floor(number))
    return false;
  value = int64_t(number);
  return true;
}

std::string shapeText(int64_t h, int64_t i, int64_t e, int64_t k, int64_t ep) {
  return "H" + std::to_string(h) + " I" + std::to_string(i) + " E" +
         std::to_string(e) + " k" + std::to_string(k) + " ep" +
         std::to_string(ep);
}

/// Collects the kernels every entry launches, one ModelKernel per distinct
/// (stage, problem, knobs), and the batch table their GEMM kernels compile
/// from.
class KernelPool {
public:
  explicit KernelPool(ModelCheckData &data) : data(data) {}

  size_t add(const TuningTable &table, const std::string &kernelName,
             const std::string &scope) {
    const TableKernel *kernel = table.findKernel(kernelName);
    const TableProblem *problem = table.findProblem(kernel->problem);
    std::string identity = std::string(abi::stageName(kernel->stage)) + "|" +
                           shapeText(problem->hidden, problem->intermediate,
                                     problem->experts, problem->topK,
                                     problem->ep) +
                           "|" + problem->family;
    for (const auto &[name, value] : kernel->knobs)
      identity += "|" + name + "=" + value;
    auto [it, added] = byIdentity.emplace(identity, data.kernels.size());
    if (!added)
      return it->second;
    ModelKernel model;
    model.name = scope + kernel->name;
    model.gemm = tuner::isGemm(*kernel);
    if (model.gemm) {
      model.shape = tuner::shapeOf(table, *kernel);
      TableProblem batchProblem = *problem;
      batchProblem.name = "p" + std::to_string(batch.problems.size());
      batch.problems.push_back(batchProblem);
      TableKernel batchKernel = *kernel;
      batchKernel.name = "k" + std::to_string(data.kernels.size());
      batchKernel.problem = batchProblem.name;
      batch.kernels.push_back(batchKernel);
      batchIndex.push_back(data.kernels.size());
    }
    data.kernels.push_back(model);
    return data.kernels.size() - 1;
  }

  ModelCheckData &data;
  TuningTable batch;
  std::vector<size_t> batchIndex; ///< batch kernel -> data.kernels index
  std::map<std::string, size_t> byIdentity;
};

/// Whether the kernels `selection` runs are built for the figure's layer
/// (hidden, intermediate, experts, top-k).
bool selectionHasShape(const TuningTable &table, const TableSelection &selection,
                       const PublishedFigure &figure) {
  const TableConfig *config = table.findConfig(selection.rows.front().config);
  if (!config || config->kernels.empty())
    return false;
  const TableKernel *kernel = table.findKernel(config->kernels.front());
  const TableProblem *problem = kernel ? table.findProblem(kernel->problem) : nullptr;
  return problem && problem->hidden == figure.hidden &&
         problem->intermediate == figure.intermediate &&
         problem->experts == figure.experts && problem->topK == figure.topK;
}

/// The selection a published figure reads: network `N-fused` before N,
/// the figure's EP, the smallest workspace class >= its capacity and its
/// tokens per rank (a layer never runs above its workspace). A figure
/// of a network moec does not ship by that name (FlyDSL's `flydsl-v4-pro`)
/// reads a fused, then any, network of exactly its shape.
const TableSelection *selectionFor(const std::vector<TuningTable> &tables,
                                   const PublishedFigure &figure,
                                   const TuningTable *&owner) {
  auto smallestClass = [&](auto accepts) -> const TableSelection * {
    const TableSelection *best = nullptr;
    for (const TuningTable &table : tables)
      for (const TableSelection &selection : table.selections)
        if (selection.ep == figure.ep &&
            selection.workspace >= std::max(figure.capacity, figure.m) &&
            !selection.rows.empty() && accepts(table, selection) &&
            (!best || selection.workspace < best->workspace)) {
          best = &selection;
          owner = &table;
        }
    return best;
  };
  for (const std::string &network : {figure.network + "-fused", figure.network})
    if (const TableSelection *best = smallestClass(
            [&](const TuningTable &, const TableSelection &selection) {
              return selection.network == network;
            }))
      return best;
  for (bool fusedOnly : {true, false})
    if (const TableSelection *best = smallestClass(
            [&](const TuningTable &table, const TableSelection &selection) {
              const bool fused = selection.network.size() > 6 &&
                                 selection.network.compare(
                                     selection.network.size() - 6, 6,
                                     "-fused") == 0;
              return (fused || !fusedOnly) &&
                     selectionHasShape(table, selection, figure);
            }))
      return best;
  return nullptr;
}

/// The row lookup picks: the nearest m, ties to the larger.
const TableRow &rowFor(const TableSelection &selection, int64_t m) {
  const TableRow *best = &selection.rows.front();
  for (const TableRow &row : selection.rows) {
    const int64_t distance = std::llabs(row.m - m);
    const int64_t bestDistance = std::llabs(best->m - m);
    if (distance < bestDistance || (distance == bestDistance && row.m > best->m))
      best = &row;
  }
  return *best;
}

void addFigureEntries(const std::vector<PublishedFigure> &figures,
                      const std::vector<TuningTable> &tables, KernelPool &pool) {
  for (const PublishedFigure &figure : figures) {
    ModelCheckEntry entry;
    entry.figure = figure.id;
    entry.source = figure.source;
    entry.family = figure.family;
    entry.stage = figure.quantity;
    entry.shape = shapeText(figure.hidden, figure.intermediate, figure.experts,
                            figure.topK, figure.ep);
    entry.m = figure.m;
    entry.hidden = figure.hidden;
    entry.topK = figure.topK;
    entry.ep = figure.family == "megamoe" ? figure.ep : 1;
    entry.measuredUs = figure.measuredUs;
    entry.upperBound = figure.quantity == "moe-block";
    const TuningTable *table = nullptr;
    const TableSelection *selection = selectionFor(tables, figure, table);
    entry.network = selection ? selection->network : figure.network;
    if (!selection) {
      entry.skipped = "no table selects network " + figure.network + " at ep" +
                      std::to_string(figure.ep);
    } else {
      const TableRow &row = rowFor(*selection, figure.m);
      entry.config = row.config;
      for (const std::string &kernel : table->findConfig(row.config)->kernels) {
        entry.kernels.push_back(pool.add(*table, kernel, table->path + ":"));
        const TableKernel *stage = table->findKernel(kernel);
        auto payload = stage->knobs.find("payload");
        if (payload != stage->knobs.end() && payload->second == "fp8")
          entry.returnBytesPerHidden = 1 + 1.0 / 32;
      }
      entry.series.push_back("selection " + selection->network + " ep" +
                             std::to_string(selection->ep) + " ws" +
                             std::to_string(selection->workspace));
    }
    pool.data.entries.push_back(std::move(entry));
  }
}

/// One AITER stage entry per timed, compiled row and stage.
bool addAiterEntries(const std::string &path, KernelPool &pool,
                     std::string &error) {
  std::string text;
  if (!readText(path, text, error))
    return false;
  std::map<int, AiterStageTimes> times;
  if (!parseAiterStageTimes(path, text, times, error))
    return false;
  if (times.empty()) {
    pool.data.notes.push_back(path + ": no us1/us2 columns, nothing to compare");
    return true;
  }
  std::vector<AiterCsvRow> rows;
  AiterMergeReport merge;
  if (!readAiterCsvs({path}, rows, merge, error))
    return false;
  AiterCompileOptions options;
  options.skipUnsupported = true;
  TuningTable table;
  std::vector<rt::AiterRowInfo> infos;
  std::vector<std::string> unsupported;
  if (!buildAiterTable(rows, *pool.data.chip, options, table, infos,
                       unsupported, error))
    return false;
  table.path = path;
  if (!unsupported.empty())
    pool.data.notes.push_back(path + ": " + std::to_string(unsupported.size()) +
                              " row(s) moec cannot compile, not compared "
                              "(first: " + unsupported.front() + ")");
  // Per shape and stage, the distinct kernels the table's rows use.
  std::map<std::string, std::vector<size_t>> alternativesOf;
  std::vector<std::pair<size_t, std::array<size_t, 2>>> compiledRows;
  for (size_t r = 0; r < infos.size(); ++r) {
    const rt::AiterRowInfo &info = infos[r];
    if (!info.compiled() || !times.count(int(info.line)))
      continue;
    const TableConfig &config = table.configs[info.config];
    std::array<size_t, 2> stageKernels{};
    for (const std::string &name : config.kernels) {
      const abi::Stage stage = table.findKernel(name)->stage;
      if (abi::isGemmStage(stage)) {
        const size_t k = pool.add(table, name, path + ":");
        stageKernels[stage == abi::Stage::W13 ? 0 : 1] = k;
        const std::string key = shapeText(info.modelDim, info.interDim,
                                          info.expert, info.topk, 1) +
                                " " + abi::stageName(stage);
        std::vector<size_t> &alternatives = alternativesOf[key];
        if (std::find(alternatives.begin(), alternatives.end(), k) ==
            alternatives.end())
          alternatives.push_back(k);
      }
    }
    compiledRows.push_back({r, stageKernels});
  }
  for (const auto &[r, stageKernels] : compiledRows) {
    const rt::AiterRowInfo &info = infos[r];
    const AiterStageTimes &measured = times.at(int(info.line));
    for (int stage = 0; stage < 2; ++stage) {
      ModelCheckEntry entry;
      entry.figure = path.substr(path.find_last_of('/') + 1) + ":" +
                     std::to_string(info.line);
      entry.source = "aiter";
      entry.family = "aiter-fmoe";
      entry.stage = stage == 0 ? "stage1" : "stage2";
      entry.shape = shapeText(info.modelDim, info.interDim, info.expert,
                              info.topk, 1);
      entry.network = "aiter";
      entry.config = stage == 0 ? info.kernelName1 : info.kernelName2;
      entry.m = info.token;
      entry.measuredUs = stage == 0 ? measured.us1 : measured.us2;
      entry.kernels = {stageKernels[stage]};
      entry.series.push_back("kernel " + entry.figure.substr(0, entry.figure.find(':')) +
                             " " + entry.shape + " " + entry.config);
      entry.series.push_back("winners " + entry.figure.substr(0, entry.figure.find(':')) +
                             " " + entry.shape + " " + entry.stage);
      const std::vector<size_t> &alternatives =
          alternativesOf.at(entry.shape + " " +
                            abi::stageName(stage == 0 ? abi::Stage::W13
                                                      : abi::Stage::W2));
      if (alternatives.size() > 1)
        for (size_t k : alternatives)
          entry.alternatives.push_back({k});
      pool.data.entries.push_back(std::move(entry));
    }
  }
  return true;
}

/// Compiles the pool's GEMM kernels and counts their tiles.
CompileStatus compileAndCount(const ModelCheckOptions &options, KernelPool &pool,
                              std::string &error) {
  ModelCheckData &data = pool.data;
  std::vector<std::string> kernelError(data.kernels.size());
  if (!pool.batch.kernels.empty()) {
    CompiledTable compiled;
    const CompileStatus status =
        compileTable(pool.batch, options.compile, compiled, error);
    if (status == CompileStatus::BadInput ||
        compiled.kernelErrors.size() != compiled.kernels.size())
      return status == CompileStatus::Ok ? CompileStatus::CheckFailed : status;
    error.clear();
    for (size_t b = 0; b < pool.batch.kernels.size(); ++b) {
      const size_t index = compiled.kernelIndex.at(pool.batch.kernels[b].name);
      ModelKernel &kernel = data.kernels[pool.batchIndex[b]];
      kernel.resources = compiled.kernels[index].resources;
      kernel.workgroupSize = compiled.kernels[index].abi.workgroupSize;
      if (!compiled.kernelErrors[index].empty() &&
          kernel.workgroupSize == 0)
        kernelError[pool.batchIndex[b]] = compiled.kernelErrors[index];
    }
  }
  // Tiles: counted where a counter is given (in parallel, each result at
  // its kernel's index), the analytic counts otherwise.
  for (ModelKernel &kernel : data.kernels)
    if (kernel.gemm)
      kernel.counts = countTile(kernel.shape);
  if (options.countTile) {
    std::atomic<size_t> next{0};
    std::vector<bool> fellBack(pool.batch.kernels.size(), false);
    auto worker = [&] {
      for (size_t b = next++; b < pool.batch.kernels.size(); b = next++) {
        ModelKernel &kernel = data.kernels[pool.batchIndex[b]];
        if (!kernelError[pool.batchIndex[b]].empty())
          continue;
        TileCounts counts;
        std::string why;
        if (options.countTile(stageSpecOf(pool.batch, pool.batch.kernels[b]),
                              kernel.shape, counts, why))
          kernel.counts = counts;
        else
          fellBack[b] = true;
      }
    };
    unsigned threads = options.compile.jobs ? options.compile.jobs
                                            : std::thread::hardware_concurrency();
    threads = std::max(1u, std::min<unsigned>(threads, pool.batch.kernels.size()));
    std::vector<std::thread> workers;
    for (unsigned t = 1; t < threads; ++t)
      workers.emplace_back(worker);
    worker();
    for (std::thread &thread : workers)
      thread.join();
    data.countFallbacks = size_t(std::count(fellBack.begin(), fellBack.end(), true));
    data.countsSource = data.countFallbacks == 0 ? "emulator" : "mixed";
  } else {
    data.countsSource = "analytic";
  }
  for (ModelCheckEntry &entry : data.entries)
    for (size_t k : entry.kernels)
      if (entry.skipped.empty() && !kernelError[k].empty())
        entry.skipped = "kernel " + data.kernels[k].name + ": " + kernelError[k];
  return CompileStatus::Ok;
}

double absLogRatio(const ModelCheckEntry &entry) {
  return std::fabs(std::log(entry.predictedUs / entry.measuredUs));
}

bool comparable(const ModelCheckEntry &entry) {
  return entry.skipped.empty() && entry.measuredUs > 0 && entry.predictedUs > 0;
}

std::string formatNumber(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

std::vector<double> averageRanks(const std::vector<double> &values) {
  std::vector<size_t> order(values.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return values[a] < values[b]; });
  std::vector<double> ranks(values.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && values[order[j + 1]] == values[order[i]])
      ++j;
    for (size_t t = i; t <= j; ++t)
      ranks[order[t]] = (double(i) + double(j)) / 2 + 1;
    i = j + 1;
  }
  return ranks;
}

} // namespace

bool parsePublishedFigures(const std::string &path, const std::string &text,
                           std::vector<PublishedFigure> &figures,
                           std::string &error) {
  std::map<std::string, size_t> column;
  const std::vector<std::string> required = {
      "figure", "source", "family", "network", "hidden", "inter",
      "experts", "topk", "ep", "tp", "capacity", "path", "phase", "m",
      "quantity", "measured_us"};
  std::set<std::string> ids;
  return forEachCsvRow(
      path, text, required, column,
      [&](const std::vector<std::string> &f, int line, std::string &why) {
        PublishedFigure figure;
        figure.where = {path, line};
        figure.id = f[column["figure"]];
        figure.source = f[column["source"]];
        figure.family = f[column["family"]];
        figure.network = f[column["network"]];
        figure.path = f[column["path"]];
        figure.phase = f[column["phase"]];
        figure.quantity = f[column["quantity"]];
        if (figure.id.empty() || !ids.insert(figure.id).second) {
          why = "column 'figure': empty or repeated id '" + figure.id + "'";
          return false;
        }
        for (auto [name, field] :
             {std::pair<const char *, int64_t *>{"hidden", &figure.hidden},
              {"inter", &figure.intermediate},
              {"experts", &figure.experts},
              {"topk", &figure.topK},
              {"ep", &figure.ep},
              {"tp", &figure.tp},
              {"capacity", &figure.capacity},
              {"m", &figure.m}})
          if (!parseInteger(f[column[name]], *field) || *field < 0) {
            why = std::string("column '") + name + "': expected a count, got '" +
                  f[column[name]] + "'";
            return false;
          }
        if (!parseNumber(f[column["measured_us"]], figure.measuredUs) ||
            figure.measuredUs <= 0) {
          why = "column 'measured_us': expected a positive number, got '" +
                f[column["measured_us"]] + "'";
          return false;
        }
        figures.push_back(std::move(figure));
        return true;
      },
      error);
}

bool parseAiterStageTimes(const std::string &path, const std::string &text,
                          std::map<int, AiterStageTimes> &times,
                          std::string &error) {
  std::map<std::string, size_t> column;
  if (!forEachCsvRow(path, text, {}, column,
                     [](const std::vector<std::string> &, int, std::string &) {
                       return true;
                     },
                     error, /*padShort=*/true))
    return false;
  if (!column.count("us1") || !column.count("us2") || !column.count("us"))
    return true;
  return forEachCsvRow(
      path, text, {}, column,
      [&](const std::vector<std::string> &f, int line, std::string &why) {
        AiterStageTimes t;
        for (auto [name, field] : {std::pair<const char *, double *>{"us1", &t.us1},
                                   {"us2", &t.us2},
                                   {"us", &t.us}})
          if (!parseNumber(f[column[name]], *field) || *field < 0) {
            why = std::string("column '") + name +
                  "': expected a time in microseconds, got '" +
                  f[column[name]] + "'";
            return false;
          }
        times[line] = t;
        return true;
      },
      error, /*padShort=*/true);
}

bool isTrainingEntry(const ModelCheckEntry &entry) {
  if (entry.source == "aiter")
    return entry.shape.find(" E385 ") == std::string::npos;
  return entry.family == "megamoe" && entry.source == "aiter-pr6154" &&
         entry.shape.find(" ep4") != std::string::npos;
}

CompileStatus loadModelCheck(const ModelCheckOptions &options,
                             ModelCheckData &data, std::string &error) {
  data = ModelCheckData();
  if (!options.compile.target) {
    error = "model-check: no chip to compile and predict for";
    return CompileStatus::BadInput;
  }
  data.chip = &options.compile.target->chip;
  std::vector<PublishedFigure> figures;
  if (!options.figuresPath.empty()) {
    std::string text;
    if (!readText(options.figuresPath, text, error) ||
        !parsePublishedFigures(options.figuresPath, text, figures, error))
      return CompileStatus::BadInput;
  }
  std::vector<TuningTable> tables(options.tablePaths.size());
  for (size_t t = 0; t < tables.size(); ++t)
    if (!options.tablePaths[t].empty() &&
        !readTuningTable(options.tablePaths[t], tables[t], error))
      return CompileStatus::BadInput;
  KernelPool pool(data);
  addFigureEntries(figures, tables, pool);
  for (const std::string &path : options.aiterPaths)
    if (!path.empty() && !addAiterEntries(path, pool, error))
      return CompileStatus::BadInput;
  for (ModelCheckEntry &entry : data.entries)
    entry.part = isTrainingEntry(entry) ? "train" : "validation";
  return compileAndCount(options, pool, error);
}

double predictKernels(const std::vector<ModelKernel> &kernels,
                      const std::vector<size_t> &launched, int64_t m,
                      const CostModelParameters &parameters,
                      const target::TargetInfo &chip) {
  double us = 0;
  for (size_t k : launched) {
    const ModelKernel &kernel = kernels[k];
    us += kernel.gemm
              ? predictStage(kernel.shape, kernel.resources, kernel.workgroupSize,
                             m, parameters, chip, &kernel.counts)
                    .totalUs
              : parameters.otherKernelUs;
  }
  return us;
}

double predictEntry(const ModelCheckData &data, const ModelCheckEntry &entry,
                    const CostModelParameters &parameters) {
  return predictKernels(data.kernels, entry.kernels, entry.m, parameters,
                        *data.chip) +
         predictPeerExchange(entry.hidden, entry.topK, entry.ep, entry.m,
                             entry.returnBytesPerHidden,
                             parameters);
}

void predictEntries(ModelCheckData &data, const CostModelParameters &parameters) {
  data.parameters = parameters;
  for (ModelCheckEntry &entry : data.entries)
    entry.predictedUs =
        entry.skipped.empty() ? predictEntry(data, entry, parameters) : 0;
}

double median(std::vector<double> values) {
  if (values.empty())
    return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double percentile90(std::vector<double> values) {
  if (values.empty())
    return 0;
  std::sort(values.begin(), values.end());
  const size_t rank = size_t(std::ceil(0.9 * double(values.size())));
  return values[std::max<size_t>(rank, 1) - 1];
}

double spearman(const std::vector<double> &x, const std::vector<double> &y) {
  if (x.size() < 2 || x.size() != y.size())
    return 0;
  const std::vector<double> rx = averageRanks(x), ry = averageRanks(y);
  const double n = double(x.size());
  const double mean = (n + 1) / 2;
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxy += (rx[i] - mean) * (ry[i] - mean);
    sxx += (rx[i] - mean) * (rx[i] - mean);
    syy += (ry[i] - mean) * (ry[i] - mean);
  }
  return sxx > 0 && syy > 0 ? sxy / std::sqrt(sxx * syy) : 0;
}

ModelCheckSummary summarize(const ModelCheckData &data) {
  ModelCheckSummary summary;
  std::map<std::string, std::vector<const ModelCheckEntry *>> groups;
  std::map<std::string, std::vector<const ModelCheckEntry *>> series;
  for (const ModelCheckEntry &entry : data.entries) {
    if (!comparable(entry))
      continue;
    if (entry.upperBound) {
      ++summary.upperBounds;
      summary.upperBoundsBelow += entry.predictedUs <= entry.measuredUs;
      continue;
    }
    for (const std::string &part : {entry.part, std::string("all")}) {
      groups[part + " " + entry.family + " " + entry.stage].push_back(&entry);
      groups[part + " *"].push_back(&entry);
    }
    for (const std::string &name : entry.series)
      series[name].push_back(&entry);
    if (!entry.alternatives.empty()) {
      ++summary.winnerKeys;
      double best = entry.predictedUs;
      for (const std::vector<size_t> &alternative : entry.alternatives)
        best = std::min(best, predictKernels(data.kernels, alternative, entry.m,
                                             data.parameters, *data.chip));
      summary.winnerPicked += entry.predictedUs <= best;
    }
  }
  for (const auto &[name, entries] : groups) {
    ErrorSummary error;
    error.group = name;
    error.count = entries.size();
    std::vector<double> logs, ratios;
    for (const ModelCheckEntry *entry : entries) {
      logs.push_back(absLogRatio(*entry));
      ratios.push_back(entry->predictedUs / entry->measuredUs);
    }
    error.medianAbsLog = median(logs);
    error.p90AbsLog = percentile90(logs);
    error.medianRatio = median(ratios);
    summary.errors.push_back(error);
  }
  for (const auto &[name, entries] : series) {
    std::set<int64_t> ms;
    std::vector<double> x, y;
    for (const ModelCheckEntry *entry : entries) {
      ms.insert(entry->m);
      x.push_back(entry->predictedUs);
      y.push_back(entry->measuredUs);
    }
    if (ms.size() < 3)
      continue;
    SeriesCorrelation correlation;
    correlation.series = name;
    correlation.part = entries.front()->part;
    correlation.points = entries.size();
    correlation.spearman = spearman(x, y);
    summary.correlations.push_back(correlation);
  }
  return summary;
}

CostModelParameters fitCostModel(const ModelCheckData &data,
                                 const CostModelParameters &start) {
  std::vector<const ModelCheckEntry *> training;
  for (const ModelCheckEntry &entry : data.entries)
    if (entry.part == "train" && !entry.upperBound && entry.skipped.empty() &&
        entry.measuredUs > 0)
      training.push_back(&entry);
  auto objective = [&](const CostModelParameters &p) {
    double sum = 0;
    for (const ModelCheckEntry *entry : training) {
      const double us = predictEntry(data, *entry, p);
      sum += std::fabs(std::log(std::max(us, 1e-3) / entry->measuredUs));
    }
    return training.empty() ? 0 : sum / double(training.size());
  };
  // Each fitted constant with its plausible range.
  struct Knob {
    double CostModelParameters::*field;
    double low, high;
  };
  const Knob knobs[] = {
      {&CostModelParameters::launchOverheadUs, 0.5, 30},
      {&CostModelParameters::hbmEfficiency, 0.2, 1},
      {&CostModelParameters::cuBytesPerSecond, 5e9, 500e9},
      {&CostModelParameters::tileRoundUs, 0.05, 50},
      {&CostModelParameters::otherIssuePerSimdCycle, 0.05, 4},
      {&CostModelParameters::ldsThroughputScale, 0.5, 4},
      {&CostModelParameters::peerBytesPerSecond, 5e9, 2000e9},
      {&CostModelParameters::exchangeFixedUs, 1, 500},
  };
  const double factors[] = {0.5, 0.7, 0.85, 0.95, 1.05, 1.2, 1.4, 2};
  CostModelParameters best = start;
  if (best.cuBytesPerSecond <= 0)
    best.cuBytesPerSecond = 50e9;
  if (best.tileRoundUs <= 0)
    best.tileRoundUs = 1;
  if (best.peerBytesPerSecond <= 0)
    best.peerBytesPerSecond = 100e9;
  if (best.exchangeFixedUs <= 0)
    best.exchangeFixedUs = 20;
  double bestObjective = objective(best);
  for (bool routing : {false, true}) {
    CostModelParameters p = best;
    p.randomRouting = routing;
    double value = objective(p);
    for (int sweep = 0; sweep < 60; ++sweep) {
      bool improved = false;
      for (const Knob &knob : knobs)
        for (double factor : factors) {
          CostModelParameters q = p;
          q.*knob.field =
              std::min(knob.high, std::max(knob.low, p.*knob.field * factor));
          const double candidate = objective(q);
          if (candidate < value - 1e-9) {
            value = candidate;
            p = q;
            improved = true;
          }
        }
      if (!improved)
        break;
    }
    if (value < bestObjective - 1e-9) {
      bestObjective = value;
      best = p;
    }
  }
  return best;
}

std::string modelCheckText(const ModelCheckData &data,
                           const ModelCheckSummary &summary,
                           const std::string &modelName) {
  std::ostringstream out;
  out << "model " << modelName << ", per-tile counts: " << data.countsSource;
  if (data.countFallbacks)
    out << " (" << data.countFallbacks << " kernel(s) analytic)";
  out << "\n";
  for (const std::string &note : data.notes)
    out << "note: " << note << "\n";
  size_t predicted = 0, skipped = 0;
  for (const ModelCheckEntry &entry : data.entries) {
    if (!entry.skipped.empty()) {
      ++skipped;
      out << "skip " << entry.figure << ": " << entry.skipped << "\n";
      continue;
    }
    ++predicted;
    char line[512];
    std::snprintf(line, sizeof line,
                  "%-10s %-30s %-9s M %-6lld pred %9.1f us  meas %9.1f us  "
                  "ratio %5.2f%s  %s\n",
                  entry.part.c_str(), entry.figure.c_str(), entry.stage.c_str(),
                  (long long)entry.m, entry.predictedUs, entry.measuredUs,
                  entry.predictedUs / entry.measuredUs,
                  entry.upperBound ? " (bound)" : "", entry.config.c_str());
    out << line;
  }
  out << "\n" << predicted << " compared, " << skipped << " not predicted\n";
  out << "|log(pred/meas)| (median, p90; median pred/meas):\n";
  for (const ErrorSummary &error : summary.errors)
    out << "  " << error.group << ": n " << error.count << ", median "
        << formatNumber(error.medianAbsLog, 3) << ", p90 "
        << formatNumber(error.p90AbsLog, 3) << ", ratio "
        << formatNumber(error.medianRatio, 2) << "\n";
  std::map<std::string, std::vector<double>> rhoByKind;
  out << "rank correlation along M (Spearman):\n";
  for (const SeriesCorrelation &c : summary.correlations) {
    out << "  " << c.part << " " << c.series << ": " << c.points << " points, "
        << formatNumber(c.spearman, 2) << "\n";
    rhoByKind[c.part + " " + c.series.substr(0, c.series.find(' '))].push_back(
        c.spearman);
  }
  for (const auto &[kind, rhos] : rhoByKind)
    out << "  median over " << kind << " series (" << rhos.size()
        << "): " << formatNumber(median(rhos), 2) << "\n";
  out << "published winner picked: " << summary.winnerPicked << " of "
      << summary.winnerKeys << " AITER stage keys with alternatives\n";
  out << "upper bounds (moe-block): " << summary.upperBoundsBelow << " of "
      << summary.upperBounds << " predictions at or below the bound\n";
  return out.str();
}

std::string modelCheckCsv(const ModelCheckData &data) {
  std::ostringstream out;
  out << "figure,source,family,stage,shape,network,m,config,part,measured_us,"
         "predicted_us,ratio,upper_bound,hbm_us,lds_us,mfma_us,issue_us,"
         "cu_memory_us,tile_rounds_us,skipped\n";
  for (const ModelCheckEntry &entry : data.entries) {
    // The terms of the GEMM stages' predictions, summed over the stages.
    StagePrediction terms;
    for (size_t k : entry.kernels) {
      const ModelKernel &kernel = data.kernels[k];
      if (!kernel.gemm || !entry.skipped.empty())
        continue;
      const StagePrediction stage = predictStage(
          kernel.shape, kernel.resources, kernel.workgroupSize, entry.m,
          data.parameters, *data.chip, &kernel.counts);
      terms.hbmUs += stage.hbmUs;
      terms.ldsUs += stage.ldsUs;
      terms.mfmaUs += stage.mfmaUs;
      terms.issueUs += stage.issueUs;
      terms.cuMemoryUs += stage.cuMemoryUs;
      terms.tileRoundsUs += stage.tileRoundsUs;
    }
    std::string skipped = entry.skipped;
    std::replace(skipped.begin(), skipped.end(), ',', ';');
    out << entry.figure << "," << entry.source << "," << entry.family << ","
        << entry.stage << "," << entry.shape << "," << entry.network << ","
        << entry.m << "," << entry.config << "," << entry.part << ","
        << formatNumber(entry.measuredUs, 2) << ","
        << (entry.skipped.empty() ? formatNumber(entry.predictedUs, 2) : "")
        << ","
        << (entry.skipped.empty()
                ? formatNumber(entry.predictedUs / entry.measuredUs, 3)
                : "")
        << "," << (entry.upperBound ? 1 : 0);
    for (double term : {terms.hbmUs, terms.ldsUs, terms.mfmaUs, terms.issueUs,
                        terms.cuMemoryUs, terms.tileRoundsUs})
      out << "," << formatNumber(term, 2);
    out << "," << skipped << "\n";
  }
  return out.str();
}

std::string modelCheckJson(const ModelCheckSummary &summary,
                           const std::string &modelName) {
  std::ostringstream out;
  out << "{\"model\":\"" << modelName << "\",\"errors\":[";
  for (size_t i = 0; i < summary.errors.size(); ++i) {
    const ErrorSummary &e = summary.errors[i];
    out << (i ? "," : "") << "{\"group\":\"" << e.group << "\",\"count\":"
        << e.count << ",\"median_abs_log\":" << formatNumber(e.medianAbsLog, 4)
        << ",\"p90_abs_log\":" << formatNumber(e.p90AbsLog, 4)
        << ",\"median_ratio\":" << formatNumber(e.medianRatio, 4) << "}";
  }
  out << "],\"correlations\":[";
  for (size_t i = 0; i < summary.correlations.size(); ++i) {
    const SeriesCorrelation &c = summary.correlations[i];
    out << (i ? "," : "") << "{\"series\":\"" << c.series << "\",\"part\":\""
        << c.part << "\",\"points\":" << c.points
        << ",\"spearman\":" << formatNumber(c.spearman, 4) << "}";
  }
  out << "],\"winner_keys\":" << summary.winnerKeys
      << ",\"winner_picked\":" << summary.winnerPicked
      << ",\"upper_bounds\":" << summary.upperBounds
      << ",\"upper_bounds_below\":" << summary.upperBoundsBelow << "}\n";
  return out.str();
}

} // namespace moec
