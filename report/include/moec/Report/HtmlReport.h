//===- HtmlReport.h - moec report's HTML page -------------------*- C++ -*-===//
///
/// \file
/// One self-contained HTML page about a bundle for the people who deploy it
/// (docs/cli.md, "moec report"): per selection table a band chart of the
/// configuration chosen across M, the rows with their provenance and times,
/// and per configuration its kernels' resources against the chip's limits.
/// `moec report` (tools/moec/ReportCommand.cpp) opens the bundle, calls
/// writeHtmlReport() and writes the page.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_REPORT_HTMLREPORT_H
#define MOEC_REPORT_HTMLREPORT_H

#include "moec/Report/Measurements.h"
#include "moec/bundle.h"
#include "moec/target/target_info.h"

#include <string>
#include <string_view>

namespace moec::report {

/// The page about `bundle` on `chip` (the bundle's own, bundleChip()),
/// titled with `bundleName`, with the sections `measurements` asks for
/// (docs/report.md). False with a one-line `error` when a kernel's
/// attributes do not parse.
bool writeHtmlReport(const rt::Bundle &bundle, const target::TargetInfo &chip,
                     const std::string &bundleName, std::string &html,
                     std::string &error,
                     const ReportMeasurements &measurements = {});

/// `text` escaped for HTML element content and attribute values.
std::string htmlEscape(std::string_view text);

} // namespace moec::report

#endif // MOEC_REPORT_HTMLREPORT_H
