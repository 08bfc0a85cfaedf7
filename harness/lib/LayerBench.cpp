//===- LayerBench.cpp - `moec bench`: a bundle's layer times --------------===//

#include "moec/Harness/LayerBench.h"

#include "moec/Compiler/ModelCheck.h"
#include "moec/Compiler/TableCompiler.h"
#include "moec/bundle.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

namespace moec::harness {

namespace {

/// The name the timing test double gives its devices
/// (test/unit/device/timing_double_hip.cpp).
constexpr const char *kTestDoubleName = "moec-timing-test-double";

bool readFile(const std::string &path, std::string &text, std::string &error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = path + ": cannot read";
    return false;
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  text = buffer.str();
  return true;
}

/// Writes `text` to `path` through a temporary file beside it and a rename,
/// so a reader never sees half a file.
bool writeAtomically(const std::string &path, const std::string &text,
                     std::string &error) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!(out << text) || !out.flush()) {
      error = temporary + ": cannot write";
      return false;
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    error = path + ": cannot rename " + temporary + " to it";
    std::remove(temporary.c_str());
    return false;
  }
  return true;
}

std::string number(double value, const char *format = "%.1f") {
  if (value < 0)
    return "";
  char text[32];
  std::snprintf(text, sizeof(text), format, value);
  return text;
}

std::string ratio(double measured, double published) {
  return measured >= 0 && published > 0 ? number(measured / published, "%.3f")
                                        : "";
}

std::string ratio(const BenchRow &row) {
  return ratio(row.layerUs, row.publishedUs);
}

} // namespace

const std::vector<std::string> &benchStages() {
  static const std::vector<std::string> stages = {
      rt::stageName(rt::Stage::Quant), rt::stageName(rt::Stage::Sort),
      rt::stageName(rt::Stage::W13), rt::stageName(rt::Stage::W2),
      rt::stageName(rt::Stage::Combine)};
  return stages;
}

double BenchRow::stageUs(const std::string &stage) const {
  double us = -1.0;
  for (const StageTime &time : stages)
    if (time.stage == stage && time.us >= 0)
      us = (us < 0 ? 0.0 : us) + time.us;
  return us;
}

namespace {

/// AITER's times of one bundle key: the row compiled at it.
struct AiterFigure {
  AiterStageTimes times;
  std::string id; ///< "FILE.csv:LINE"
};

/// The text of the AITER CSV `source` names, from the first candidate
/// whose file name and content hash match; empty when none does.
std::string findAiterCsv(const rt::SourceFile &source,
                         const std::vector<std::string> &candidates,
                         std::string &text) {
  for (const std::string &path : candidates) {
    const size_t slash = path.find_last_of('/');
    const std::string name =
        slash == std::string::npos ? path : path.substr(slash + 1);
    std::string content, ignored;
    if (name != source.path || !readFile(path, content, ignored) ||
        hashHex(content.data(), content.size()) != source.hash)
      continue;
    text = std::move(content);
    return path;
  }
  return "";
}

/// The AITER figures of every key of a bundle compiled from AITER CSVs:
/// each compiled row's us1/us2/us at (its selection table, its token).
/// Notes say which CSV could not be found.
bool aiterFigures(const std::string &bundlePath, const BenchOptions &options,
                  std::map<BenchKey, AiterFigure> &figures,
                  std::vector<std::string> &notes, std::string &error) {
  std::unique_ptr<rt::Bundle> bundle = rt::Bundle::open(bundlePath, error);
  if (!bundle)
    return false;
  const rt::Manifest &manifest = bundle->manifest();
  if (manifest.aiterRows.empty())
    return true;
  auto folderOf = [](const std::string &path) {
    const size_t slash = path.find_last_of('/');
    return slash == std::string::npos ? std::string(".")
                                      : path.substr(0, slash);
  };
  std::vector<std::map<int, AiterStageTimes>> times(manifest.sources.size());
  std::vector<std::string> found(manifest.sources.size());
  for (size_t i = 0; i < manifest.sources.size(); ++i) {
    const rt::SourceFile &source = manifest.sources[i];
    std::vector<std::string> candidates = options.aiterCsvs;
    if (!options.publishedFigures.empty())
      candidates.push_back(folderOf(options.publishedFigures) + "/../aiter/" +
                           source.path);
    candidates.push_back(folderOf(bundlePath) + "/" + source.path);
    std::string text, why;
    found[i] = findAiterCsv(source, candidates, text);
    if (found[i].empty()) {
      notes.push_back("no AITER figures: " + source.path + " with hash " +
                      source.hash.substr(0, 12) +
                      " not found (--aiter-csv FILE)");
      continue;
    }
    if (!parseAiterStageTimes(found[i], text, times[i], why))
      notes.push_back("no AITER figures: " + why);
  }
  // Each compiled row at the key whose table row selects its configuration
  // at its token; the first row wins, as in AITER's lookup.
  for (const rt::AiterRowInfo &row : manifest.aiterRows) {
    if (!row.compiled() || row.source >= times.size())
      continue;
    auto timed = times[row.source].find(int(row.line));
    if (timed == times[row.source].end())
      continue;
    for (const rt::SelectionTable &table : manifest.selection)
      for (const rt::SelectionRow &selected : table.rows)
        if (selected.m == row.token && selected.config == row.config)
          figures.emplace(
              BenchKey{table.network, table.ep, table.workspace, selected.m},
              AiterFigure{timed->second, manifest.sources[row.source].path +
                                             ":" + std::to_string(row.line)});
  }
  return true;
}

} // namespace

namespace {

/// One timed configuration per selection table of the bundle that passes
/// the filters: the table's own rows select the configuration of each M,
/// as in an engine's forward. `keys` parallels `configs`.
bool collectKeys(const std::string &bundlePath, const BenchOptions &options,
                 std::vector<TimedConfig> &configs,
                 std::vector<std::vector<BenchKey>> &keys, std::string &error) {
  std::unique_ptr<rt::Bundle> bundle = rt::Bundle::open(bundlePath, error);
  if (!bundle)
    return false;
  const auto &tables = bundle->selector().tables();
  for (uint32_t t = 0; t < tables.size(); ++t) {
    const rt::SelectionTable &table = tables[t];
    if ((!options.network.empty() && table.network != options.network) ||
        (options.ep && table.ep != options.ep) ||
        (options.workspace && table.workspace != options.workspace))
      continue;
    TimedConfig config;
    config.network = table.network;
    config.ep = table.ep;
    config.workspace = table.workspace;
    std::vector<BenchKey> tableKeys;
    for (const rt::RowRange &row : bundle->selector().rowRanges({t})) {
      BenchKey key{table.network, table.ep, table.workspace, row.m};
      if ((options.m && row.m != options.m) || options.done.count(key))
        continue;
      config.keys.push_back(row.m);
      config.maxTokens = std::max(config.maxTokens, row.m);
      tableKeys.push_back(key);
    }
    if (config.keys.empty())
      continue;
    configs.push_back(std::move(config));
    keys.push_back(std::move(tableKeys));
  }
  return true;
}

/// The device timer with the protocol of `options`.
DeviceTimerOptions timerOptions(const BenchOptions &options) {
  DeviceTimerOptions timer;
  timer.libraries = options.libraries;
  // One ordinal N: a fused table's rank r on N + r (the timer's default
  // when it has no list), as `moec bench --device N` documents; a list
  // names each rank's device.
  if (options.devices.size() > 1)
    timer.devices = options.devices;
  timer.passes = options.passes;
  timer.samplesPerPass = options.samplesPerPass;
  timer.warmups = options.warmups;
  timer.flushBytes = options.flushBytes;
  timer.seed = options.seed;
  timer.progress = options.progress;
  return timer;
}

bool isTestDouble(const std::string &device) {
  return device.rfind(kTestDoubleName, 0) == 0;
}

} // namespace

bool runBench(const std::string &bundlePath, const BenchOptions &options,
              BenchResult &result, std::string &error) {
  result = BenchResult();
  // Published layer figures by key.
  std::map<BenchKey, const PublishedFigure *> published;
  std::vector<PublishedFigure> figures;
  if (!options.publishedFigures.empty()) {
    std::string text;
    if (!readFile(options.publishedFigures, text, error) ||
        !parsePublishedFigures(options.publishedFigures, text, figures, error))
      return false;
    for (const PublishedFigure &figure : figures)
      if (figure.quantity == "layer" && figure.capacity > 0)
        published[{figure.network, uint32_t(figure.ep),
                   uint32_t(figure.capacity), uint32_t(figure.m)}] = &figure;
  }

  std::vector<TimedConfig> configs;
  std::vector<std::vector<BenchKey>> keys;
  if (!collectKeys(bundlePath, options, configs, keys, error))
    return false;
  std::map<BenchKey, AiterFigure> aiter;
  if (!aiterFigures(bundlePath, options, aiter, result.notes, error))
    return false;

  DeviceTimerOptions timer = timerOptions(options);
  StageTimings stageTimes;
  if (options.stages)
    timer.stageTimes = &stageTimes;
  timer.shuffleReversedPasses = true;
  timer.meanOfPassMedians = true;
  timer.stop = [&]() {
    if (options.stop && options.stop())
      result.interrupted = true;
    return result.interrupted;
  };
  // One table at a time, both passes: an interrupt loses only the keys of
  // the table under way that the second pass had not reached.
  const int first = options.devices.empty() ? 0 : options.devices.front();
  for (size_t c = 0; c < configs.size() && !result.interrupted; ++c) {
    DeviceTimings timings;
    if (!makeDeviceTimer(first, timer)(bundlePath, {configs[c]}, timings,
                                       error))
      return false;
    result.device = timings.device;
    result.date = timings.date;
    result.method = timings.method;
    result.skipped.insert(result.skipped.end(), timings.skipped.begin(),
                          timings.skipped.end());
    for (size_t k = 0; k < keys[c].size(); ++k) {
      if (timings.us[0][k] < 0)
        continue;
      BenchRow row;
      row.key = keys[c][k];
      row.layerUs = timings.us[0][k];
      if (auto it = published.find(row.key); it != published.end()) {
        row.publishedUs = it->second->measuredUs;
        row.figure = it->second->id;
      } else if (auto at = aiter.find(row.key); at != aiter.end()) {
        row.publishedUs = at->second.times.us;
        row.publishedW13Us = at->second.times.us1;
        row.publishedW2Us = at->second.times.us2;
        row.figure = at->second.id;
      }
      if (!stageTimes.empty())
        row.stages = stageTimes[0][k];
      result.rows.push_back(std::move(row));
    }
  }
  result.synthetic = isTestDouble(result.device);
  return true;
}

namespace {

/// The stages AITER's us1 and us2 time.
const std::string kW13 = rt::stageName(rt::Stage::W13);
const std::string kW2 = rt::stageName(rt::Stage::W2);

bool hasStages(const BenchResult &result) {
  for (const BenchRow &row : result.rows)
    if (!row.stages.empty())
      return true;
  return false;
}

bool hasStageFigures(const BenchResult &result) {
  for (const BenchRow &row : result.rows)
    if (row.publishedW13Us > 0 || row.publishedW2Us > 0)
      return true;
  return false;
}

std::string orDash(const std::string &text) { return text.empty() ? "-" : text; }

} // namespace

std::string formatBenchText(const BenchResult &result) {
  std::ostringstream out;
  out << "device " << result.device << ", " << result.method << ", "
      << result.date << "\n";
  if (result.synthetic)
    out << "SYNTHETIC: the HIP library is moec's timing test double; these "
           "times come from its clock, not from a GPU\n";
  const bool stages = hasStages(result), stageFigures = hasStageFigures(result);
  char cell[64];
  auto column = [&](const char *format, const std::string &text) {
    std::snprintf(cell, sizeof(cell), format, text.c_str());
    out << cell;
  };
  auto header = [&]() {
    std::snprintf(cell, sizeof(cell), "%-16s %3s %6s %6s %10s", "network",
                  "ep", "ws", "m", "layer_us");
    out << cell;
    if (stages)
      for (const std::string &stage : benchStages())
        column(" %10s", stage + "_us");
    column(" %12s", "published_us");
    column(" %7s", "ratio");
    if (stageFigures) {
      column(" %8s", "us1");
      column(" %7s", "w13/us1");
      column(" %8s", "us2");
      column(" %7s", "w2/us2");
    }
    out << "  figure\n";
  };
  header();
  for (const BenchRow &row : result.rows) {
    std::snprintf(cell, sizeof(cell), "%-16s %3u %6u %6u %10s",
                  row.key.network.c_str(), row.key.ep, row.key.workspace,
                  row.key.m, number(row.layerUs).c_str());
    out << cell;
    if (stages)
      for (const std::string &stage : benchStages())
        column(" %10s", orDash(number(row.stageUs(stage))));
    column(" %12s", orDash(number(row.publishedUs)));
    column(" %7s", orDash(ratio(row)));
    if (stageFigures) {
      column(" %8s", orDash(number(row.publishedW13Us)));
      column(" %7s", orDash(ratio(row.stageUs(kW13), row.publishedW13Us)));
      column(" %8s", orDash(number(row.publishedW2Us)));
      column(" %7s", orDash(ratio(row.stageUs(kW2), row.publishedW2Us)));
    }
    out << "  " << row.figure << "\n";
  }
  if (stages)
    out << "stages: each one's launches alone in a graph, timed as the "
           "layer; fused tables' stages wait on the other ranks and are "
           "not timed apart\n";
  for (const std::string &note : result.notes)
    out << "note: " << note << "\n";
  for (const std::string &skip : result.skipped)
    out << "skipped: " << skip << "\n";
  if (result.interrupted)
    out << "interrupted: the keys above are complete; --resume continues\n";
  return out.str();
}

bool writeBenchCsv(const BenchResult &result, const std::string &path,
                   std::string &error) {
  std::ostringstream out;
  out << "network,ep,workspace,m,layer_us,published_us,ratio,figure,device,"
         "method,synthetic";
  for (const std::string &stage : benchStages())
    out << ',' << stage << "_us";
  out << ",published_us1,ratio_w13,published_us2,ratio_w2\n";
  for (const BenchRow &row : result.rows) {
    out << row.key.network << ',' << row.key.ep << ',' << row.key.workspace
        << ',' << row.key.m << ',' << number(row.layerUs, "%.3f") << ','
        << (row.publishedUs > 0 ? number(row.publishedUs, "%.3f") : "") << ','
        << ratio(row) << ',' << row.figure << ',' << result.device << ','
        << result.method << ',' << (result.synthetic ? 1 : 0);
    for (const std::string &stage : benchStages())
      out << ',' << number(row.stageUs(stage), "%.3f");
    out << ',' << number(row.publishedW13Us, "%.3f") << ','
        << ratio(row.stageUs(kW13), row.publishedW13Us) << ','
        << number(row.publishedW2Us, "%.3f") << ','
        << ratio(row.stageUs(kW2), row.publishedW2Us) << '\n';
  }
  return writeAtomically(path, out.str(), error);
}

bool writeBenchJson(const BenchResult &result, const std::string &path,
                    std::string &error) {
  auto json = [](const std::string &text) { return text.empty() ? "null" : text; };
  // One row object per line, so --resume reads it back line by line.
  std::ostringstream out;
  out << "{\"device\": \"" << result.device << "\", \"method\": \""
      << result.method << "\", \"date\": \"" << result.date
      << "\", \"synthetic\": " << (result.synthetic ? "true" : "false")
      << ", \"interrupted\": " << (result.interrupted ? "true" : "false")
      << ",\n \"rows\": [\n";
  for (size_t i = 0; i < result.rows.size(); ++i) {
    const BenchRow &row = result.rows[i];
    out << "  {\"network\": \"" << row.key.network << "\", \"ep\": "
        << row.key.ep << ", \"workspace\": " << row.key.workspace
        << ", \"m\": " << row.key.m
        << ", \"layer_us\": " << number(row.layerUs, "%.3f")
        << ", \"published_us\": "
        << (row.publishedUs > 0 ? number(row.publishedUs, "%.3f") : "null")
        << ", \"ratio\": " << json(ratio(row))
        << ", \"figure\": \"" << row.figure << "\"";
    for (const std::string &stage : benchStages())
      out << ", \"" << stage << "_us\": " << json(number(row.stageUs(stage), "%.3f"));
    out << ", \"published_us1\": " << json(number(row.publishedW13Us, "%.3f"))
        << ", \"ratio_w13\": "
        << json(ratio(row.stageUs(kW13), row.publishedW13Us))
        << ", \"published_us2\": " << json(number(row.publishedW2Us, "%.3f"))
        << ", \"ratio_w2\": " << json(ratio(row.stageUs(kW2), row.publishedW2Us))
        << "}" << (i + 1 < result.rows.size() ? "," : "") << "\n";
  }
  out << " ]}\n";
  return writeAtomically(path, out.str(), error);
}

namespace {

/// The field `name` of a JSON row line, as text ("" when absent or null).
std::string jsonField(const std::string &line, const std::string &name) {
  const std::string key = "\"" + name + "\": ";
  const size_t at = line.find(key);
  if (at == std::string::npos)
    return "";
  size_t begin = at + key.size(), end;
  if (line[begin] == '"') {
    end = line.find('"', ++begin);
  } else {
    end = line.find_first_of(",}", begin);
  }
  std::string value = line.substr(begin, end == std::string::npos
                                             ? std::string::npos
                                             : end - begin);
  return value == "null" ? "" : value;
}

double timeOf(const std::string &text) {
  return text.empty() ? -1.0 : std::strtod(text.c_str(), nullptr);
}

} // namespace

bool readBenchRows(const std::string &path, std::vector<BenchRow> &rows,
                   std::string &error) {
  std::string text;
  if (!readFile(path, text, error))
    return false;
  const bool json = path.size() >= 5 && path.substr(path.size() - 5) == ".json";
  std::istringstream in(text);
  std::string line;
  unsigned number = 0;
  std::vector<std::string> header;
  while (std::getline(in, line)) {
    ++number;
    BenchRow row;
    char network[128] = {};
    // The fields by name: the JSON row's keys, or the CSV's header.
    std::function<std::string(const std::string &)> field;
    std::vector<std::string> fields;
    if (json) {
      if (line.find("\"network\"") == std::string::npos ||
          line.find("\"rows\"") != std::string::npos)
        continue;
      if (std::sscanf(line.c_str(),
                      " {\"network\": \"%127[^\"]\", \"ep\": %u, "
                      "\"workspace\": %u, \"m\": %u, \"layer_us\": %lf",
                      network, &row.key.ep, &row.key.workspace, &row.key.m,
                      &row.layerUs) != 5) {
        error = path + ":" + std::to_string(number) + ": not a bench row";
        return false;
      }
      field = [&line](const std::string &name) { return jsonField(line, name); };
    } else {
      std::istringstream cells(line);
      for (std::string cell; std::getline(cells, cell, ',');)
        fields.push_back(cell);
      if (number == 1) {
        header = fields;
        continue;
      }
      if (std::sscanf(line.c_str(), "%127[^,],%u,%u,%u,%lf,", network,
                      &row.key.ep, &row.key.workspace, &row.key.m,
                      &row.layerUs) != 5) {
        error = path + ":" + std::to_string(number) + ": not a bench row";
        return false;
      }
      field = [&](const std::string &name) {
        for (size_t c = 0; c < header.size() && c < fields.size(); ++c)
          if (header[c] == name)
            return fields[c];
        return std::string();
      };
    }
    row.key.network = network;
    row.publishedUs = timeOf(field("published_us"));
    row.figure = field("figure");
    for (const std::string &stage : benchStages())
      if (double us = timeOf(field(stage + "_us")); us >= 0)
        row.stages.push_back({stage, 0, us});
    row.publishedW13Us = timeOf(field("published_us1"));
    row.publishedW2Us = timeOf(field("published_us2"));
    rows.push_back(std::move(row));
  }
  return true;
}

} // namespace moec::harness

namespace moec::harness {

namespace {

/// One bundle's time of every key (in `keys` order) for one pair.
bool timePair(const std::string &bundlePath, const BenchOptions &options,
              const std::vector<TimedConfig> &configs, std::string &device,
              std::string &method, std::vector<double> &us,
              std::string &error) {
  DeviceTimerOptions timer = timerOptions(options);
  timer.passes = 1;
  timer.samplesPerPass = 1;
  timer.replaysPerSample = 16;
  timer.progress = nullptr;
  DeviceTimings timings;
  if (!makeDeviceTimer(options.devices.empty() ? 0 : options.devices.front(),
                       timer)(bundlePath, configs, timings, error))
    return false;
  device = timings.device;
  method = timings.method;
  us.clear();
  for (const std::vector<double> &perKey : timings.us)
    us.insert(us.end(), perKey.begin(), perKey.end());
  return true;
}

/// 31 alternating pairs of `first` and `second` on `configs`' keys.
bool comparePairs(const std::string &first, const std::string &second,
                  const BenchOptions &options,
                  const std::vector<TimedConfig> &configs,
                  const std::vector<BenchKey> &keys, CompareResult &result,
                  std::vector<CompareKey> &out, std::string &error) {
  out.assign(keys.size(), {});
  for (size_t k = 0; k < keys.size(); ++k)
    out[k].key = keys[k];
  std::vector<double> a, b;
  for (unsigned pair = 0; pair < kComparePairs; ++pair) {
    if (options.progress)
      options.progress("pair " + std::to_string(pair + 1) + "/" +
                       std::to_string(kComparePairs));
    // Alternating order: what the device carries from one bundle to the
    // next falls on both.
    const bool firstFirst = pair % 2 == 0;
    if (!timePair(firstFirst ? first : second, options, configs, result.device,
                  result.method, firstFirst ? a : b, error) ||
        !timePair(firstFirst ? second : first, options, configs, result.device,
                  result.method, firstFirst ? b : a, error))
      return false;
    for (size_t k = 0; k < keys.size(); ++k) {
      out[k].a.push_back(a[k]);
      out[k].b.push_back(b[k]);
    }
  }
  for (CompareKey &key : out) {
    std::vector<double> gains;
    for (size_t p = 0; p < key.a.size(); ++p) {
      if (key.a[p] <= 0 || key.b[p] <= 0)
        continue;
      gains.push_back((key.a[p] - key.b[p]) / key.a[p]);
      key.faster += key.b[p] < key.a[p];
    }
    std::sort(gains.begin(), gains.end());
    key.pairs = unsigned(gains.size());
    key.medianGain = gains.empty() ? 0.0 : gains[gains.size() / 2];
    key.gate = key.pairs == kComparePairs && key.medianGain >= kCompareMinGain &&
               key.faster >= kCompareMinFaster;
  }
  return true;
}

} // namespace

bool runBenchCompare(const std::string &bundleA, const std::string &bundleB,
                     const BenchOptions &options, CompareResult &result,
                     std::string &error) {
  result = CompareResult();
  std::vector<TimedConfig> configs, configsB;
  std::vector<std::vector<BenchKey>> keysA, keysB;
  if (!collectKeys(bundleA, options, configs, keysA, error) ||
      !collectKeys(bundleB, options, configsB, keysB, error))
    return false;
  std::vector<BenchKey> keys;
  for (const auto &tableKeys : keysA)
    keys.insert(keys.end(), tableKeys.begin(), tableKeys.end());
  std::vector<BenchKey> others;
  for (const auto &tableKeys : keysB)
    others.insert(others.end(), tableKeys.begin(), tableKeys.end());
  if (std::set<BenchKey>(keys.begin(), keys.end()) !=
      std::set<BenchKey>(others.begin(), others.end())) {
    error = bundleA + " and " + bundleB + " do not have the same keys";
    return false;
  }
  if (!comparePairs(bundleA, bundleB, options, configs, keys, result,
                    result.keys, error) ||
      !comparePairs(bundleA, bundleA, options, configs, keys, result,
                    result.control, error))
    return false;
  result.synthetic = isTestDouble(result.device);
  result.controlPassed = true;
  for (const CompareKey &key : result.control)
    result.controlPassed &= !key.gate && key.pairs == kComparePairs;
  return true;
}

std::string formatCompareText(const CompareResult &result) {
  std::ostringstream out;
  out << "device " << result.device << ", " << result.method << ", "
      << kComparePairs << " alternating pairs per key\n";
  if (result.synthetic)
    out << "SYNTHETIC: the HIP library is moec's timing test double; these "
           "times come from its clock, not from a GPU\n";
  char line[256];
  std::snprintf(line, sizeof(line), "%-16s %3s %6s %6s %10s %10s %8s %7s  %s\n",
                "network", "ep", "ws", "m", "a_us", "b_us", "gain", "faster",
                "verdict");
  out << line;
  auto median = [](std::vector<double> values) {
    std::sort(values.begin(), values.end());
    return values.empty() ? -1.0 : values[values.size() / 2];
  };
  for (size_t k = 0; k < result.keys.size(); ++k) {
    const CompareKey &key = result.keys[k];
    const CompareKey &control = result.control[k];
    std::snprintf(line, sizeof(line),
                  "%-16s %3u %6u %6u %10.2f %10.2f %7.2f%% %3u/%-3u  %s%s\n",
                  key.key.network.c_str(), key.key.ep, key.key.workspace,
                  key.key.m, median(key.a), median(key.b),
                  100.0 * key.medianGain, key.faster, kComparePairs,
                  key.gate ? "B faster" : "no gain",
                  control.gate ? " (control A/A shows a gain: biased)" : "");
    out << line;
  }
  out << (result.controlPassed
              ? "control A against A: no gain at any key\n"
              : "control A against A FAILED: the measurement is biased\n");
  return out.str();
}

} // namespace moec::harness
