//===- Measurements.h - what moec report sets beside the model -*- C++ -*-===//
///
/// \file
/// The measurements `moec report` can put beside a bundle's predictions
/// (docs/report.md): `moec model-check --csv` output (the model against
/// every published figure), `moec bench --json` output (layer times
/// measured on the owner's machine) and the published figures themselves
/// (tuning_tables/published/figures.csv, for the EP8 anchor). The readers
/// here turn files into the structures the page draws; the model-check
/// rows become ModelCheckEntry values so the page's error summary is
/// moec model-check's own (summarize()).
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_REPORT_MEASUREMENTS_H
#define MOEC_REPORT_MEASUREMENTS_H

#include "moec/Compiler/ModelCheck.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moec::report {

/// Reads the CSV `moec model-check --csv` writes (modelCheckCsv(): a
/// header, then one line per figure) into `data.entries`: figure, source,
/// family, stage, shape, network, m, config, part, measured and predicted
/// time, upper bound and why a figure was skipped. Each entry gets one
/// series, "configuration FAMILY STAGE SHAPE CONFIG", so entries of one
/// configuration along M share it. False with "FILE:LINE: ..." on a
/// missing column, a bad number or a row with the wrong field count.
bool parseModelCheckCsv(const std::string &path, const std::string &text,
                        ModelCheckData &data, std::string &error);

/// One key measured by `moec bench`.
struct MeasuredKey {
  std::string network;
  uint32_t ep = 1, workspace = 0, m = 0;
  double layerUs = -1;
  double publishedUs = -1; ///< negative: no published figure of the key
  std::string figure;      ///< the figure's id in figures.csv
};

/// A `moec bench --json` file.
struct BenchMeasurements {
  std::string device, method, date;
  /// Timed by moec's HIP timing test double: its clock is synthetic.
  bool synthetic = false;
  std::vector<MeasuredKey> keys;
};

/// Reads the header object of a `moec bench --json` file (device, method,
/// date, synthetic); the rows are read by harness::readBenchRows. False
/// with "FILE: ..." when the file has no such header.
bool parseBenchHeader(const std::string &path, const std::string &text,
                      BenchMeasurements &bench, std::string &error);

/// What the page shows beyond the bundle itself; null pointers leave their
/// sections out.
struct ReportMeasurements {
  const ModelCheckData *modelCheck = nullptr;
  /// Show every model-check entry, not only those of the bundle's networks.
  bool allFigures = false;
  const BenchMeasurements *bench = nullptr;
  const std::vector<PublishedFigure> *published = nullptr;
};

/// Whether a figure of `figureNetwork` belongs to a table of
/// `tableNetwork`: the same name, or the table is the fused selection of
/// that network (`flash-fused` for `flash`), as moec model-check reads it.
bool figureOfNetwork(const std::string &figureNetwork,
                     const std::string &tableNetwork);

} // namespace moec::report

#endif // MOEC_REPORT_MEASUREMENTS_H
