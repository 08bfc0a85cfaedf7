//===- HtmlParts.h - pieces the report's page sections share ----*- C++ -*-===//
//
// Private to the report library: number formatting, the colour palette and
// the SVG chart frame that HtmlReport.cpp and MeasurementSections.cpp both
// draw with.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_REPORT_LIB_HTMLPARTS_H
#define MOEC_REPORT_LIB_HTMLPARTS_H

#include <cstddef>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

namespace moec::report {

/// A fixed-precision number ("12.5").
inline std::string fixed(double value, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, value);
  return buffer;
}

/// Colours for configurations and series: distinct hues readable with
/// white text.
constexpr const char *kPalette[] = {
    "#2f6fb0", "#d9822b", "#3a9a5b", "#c2423f", "#7d5cb8", "#8c6d46",
    "#c75a9e", "#5f6b7a", "#9aa22e", "#2aa3b8", "#4b4fa8", "#b86b2a"};
constexpr size_t kPaletteSize = sizeof kPalette / sizeof kPalette[0];

/// A chart's plot area in SVG units (y grows downwards).
struct PlotBox {
  double left = 0, top = 0, right = 0, bottom = 0;
};
/// One tick: its position along the axis and its label.
struct Tick {
  double at = 0;
  std::string text;
};

/// The plot area's frame: grid lines and labels at the ticks, the axes and
/// their titles (the y title rotated).
void drawFrame(std::ostream &out, const PlotBox &box,
               const std::vector<Tick> &xTicks,
               const std::vector<Tick> &yTicks, const std::string &xTitle,
               const std::string &yTitle);

} // namespace moec::report

#endif // MOEC_REPORT_LIB_HTMLPARTS_H
