//===- PlotScales.cpp - log axes of moec report's charts ------------------===//

#include "moec/Report/PlotScales.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace moec::report {

double LogAxis::x(double m) const {
  const double value = std::log2(std::max(m, 1.0));
  return left + width * std::min(value / std::log2(mMax), 1.0);
}

std::vector<uint64_t> LogAxis::ticks() const {
  std::vector<uint64_t> result;
  const int powers = int(std::log2(mMax));
  for (int p = 0; p <= powers; p += powers > 16 ? 2 : 1)
    result.push_back(uint64_t(1) << p);
  return result;
}

double mAxisEnd(uint64_t top) {
  uint64_t power = 2;
  while (power < top * 2 && power < (uint64_t(1) << 33))
    power *= 2;
  return double(power);
}

std::string mText(uint64_t m) {
  if (m >= 1024 && m % 1024 == 0)
    return std::to_string(m / 1024) + "K";
  return std::to_string(m);
}

LogScale LogScale::covering(double minValue, double maxValue, double pixelLow,
                            double pixelHigh) {
  LogScale scale;
  // A tiny tolerance keeps an exact power of ten (1000 is 10^2.9999...)
  // in its own decade.
  const double lowExponent = std::floor(std::log10(minValue) + 1e-9);
  double highExponent = std::ceil(std::log10(maxValue) - 1e-9);
  if (highExponent <= lowExponent)
    highExponent = lowExponent + 1;
  scale.low = std::pow(10.0, lowExponent);
  scale.high = std::pow(10.0, highExponent);
  scale.pixelLow = pixelLow;
  scale.pixelHigh = pixelHigh;
  return scale;
}

double LogScale::position(double value) const {
  const double fraction = (std::log10(value) - std::log10(low)) /
                          (std::log10(high) - std::log10(low));
  return pixelLow + (pixelHigh - pixelLow) * fraction;
}

std::vector<double> LogScale::ticks() const {
  const int first = int(std::lround(std::log10(low)));
  const int last = int(std::lround(std::log10(high)));
  const bool fine = last - first <= 2;
  std::vector<double> result;
  for (int e = first; e <= last; ++e) {
    const double decade = std::pow(10.0, e);
    result.push_back(decade);
    if (fine && e < last) {
      result.push_back(2 * decade);
      result.push_back(5 * decade);
    }
  }
  return result;
}

std::string tickText(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", value);
  return buffer;
}

} // namespace moec::report
