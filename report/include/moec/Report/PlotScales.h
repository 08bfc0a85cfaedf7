//===- PlotScales.h - log axes of moec report's charts ----------*- C++ -*-===//
///
/// \file
/// The two log axes `moec report` draws on: M on a log2 scale from 1 (the
/// band and time charts, the measured and anchor charts) and times or
/// ratios on a log10 scale whose ends are whole decades, with ticks at
/// 1, 2 and 5 times each power of ten while the axis spans at most two
/// decades and at the powers of ten above that.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_REPORT_PLOTSCALES_H
#define MOEC_REPORT_PLOTSCALES_H

#include <cstdint>
#include <string>
#include <vector>

namespace moec::report {

/// A log2 M axis over [1, mMax] mapped to [left, left + width]; M below 1
/// maps to the left end, M above mMax to the right end.
struct LogAxis {
  double left = 0, width = 0;
  double mMax = 2;
  double x(double m) const;
  /// The powers of two from 1 to mMax, every other one above 2^16.
  std::vector<uint64_t> ticks() const;
};

/// The smallest power of two of at least 2 * `top`, at least 2 (at most
/// 2^33): the right end of an M axis that shows `top` with room.
double mAxisEnd(uint64_t top);

/// "1K" for 1024, "16K" for 16384, else the number.
std::string mText(uint64_t m);

/// A log10 axis over [low, high] (whole decades) mapped to
/// [pixelLow, pixelHigh]; for a vertical axis pixelLow is the bottom.
struct LogScale {
  double low = 1, high = 10;
  double pixelLow = 0, pixelHigh = 1;

  /// The decades that hold [minValue, maxValue] (both > 0): low the power
  /// of ten at or below minValue, high the one at or above maxValue, and
  /// one decade at least.
  static LogScale covering(double minValue, double maxValue, double pixelLow,
                           double pixelHigh);
  double position(double value) const;
  std::vector<double> ticks() const;
};

/// A tick label: "0.1", "2", "500", "2000" (%g, six significant digits).
std::string tickText(double value);

} // namespace moec::report

#endif // MOEC_REPORT_PLOTSCALES_H
