//===- MeasurementSections.h - the page's measured sections ----*- C++ -*-===//
//
// Private to the report library: the sections of `moec report` that put
// measurements beside the cost model (docs/report.md): the model against
// published figures (--model-check), times measured on the owner's machine
// (--bench) and the EP8 tables beside FlyDSL's published baselines.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_REPORT_LIB_MEASUREMENTSECTIONS_H
#define MOEC_REPORT_LIB_MEASUREMENTSECTIONS_H

#include "moec/Report/BundleAnalysis.h"
#include "moec/Report/Measurements.h"

#include <ostream>
#include <vector>

namespace moec::report {

/// "Model against published measurements": predicted against measured on
/// log axes, the error along M per configuration, the error summary.
void writeModelCheckSection(std::ostream &out, const rt::Manifest &manifest,
                            const ModelCheckData &data, bool allFigures);

/// "Measured on this machine": per table the measured time per M beside
/// the published figure and the prediction, and the model error per key.
void writeBenchSection(std::ostream &out, const rt::Manifest &manifest,
                       const BenchMeasurements &bench);

/// The EP8 tables' predictions beside the published EP8 layer times of
/// the same shape; nothing when the bundle has no EP8 table.
void writeAnchorSection(std::ostream &out, const rt::Manifest &manifest,
                        const std::vector<KernelFacts> &facts,
                        const std::vector<PublishedFigure> &figures);

} // namespace moec::report

#endif // MOEC_REPORT_LIB_MEASUREMENTSECTIONS_H
