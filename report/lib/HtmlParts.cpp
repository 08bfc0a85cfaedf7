//===- HtmlParts.cpp - pieces the report's page sections share ------------===//

#include "HtmlParts.h"

namespace moec::report {

void drawFrame(std::ostream &out, const PlotBox &box,
               const std::vector<Tick> &xTicks,
               const std::vector<Tick> &yTicks, const std::string &xTitle,
               const std::string &yTitle) {
  for (const Tick &tick : xTicks)
    out << "<line x1=\"" << fixed(tick.at, 1) << "\" y1=\"" << box.top
        << "\" x2=\"" << fixed(tick.at, 1) << "\" y2=\"" << box.bottom
        << "\" stroke=\"#ececec\"/><text x=\"" << fixed(tick.at, 1)
        << "\" y=\"" << box.bottom + 16
        << "\" class=\"tick\" text-anchor=\"middle\">" << tick.text
        << "</text>";
  for (const Tick &tick : yTicks)
    out << "<line x1=\"" << box.left << "\" y1=\"" << fixed(tick.at, 1)
        << "\" x2=\"" << box.right << "\" y2=\"" << fixed(tick.at, 1)
        << "\" stroke=\"#ececec\"/><text x=\"" << box.left - 6 << "\" y=\""
        << fixed(tick.at + 4, 1) << "\" class=\"tick\" text-anchor=\"end\">"
        << tick.text << "</text>";
  out << "<polyline points=\"" << box.left << "," << box.top << " "
      << box.left << "," << box.bottom << " " << box.right << ","
      << box.bottom << "\" fill=\"none\" stroke=\"#888\"/>";
  const double middleY = (box.top + box.bottom) / 2;
  out << "<text x=\"" << (box.left + box.right) / 2 << "\" y=\""
      << box.bottom + 34 << "\" class=\"axis-title\" text-anchor=\"middle\">"
      << xTitle << "</text><text x=\"" << box.left - 48 << "\" y=\""
      << middleY << "\" class=\"axis-title\" transform=\"rotate(-90 "
      << box.left - 48 << " " << middleY << ")\" text-anchor=\"middle\">"
      << yTitle << "</text>";
}

} // namespace moec::report
