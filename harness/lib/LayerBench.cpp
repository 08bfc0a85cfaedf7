//===- LayerBench.cpp - `moec bench`: a bundle's layer times --------------===//

#include "moec/Harness/LayerBench.h"

#include "moec/Compiler/ModelCheck.h"
#include "moec/bundle.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
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

std::string ratio(const BenchRow &row) {
  return row.layerUs >= 0 && row.publishedUs > 0
             ? number(row.layerUs / row.publishedUs, "%.3f")
             : "";
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

  DeviceTimerOptions timer = timerOptions(options);
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
    // Fused tables are launched directly; the method says so once any is.
    if (result.method.empty() || timings.method.size() > result.method.size())
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
      }
      result.rows.push_back(std::move(row));
    }
  }
  result.synthetic = isTestDouble(result.device);
  return true;
}

std::string formatBenchText(const BenchResult &result) {
  std::ostringstream out;
  out << "device " << result.device << ", " << result.method << ", "
      << result.date << "\n";
  if (result.synthetic)
    out << "SYNTHETIC: the HIP library is moec's timing test double; these "
           "times come from its clock, not from a GPU\n";
  char line[256];
  std::snprintf(line, sizeof(line), "%-16s %3s %6s %6s %12s %14s %7s  %s\n",
                "network", "ep", "ws", "m", "layer_us", "published_us",
                "ratio", "figure");
  out << line;
  for (const BenchRow &row : result.rows) {
    std::snprintf(line, sizeof(line), "%-16s %3u %6u %6u %12s %14s %7s  %s\n",
                  row.key.network.c_str(), row.key.ep, row.key.workspace,
                  row.key.m, number(row.layerUs).c_str(),
                  row.publishedUs > 0 ? number(row.publishedUs).c_str() : "-",
                  row.publishedUs > 0 ? ratio(row).c_str() : "-",
                  row.figure.c_str());
    out << line;
  }
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
         "method,synthetic\n";
  for (const BenchRow &row : result.rows)
    out << row.key.network << ',' << row.key.ep << ',' << row.key.workspace
        << ',' << row.key.m << ',' << number(row.layerUs, "%.3f") << ','
        << (row.publishedUs > 0 ? number(row.publishedUs, "%.3f") : "") << ','
        << ratio(row) << ',' << row.figure << ',' << result.device << ','
        << result.method << ',' << (result.synthetic ? 1 : 0) << '\n';
  return writeAtomically(path, out.str(), error);
}

bool writeBenchJson(const BenchResult &result, const std::string &path,
                    std::string &error) {
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
        << ", \"ratio\": " << (ratio(row).empty() ? "null" : ratio(row))
        << ", \"figure\": \"" << row.figure << "\"}"
        << (i + 1 < result.rows.size() ? "," : "") << "\n";
  }
  out << " ]}\n";
  return writeAtomically(path, out.str(), error);
}

bool readBenchRows(const std::string &path, std::vector<BenchRow> &rows,
                   std::string &error) {
  std::string text;
  if (!readFile(path, text, error))
    return false;
  const bool json = path.size() >= 5 && path.substr(path.size() - 5) == ".json";
  std::istringstream in(text);
  std::string line;
  unsigned number = 0;
  while (std::getline(in, line)) {
    ++number;
    BenchRow row;
    char network[128] = {}, figure[128] = {};
    double published = -1.0;
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
      const size_t at = line.find("\"published_us\": ");
      if (at != std::string::npos)
        std::sscanf(line.c_str() + at, "\"published_us\": %lf", &published);
      const size_t figureAt = line.find("\"figure\": \"");
      if (figureAt != std::string::npos)
        std::sscanf(line.c_str() + figureAt, "\"figure\": \"%127[^\"]", figure);
    } else {
      if (number == 1)
        continue; // the header
      if (std::sscanf(line.c_str(), "%127[^,],%u,%u,%u,%lf,", network,
                      &row.key.ep, &row.key.workspace, &row.key.m,
                      &row.layerUs) != 5) {
        error = path + ":" + std::to_string(number) + ": not a bench row";
        return false;
      }
      std::istringstream fields(line);
      std::string field;
      for (int column = 0; std::getline(fields, field, ','); ++column) {
        if (column == 5 && !field.empty())
          published = std::strtod(field.c_str(), nullptr);
        if (column == 7)
          std::snprintf(figure, sizeof(figure), "%s", field.c_str());
      }
    }
    row.key.network = network;
    row.publishedUs = published;
    row.figure = figure;
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
