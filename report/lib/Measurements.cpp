//===- Measurements.cpp - what moec report sets beside the model ----------===//

#include "moec/Report/Measurements.h"

#include "moec/Compiler/CsvText.h"

#include <map>
#include <sstream>

namespace moec::report {
namespace {

using csv::parseNumber;

/// The string value of `"key": "value"` in a JSON line, or false.
bool jsonString(const std::string &line, const std::string &key,
                std::string &value) {
  const std::string opening = "\"" + key + "\": \"";
  const size_t at = line.find(opening);
  if (at == std::string::npos)
    return false;
  const size_t begin = at + opening.size();
  const size_t end = line.find('"', begin);
  if (end == std::string::npos)
    return false;
  value = line.substr(begin, end - begin);
  return true;
}

} // namespace

bool parseModelCheckCsv(const std::string &path, const std::string &text,
                        ModelCheckData &data, std::string &error) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line)) {
    error = path + ": empty, expected moec model-check --csv output";
    return false;
  }
  const std::vector<std::string> header = csv::fieldsOf(line);
  std::map<std::string, size_t> column;
  for (size_t i = 0; i < header.size(); ++i)
    column[header[i]] = i;
  for (const char *name :
       {"figure", "source", "family", "stage", "shape", "network", "m",
        "config", "part", "measured_us", "predicted_us", "upper_bound",
        "skipped"})
    if (!column.count(name)) {
      error = path + ":1: no column '" + name +
              "' (expected moec model-check --csv output)";
      return false;
    }
  for (unsigned number = 2; std::getline(in, line); ++number) {
    if (line.empty())
      continue;
    const std::string where = path + ":" + std::to_string(number) + ": ";
    const std::vector<std::string> f = csv::fieldsOf(line);
    if (f.size() != header.size()) {
      error = where + std::to_string(f.size()) + " fields, the header has " +
              std::to_string(header.size());
      return false;
    }
    ModelCheckEntry entry;
    entry.figure = f[column["figure"]];
    entry.source = f[column["source"]];
    entry.family = f[column["family"]];
    entry.stage = f[column["stage"]];
    entry.shape = f[column["shape"]];
    entry.network = f[column["network"]];
    entry.config = f[column["config"]];
    entry.part = f[column["part"]];
    entry.skipped = f[column["skipped"]];
    entry.upperBound = f[column["upper_bound"]] == "1";
    double m = 0;
    if (!parseNumber(f[column["m"]], m) || m < 0) {
      error = where + "column 'm': expected a count, got '" +
              f[column["m"]] + "'";
      return false;
    }
    entry.m = int64_t(m);
    if (!parseNumber(f[column["measured_us"]], entry.measuredUs) ||
        entry.measuredUs <= 0) {
      error = where + "column 'measured_us': expected a time, got '" +
              f[column["measured_us"]] + "'";
      return false;
    }
    const std::string &predicted = f[column["predicted_us"]];
    if (entry.skipped.empty() &&
        (!parseNumber(predicted, entry.predictedUs) || entry.predictedUs <= 0)) {
      error = where + "column 'predicted_us': expected a time, got '" +
              predicted + "'";
      return false;
    }
    entry.series.push_back("configuration " + entry.family + " " +
                           entry.stage + " " + entry.shape + " " +
                           entry.config);
    data.entries.push_back(std::move(entry));
  }
  return true;
}

bool parseBenchHeader(const std::string &path, const std::string &text,
                      BenchMeasurements &bench, std::string &error) {
  const std::string line = text.substr(0, text.find('\n'));
  if (!jsonString(line, "device", bench.device) ||
      !jsonString(line, "method", bench.method)) {
    error = path + ": not moec bench --json output (no device and method)";
    return false;
  }
  jsonString(line, "date", bench.date);
  bench.synthetic = line.find("\"synthetic\": true") != std::string::npos;
  return true;
}

bool figureOfNetwork(const std::string &figureNetwork,
                     const std::string &tableNetwork) {
  return tableNetwork == figureNetwork ||
         tableNetwork == figureNetwork + "-fused";
}

} // namespace moec::report
