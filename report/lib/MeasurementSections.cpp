//===- MeasurementSections.cpp - the page's measured sections -------------===//
//
// docs/report.md: "Model against published measurements", "Measured on
// this machine" and the EP8 anchor. Every chart is inline SVG; each marker
// that stands for one figure or one measured key has class "point" and the
// chart's data-points attribute says how many it draws, so a checker can
// count them (test/lit/Tools/Inputs/check_report.py).
//
//===----------------------------------------------------------------------===//

#include "MeasurementSections.h"

#include "HtmlParts.h"
#include "moec/Report/HtmlReport.h"
#include "moec/Report/PlotScales.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace moec::report {
namespace {

/// A time or ratio within a factor of this of the measurement counts as
/// agreeing (the model-check goal, docs/cost-model.md).
constexpr double kAgreement = 1.25;
constexpr const char *kMeasuredColor = "#c2423f";
constexpr const char *kPredictedColor = "#2f6fb0";
constexpr const char *kPublishedColor = "#1d2330";

std::vector<Tick> ticksOf(const LogAxis &axis) {
  std::vector<Tick> ticks;
  for (uint64_t m : axis.ticks())
    ticks.push_back({axis.x(double(m)), mText(m)});
  return ticks;
}

std::vector<Tick> ticksOf(const LogScale &scale) {
  std::vector<Tick> ticks;
  for (double value : scale.ticks())
    ticks.push_back({scale.position(value), tickText(value)});
  return ticks;
}

enum class Shape { Circle, Square, Diamond };

/// One marker. `filled` false draws it open (white inside, coloured edge).
void marker(std::ostream &out, Shape shape, double x, double y,
            const std::string &color, bool filled, const std::string &cls,
            const std::string &attributes, const std::string &title) {
  const std::string paint =
      filled ? "fill=\"" + color + "\" stroke=\"#fff\" stroke-width=\"0.8\""
             : "fill=\"#fff\" stroke=\"" + color + "\" stroke-width=\"2\"";
  const std::string common = " class=\"" + cls + "\"" + attributes + " " +
                             paint + "><title>" + htmlEscape(title) +
                             "</title>";
  switch (shape) {
  case Shape::Circle:
    out << "<circle cx=\"" << fixed(x, 1) << "\" cy=\"" << fixed(y, 1)
        << "\" r=\"4.5\"" << common << "</circle>";
    break;
  case Shape::Square:
    out << "<rect x=\"" << fixed(x - 4, 1) << "\" y=\"" << fixed(y - 4, 1)
        << "\" width=\"8\" height=\"8\"" << common << "</rect>";
    break;
  case Shape::Diamond:
    out << "<polygon points=\"" << fixed(x, 1) << "," << fixed(y - 6, 1)
        << " " << fixed(x + 6, 1) << "," << fixed(y, 1) << " "
        << fixed(x, 1) << "," << fixed(y + 6, 1) << " " << fixed(x - 6, 1)
        << "," << fixed(y, 1) << "\"" << common << "</polygon>";
    break;
  }
}

/// One entry of a chart's key, at (x, y): its marker and its text.
void keyItem(std::ostream &out, double x, double y, Shape shape,
             const std::string &color, bool filled, const std::string &text) {
  marker(out, shape, x, y, color, filled, "key", "", text);
  out << "<text x=\"" << fixed(x + 10, 1) << "\" y=\"" << fixed(y + 4, 1)
      << "\" class=\"tick\">" << htmlEscape(text) << "</text>";
}

/// The band of agreement (within kAgreement of a ratio of 1) and the line
/// at 1 across a ratio chart.
void agreementBand(std::ostream &out, const PlotBox &box,
                   const LogScale &ratio) {
  const double upper = ratio.position(kAgreement);
  const double lower = ratio.position(1 / kAgreement);
  out << "<rect x=\"" << box.left << "\" y=\"" << fixed(upper, 1)
      << "\" width=\"" << box.right - box.left << "\" height=\""
      << fixed(lower - upper, 1) << "\" fill=\"#e3f0e6\"/><line x1=\""
      << box.left << "\" y1=\"" << fixed(ratio.position(1), 1) << "\" x2=\""
      << box.right << "\" y2=\"" << fixed(ratio.position(1), 1)
      << "\" stroke=\"#3a9a5b\" stroke-width=\"1.5\"/>";
}

/// A ratio axis that holds `ratios` and the agreement band.
LogScale ratioScale(const std::vector<double> &ratios, const PlotBox &box) {
  double low = 1 / kAgreement, high = kAgreement;
  for (double r : ratios) {
    low = std::min(low, r);
    high = std::max(high, r);
  }
  return LogScale::covering(low, high, box.bottom, box.top);
}

std::string svgOpen(const std::string &id, double width, double height,
                    const std::string &label, size_t points) {
  return "<svg class=\"chart\" id=\"" + id + "\" viewBox=\"0 0 " +
         fixed(width, 0) + " " + fixed(height, 0) +
         "\" xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" aria-label=\"" +
         htmlEscape(label) + "\" data-points=\"" + std::to_string(points) +
         "\">";
}

std::string ratioText(double ratio) { return fixed(ratio, 2) + "×"; }

//===----------------------------------------------------------------------===//
// Model against published measurements
//===----------------------------------------------------------------------===//

std::string categoryOf(const ModelCheckEntry &entry) {
  return entry.family + " " + entry.stage;
}

void scatterChart(std::ostream &out,
                  const std::vector<const ModelCheckEntry *> &points,
                  const std::map<std::string, size_t> &colors) {
  const PlotBox box{80, 20, 600, 540};
  double low = points.front()->measuredUs, high = low;
  for (const ModelCheckEntry *e : points) {
    low = std::min({low, e->measuredUs, e->predictedUs});
    high = std::max({high, e->measuredUs, e->predictedUs});
  }
  const LogScale x = LogScale::covering(low, high, box.left, box.right);
  const LogScale y = LogScale::covering(low, high, box.bottom, box.top);
  out << svgOpen("model-check-scatter", 1000, 590,
                 "predicted against measured time", points.size());
  drawFrame(out, box, ticksOf(x), ticksOf(y), "measured µs (log scale)",
            "predicted µs (log scale)");
  // The band where predicted is within 1.25x of measured, then y = x.
  auto at = [&](double mx, double my) {
    return fixed(x.position(mx), 1) + "," + fixed(y.position(my), 1) + " ";
  };
  out << "<polygon points=\"" << at(x.low, x.low * kAgreement)
      << at(x.high / kAgreement, x.high) << at(x.high, x.high)
      << at(x.high, x.high / kAgreement) << at(x.low * kAgreement, x.low)
      << at(x.low, x.low) << "\" fill=\"#e3f0e6\"/><line x1=\"" << box.left
      << "\" y1=\"" << box.bottom << "\" x2=\"" << box.right << "\" y2=\""
      << box.top << "\" stroke=\"#3a9a5b\" stroke-width=\"1.5\"/>";
  for (const ModelCheckEntry *e : points)
    marker(out, e->upperBound ? Shape::Square : Shape::Circle,
           x.position(e->measuredUs), y.position(e->predictedUs),
           kPalette[colors.at(categoryOf(*e)) % kPaletteSize],
           e->part == "train", "point",
           " data-figure=\"" + htmlEscape(e->figure) + "\"",
           e->figure + " (" + e->part + ", " + categoryOf(*e) + ", M " +
               std::to_string(e->m) + ", " + e->config + "): measured " +
               fixed(e->measuredUs, 2) + " µs, predicted " +
               fixed(e->predictedUs, 2) + " µs, ratio " +
               fixed(e->predictedUs / e->measuredUs, 3) +
               (e->upperBound ? " (the measurement is an upper bound)" : ""));
  // The key, right of the plot.
  double keyY = 30;
  for (const auto &[category, index] : colors) {
    keyItem(out, 640, keyY, Shape::Circle, kPalette[index % kPaletteSize],
            true, category);
    keyY += 20;
  }
  keyY += 10;
  keyItem(out, 640, keyY, Shape::Circle, "#667085", true,
          "filled: training part (the fit sees it)");
  keyItem(out, 640, keyY + 20, Shape::Circle, "#667085", false,
          "open: validation part");
  keyItem(out, 640, keyY + 40, Shape::Square, "#667085", true,
          "square: the measurement bounds the prediction from above");
  out << "<line x1=\"634\" y1=\"" << keyY + 60 << "\" x2=\"646\" y2=\""
      << keyY + 60 << "\" stroke=\"#3a9a5b\" stroke-width=\"1.5\"/>"
      << "<text x=\"650\" y=\"" << keyY + 64
      << "\" class=\"tick\">predicted = measured</text><rect x=\"634\" y=\""
      << keyY + 74 << "\" width=\"12\" height=\"10\" fill=\"#e3f0e6\"/>"
      << "<text x=\"650\" y=\"" << keyY + 84
      << "\" class=\"tick\">within 1.25× (the model-check goal)</text>";
  out << "</svg>\n";
}

void errorAlongM(std::ostream &out,
                 const std::vector<const ModelCheckEntry *> &points,
                 const std::map<std::string, size_t> &colors) {
  const PlotBox box{80, 16, 960, 280};
  int64_t mMax = 1;
  std::vector<double> ratios;
  std::map<std::string, std::vector<const ModelCheckEntry *>> series;
  for (const ModelCheckEntry *e : points) {
    mMax = std::max(mMax, e->m);
    ratios.push_back(e->predictedUs / e->measuredUs);
    series[e->series.empty() ? e->figure : e->series.front()].push_back(e);
  }
  const LogAxis x{box.left, box.right - box.left, mAxisEnd(uint64_t(mMax))};
  const LogScale y = ratioScale(ratios, box);
  out << svgOpen("model-check-error", 1000, 330,
                 "model error (predicted / measured) along M", points.size());
  agreementBand(out, box, y);
  drawFrame(out, box, ticksOf(x), ticksOf(y), "M (tokens, log scale)",
            "predicted / measured");
  for (auto &[name, entries] : series) {
    std::sort(entries.begin(), entries.end(),
              [](const ModelCheckEntry *a, const ModelCheckEntry *b) {
                return a->m < b->m;
              });
    const std::string color =
        kPalette[colors.at(categoryOf(*entries.front())) % kPaletteSize];
    if (entries.size() > 1) {
      out << "<polyline points=\"";
      for (const ModelCheckEntry *e : entries)
        out << fixed(x.x(double(e->m)), 1) << ","
            << fixed(y.position(e->predictedUs / e->measuredUs), 1) << " ";
      out << "\" fill=\"none\" stroke=\"" << color
          << "\" stroke-width=\"1.2\" stroke-opacity=\"0.7\"><title>"
          << htmlEscape(name) << "</title></polyline>";
    }
    for (const ModelCheckEntry *e : entries)
      marker(out, e->upperBound ? Shape::Square : Shape::Circle,
             x.x(double(e->m)), y.position(e->predictedUs / e->measuredUs),
             color, e->part == "train", "point",
             " data-figure=\"" + htmlEscape(e->figure) + "\"",
             e->figure + " M " + std::to_string(e->m) + " (" + e->config +
                 "): predicted / measured " +
                 fixed(e->predictedUs / e->measuredUs, 3));
  }
  out << "</svg>\n";
}

void errorSummaryTable(std::ostream &out, const ModelCheckData &shown) {
  const ModelCheckSummary summary = summarize(shown);
  out << "<table class=\"rows\"><thead><tr><th>part, family, stage</th>"
         "<th>figures</th><th>median |log(pred/meas)|</th><th>p90</th>"
         "<th>median pred/meas</th></tr></thead><tbody>";
  for (const ErrorSummary &e : summary.errors)
    out << "<tr><td>" << htmlEscape(e.group) << "</td><td class=\"num\">"
        << e.count << "</td><td class=\"num\">" << fixed(e.medianAbsLog, 3)
        << (e.medianAbsLog <= std::log(kAgreement) ? " (within 1.25×)" : "")
        << "</td><td class=\"num\">" << fixed(e.p90AbsLog, 3)
        << "</td><td class=\"num\">" << fixed(e.medianRatio, 3)
        << "</td></tr>";
  out << "</tbody></table>\n";
  if (summary.upperBounds)
    out << "<p class=\"note\">" << summary.upperBoundsBelow << " of "
        << summary.upperBounds
        << " predictions lie under the measurement that bounds them "
           "(squares).</p>\n";
  if (summary.correlations.empty())
    return;
  std::vector<double> rhos;
  for (const SeriesCorrelation &c : summary.correlations)
    rhos.push_back(c.spearman);
  out << "<details><summary>rank correlation along M: "
      << summary.correlations.size()
      << " configurations measured at 3 or more M, median Spearman "
      << fixed(median(rhos), 3)
      << "</summary><table class=\"rows\"><thead><tr><th>configuration</th>"
         "<th>part</th><th>points</th><th>Spearman</th></tr></thead><tbody>";
  for (const SeriesCorrelation &c : summary.correlations)
    out << "<tr><td>" << htmlEscape(c.series) << "</td><td>"
        << htmlEscape(c.part) << "</td><td class=\"num\">" << c.points
        << "</td><td class=\"num\">" << fixed(c.spearman, 3) << "</td></tr>";
  out << "</tbody></table></details>\n";
}

//===----------------------------------------------------------------------===//
// Measured on this machine, and the EP8 anchor: times along M
//===----------------------------------------------------------------------===//

/// One M of a time chart: the times shown there (negative: none).
struct TimesAtM {
  uint32_t m = 0;
  double measuredUs = -1, publishedUs = -1, predictedUs = -1;
  std::string label; ///< what the point stands for (a figure id, a key)
};

/// Times per M on log axes: `pointTimes` (measured or published, one
/// marker of class "point" each), the other series beside them.
void timesChart(std::ostream &out, const std::string &id,
                const std::string &label, const std::vector<TimesAtM> &times,
                bool pointsArePublished) {
  const PlotBox box{80, 30, 960, 250};
  uint32_t mMax = 1;
  double low = 0, high = 0;
  size_t points = 0;
  for (const TimesAtM &t : times) {
    mMax = std::max(mMax, t.m);
    for (double us : {t.measuredUs, t.publishedUs, t.predictedUs})
      if (us > 0) {
        low = low > 0 ? std::min(low, us) : us;
        high = std::max(high, us);
      }
    points += (pointsArePublished ? t.publishedUs : t.measuredUs) > 0;
  }
  const LogAxis x{box.left, box.right - box.left, mAxisEnd(mMax)};
  const LogScale y = LogScale::covering(low, high, box.bottom, box.top);
  out << svgOpen(id, 1000, 300, label, points);
  drawFrame(out, box, ticksOf(x), ticksOf(y), "M (tokens per rank, log scale)",
            "µs per layer (log scale)");
  struct Series {
    double TimesAtM::*field;
    Shape shape;
    const char *color;
    bool filled;
    const char *name;
  };
  const Series series[] = {
      {&TimesAtM::predictedUs, Shape::Circle, kPredictedColor, false,
       "predicted (cost model)"},
      {&TimesAtM::publishedUs, Shape::Diamond, kPublishedColor, true,
       "published figure"},
      {&TimesAtM::measuredUs, Shape::Circle, kMeasuredColor, true,
       "measured here"}};
  double keyX = box.left + 10;
  for (const Series &s : series) {
    const bool isPoint = (s.field == &TimesAtM::publishedUs) == pointsArePublished &&
                         s.field != &TimesAtM::predictedUs;
    std::string line;
    for (const TimesAtM &t : times)
      if (t.*s.field > 0)
        line += fixed(x.x(t.m), 1) + "," + fixed(y.position(t.*s.field), 1) +
                " ";
    if (line.empty())
      continue;
    out << "<polyline points=\"" << line << "\" fill=\"none\" stroke=\""
        << s.color << "\" stroke-width=\"1.2\" stroke-opacity=\"0.6\"/>";
    for (const TimesAtM &t : times)
      if (t.*s.field > 0)
        marker(out, s.shape, x.x(t.m), y.position(t.*s.field), s.color,
               s.filled, isPoint ? "point" : "series",
               " data-m=\"" + std::to_string(t.m) + "\" data-label=\"" +
                   htmlEscape(t.label) + "\"",
               t.label + ": M " + std::to_string(t.m) + ", " + s.name + " " +
                   fixed(t.*s.field, 2) + " µs");
    keyItem(out, keyX, 14, s.shape, s.color, s.filled, s.name);
    keyX += 190;
  }
  out << "</svg>\n";
}

/// predicted / reference per M (reference: measured, or published).
void ratioChart(std::ostream &out, const std::string &id,
                const std::string &label, const std::vector<TimesAtM> &times,
                double TimesAtM::*reference, const std::string &yTitle) {
  const PlotBox box{80, 14, 960, 170};
  uint32_t mMax = 1;
  std::vector<double> ratios;
  std::vector<const TimesAtM *> shown;
  for (const TimesAtM &t : times)
    if (t.predictedUs > 0 && t.*reference > 0) {
      mMax = std::max(mMax, t.m);
      ratios.push_back(t.predictedUs / t.*reference);
      shown.push_back(&t);
    }
  if (shown.empty())
    return;
  const LogAxis x{box.left, box.right - box.left, mAxisEnd(mMax)};
  const LogScale y = ratioScale(ratios, box);
  out << svgOpen(id, 1000, 220, label, shown.size());
  agreementBand(out, box, y);
  drawFrame(out, box, ticksOf(x), ticksOf(y), "M (tokens per rank, log scale)",
            yTitle);
  for (size_t i = 0; i < shown.size(); ++i)
    marker(out, Shape::Circle, x.x(shown[i]->m), y.position(ratios[i]),
           kPredictedColor, true, "point",
           " data-m=\"" + std::to_string(shown[i]->m) + "\"",
           shown[i]->label + ": M " + std::to_string(shown[i]->m) + ", " +
               yTitle + " " + fixed(ratios[i], 3));
  out << "</svg>\n";
}

std::string timeCell(double us) {
  return us > 0 ? fixed(us, 2) : std::string("<span class=\"none\">—</span>");
}
std::string ratioCell(double numerator, double denominator) {
  return numerator > 0 && denominator > 0
             ? ratioText(numerator / denominator)
             : std::string("<span class=\"none\">—</span>");
}

/// The row of `table` that serves m (docs/selection.md), or nullptr when
/// m is refused; `fallback` says it is served as a flagged fallback.
const rt::SelectionRow *servingRow(const rt::SelectionTable &table,
                                   uint32_t m, bool &fallback) {
  const std::vector<ServedRange> ranges = servedRanges(table);
  fallback = false;
  for (size_t r = 0; r < ranges.size(); ++r)
    if (ranges[r].mLow <= m && m <= ranges[r].mHigh)
      return &table.rows[r];
  if (ranges.back().aboveMax && m > ranges.back().mHigh &&
      (table.maxTokens == 0 || m <= table.maxTokens)) {
    fallback = true;
    return &table.rows.back();
  }
  return nullptr;
}

/// The problem shape of a table: its first kernel with one.
const KernelFacts *tableShape(const rt::Manifest &manifest,
                              const std::vector<KernelFacts> &facts,
                              const rt::SelectionTable &table) {
  for (const rt::SelectionRow &row : table.rows)
    for (uint32_t k : manifest.configs[row.config].kernels)
      if (facts[k].hidden > 0)
        return &facts[k];
  return nullptr;
}

bool sameShape(const KernelFacts &shape, const PublishedFigure &figure) {
  return shape.hidden == figure.hidden &&
         shape.intermediate == figure.intermediate &&
         shape.experts == figure.experts && shape.topK == figure.topK &&
         shape.ep == figure.ep;
}

std::string shapeText(int64_t hidden, int64_t intermediate, int64_t experts,
                      int64_t topK) {
  return "H " + std::to_string(hidden) + ", I " +
         std::to_string(intermediate) + ", " + std::to_string(experts) +
         " experts, top-" + std::to_string(topK);
}

} // namespace

void writeModelCheckSection(std::ostream &out, const rt::Manifest &manifest,
                            const ModelCheckData &data, bool allFigures) {
  std::set<std::string> networks;
  for (const rt::SelectionTable &table : manifest.selection)
    networks.insert(table.network);
  ModelCheckData shown;
  for (const ModelCheckEntry &entry : data.entries)
    if (allFigures ||
        std::any_of(networks.begin(), networks.end(),
                    [&](const std::string &network) {
                      return figureOfNetwork(entry.network, network);
                    }))
      shown.entries.push_back(entry);
  std::vector<const ModelCheckEntry *> predicted;
  std::map<std::string, size_t> colors;
  for (const ModelCheckEntry &entry : shown.entries)
    if (entry.skipped.empty()) {
      predicted.push_back(&entry);
      colors.emplace(categoryOf(entry), 0);
    }
  size_t index = 0;
  for (auto &[category, color] : colors)
    color = index++;
  std::string networkList;
  for (const std::string &network : networks)
    networkList += (networkList.empty() ? "" : ", ") + network;
  out << "<section class=\"measure\" id=\"model-check\"><h2>Model against "
         "published measurements</h2>\n<p class=\"meta\">From <code>moec "
         "model-check --csv</code>: "
      << (allFigures ? "every figure in the file"
                     : "the figures of this bundle's networks (" +
                           htmlEscape(networkList) + ")")
      << " · " << predicted.size() << " predicted · "
      << shown.entries.size() - predicted.size() << " not predicted · "
      << data.entries.size() << " in the file</p>\n";
  if (predicted.empty()) {
    out << "<p class=\"empty\">No predicted figure of this bundle's networks "
           "in the file"
        << (allFigures ? "" : " (<code>--all-figures</code> shows every one)")
        << ".</p></section>\n";
    return;
  }
  out << "<p class=\"note\">Each point is one published figure or timed "
         "AITER row: its measured time across, the cost model's prediction "
         "up, both on log scales. On the green line the model is exact; "
         "inside the band it is within 1.25×. Colour: family and stage; "
         "filled points are the training part of the fit, open points the "
         "validation part.</p>\n";
  scatterChart(out, predicted, colors);
  out << "<p class=\"note\">The model error along M: predicted / measured "
         "per figure on a log scale, one line per configuration measured at "
         "several M (a flat line: the model follows M; a tilted one: it "
         "does not).</p>\n";
  errorAlongM(out, predicted, colors);
  errorSummaryTable(out, shown);
  out << "</section>\n";
}

void writeBenchSection(std::ostream &out, const rt::Manifest &manifest,
                       const BenchMeasurements &bench) {
  out << "<section class=\"measure\" id=\"bench\"><h2>Measured on this "
         "machine</h2>\n";
  if (bench.synthetic)
    out << "<p class=\"synthetic\"><b>SYNTHETIC</b>: these times come from "
           "moec's HIP timing test double (a synthetic clock, no GPU). They "
           "exercise the measuring pipeline and say nothing about speed.</p>\n";
  out << "<p class=\"meta\">From <code>moec bench --json</code> · device <b>"
      << htmlEscape(bench.device) << "</b> · method "
      << htmlEscape(bench.method) << " · " << htmlEscape(bench.date) << " · "
      << bench.keys.size() << " keys</p>\n";
  std::vector<bool> used(bench.keys.size(), false);
  for (size_t t = 0; t < manifest.selection.size(); ++t) {
    const rt::SelectionTable &table = manifest.selection[t];
    std::vector<TimesAtM> times;
    for (size_t k = 0; k < bench.keys.size(); ++k) {
      const MeasuredKey &key = bench.keys[k];
      if (key.network != table.network || key.ep != table.ep ||
          key.workspace != table.workspace || key.layerUs <= 0)
        continue;
      used[k] = true;
      TimesAtM at;
      at.m = key.m;
      at.measuredUs = key.layerUs;
      at.publishedUs = key.publishedUs;
      at.label = tableLabel(manifest, t);
      for (const rt::SelectionRow &row : table.rows)
        if (row.m == key.m && row.provenance.present)
          at.predictedUs = row.provenance.predictedUs;
      times.push_back(at);
    }
    if (times.empty())
      continue;
    std::sort(times.begin(), times.end(),
              [](const TimesAtM &a, const TimesAtM &b) { return a.m < b.m; });
    out << "<h3>measured: " << htmlEscape(tableLabel(manifest, t)) << "</h3>\n";
    timesChart(out, "bench-table-" + std::to_string(t),
               "measured time per M for " + tableLabel(manifest, t), times,
               false);
    ratioChart(out, "bench-error-" + std::to_string(t),
               "model error per key for " + tableLabel(manifest, t), times,
               &TimesAtM::measuredUs, "predicted / measured");
    // Long tables fold their rows away, as the bundle's tables do.
    const bool fold = times.size() > 40;
    if (fold)
      out << "<details><summary>" << times.size()
          << " measured keys (select to show)</summary>";
    out << "<table class=\"rows\"><thead><tr><th>M</th><th>measured µs</th>"
           "<th>published µs</th><th>measured / published</th><th>predicted "
           "µs</th><th>predicted / measured</th></tr></thead><tbody>";
    for (size_t i = 0; i < times.size(); ++i) {
      const TimesAtM &at = times[i];
      std::string figure;
      for (const MeasuredKey &key : bench.keys)
        if (key.network == table.network && key.ep == table.ep &&
            key.workspace == table.workspace && key.m == at.m)
          figure = key.figure;
      out << "<tr><td class=\"num\">" << at.m << "</td><td class=\"num\">"
          << timeCell(at.measuredUs) << "</td><td class=\"num\">"
          << timeCell(at.publishedUs)
          << (figure.empty() ? "" : " <small>" + htmlEscape(figure) + "</small>")
          << "</td><td class=\"num\">"
          << ratioCell(at.measuredUs, at.publishedUs) << "</td><td class=\"num\">"
          << timeCell(at.predictedUs) << "</td><td class=\"num\">"
          << ratioCell(at.predictedUs, at.measuredUs) << "</td></tr>";
    }
    out << "</tbody></table>" << (fold ? "</details>" : "") << "\n";
  }
  std::set<std::string> unmatched;
  for (size_t k = 0; k < bench.keys.size(); ++k)
    if (!used[k])
      unmatched.insert(bench.keys[k].network + " ep" +
                       std::to_string(bench.keys[k].ep) + " ws" +
                       std::to_string(bench.keys[k].workspace));
  if (!unmatched.empty()) {
    std::string list;
    for (const std::string &key : unmatched)
      list += (list.empty() ? "" : ", ") + key;
    out << "<p class=\"note\">Measured keys of no table of this bundle (not "
           "drawn): "
        << htmlEscape(list) << ".</p>\n";
  }
  out << "</section>\n";
}

void writeAnchorSection(std::ostream &out, const rt::Manifest &manifest,
                        const std::vector<KernelFacts> &facts,
                        const std::vector<PublishedFigure> &figures) {
  // The EP8 tables by network, with their shape.
  std::map<std::string, std::vector<size_t>> tablesOf;
  std::map<std::string, const KernelFacts *> shapeOf;
  for (size_t t = 0; t < manifest.selection.size(); ++t) {
    const rt::SelectionTable &table = manifest.selection[t];
    const KernelFacts *shape = tableShape(manifest, facts, table);
    if (table.ep != 8 || !shape)
      continue;
    tablesOf[table.network].push_back(t);
    shapeOf[table.network] = shape;
  }
  if (tablesOf.empty())
    return;
  std::vector<const PublishedFigure *> anchor;
  for (const PublishedFigure &figure : figures)
    if (figure.ep == 8 && figure.quantity == "layer")
      anchor.push_back(&figure);
  out << "<section class=\"measure\" id=\"anchor-ep8\"><h2>EP8 beside the "
         "published MegaMoE latency guard</h2>\n<p class=\"note\">Per-layer "
         "times at EP8 published for the same network shape (FlyDSL's "
         "MegaMoE CI latency guard, which MegaMoEV2 must meet: "
         "tuning_tables/published/), beside the cost "
         "model's predicted time of the row the selector picks at that many "
         "tokens per rank, in the smallest workspace class that holds it. "
         "Only like is compared with like: the same hidden size, "
         "intermediate size, experts, top-k and EP.</p>\n";
  std::map<std::string, const PublishedFigure *> notCompared;
  std::set<const PublishedFigure *> compared;
  for (const auto &[network, tables] : tablesOf) {
    const KernelFacts &shape = *shapeOf[network];
    std::vector<TimesAtM> times;
    std::vector<std::string> where;
    for (const PublishedFigure *figure : anchor) {
      if (!sameShape(shape, *figure))
        continue;
      compared.insert(figure);
      // The smallest workspace class that holds M, else the largest.
      size_t chosen = tables.front();
      for (size_t t : tables) {
        const uint32_t ws = manifest.selection[t].workspace;
        const uint32_t best = manifest.selection[chosen].workspace;
        const bool holds = int64_t(ws) >= figure->m;
        const bool bestHolds = int64_t(best) >= figure->m;
        if ((holds && (!bestHolds || ws < best)) || (!holds && !bestHolds && ws > best))
          chosen = t;
      }
      TimesAtM at;
      at.m = uint32_t(figure->m);
      at.publishedUs = figure->measuredUs;
      at.label = figure->id;
      bool fallback = false;
      const rt::SelectionRow *row =
          servingRow(manifest.selection[chosen], at.m, fallback);
      std::string rowText = tableLabel(manifest, chosen);
      if (!row) {
        rowText += ": M refused";
      } else {
        rowText += ", row m " + std::to_string(row->m) +
                   (fallback ? " (flagged fallback)" : "") + ", " +
                   manifest.configs[row->config].id;
        if (row->provenance.present && row->provenance.predictedUs > 0)
          at.predictedUs = row->provenance.predictedUs;
      }
      times.push_back(at);
      where.push_back(rowText);
    }
    if (times.empty()) {
      out << "<p class=\"empty\">" << htmlEscape(network) << " at EP8 ("
          << shapeText(shape.hidden, shape.intermediate, shape.experts,
                       shape.topK)
          << "): no published EP8 figure of this shape.</p>\n";
      continue;
    }
    std::set<std::string> sources;
    for (const PublishedFigure *figure : anchor)
      if (sameShape(shape, *figure))
        sources.insert(figure->network + " (" + figure->source + ")");
    std::string source;
    for (const std::string &name : sources)
      source += (source.empty() ? "" : ", ") + name;
    out << "<h3>" << htmlEscape(network) << " at EP8 ("
        << shapeText(shape.hidden, shape.intermediate, shape.experts,
                     shape.topK)
        << ") beside " << htmlEscape(source) << "</h3>\n";
    timesChart(out, "anchor-" + network,
               "predicted beside published EP8 layer time for " + network,
               times, true);
    ratioChart(out, "anchor-error-" + network,
               "predicted / published for " + network, times,
               &TimesAtM::publishedUs, "predicted / published");
    out << "<table class=\"rows\"><thead><tr><th>tokens per rank</th><th>"
           "figure</th><th>published µs</th><th>row</th><th>predicted µs</th>"
           "<th>predicted / published</th></tr></thead><tbody>";
    for (size_t i = 0; i < times.size(); ++i)
      out << "<tr><td class=\"num\">" << times[i].m << "</td><td>"
          << htmlEscape(times[i].label) << "</td><td class=\"num\">"
          << timeCell(times[i].publishedUs) << "</td><td>"
          << htmlEscape(where[i]) << "</td><td class=\"num\">"
          << timeCell(times[i].predictedUs) << "</td><td class=\"num\">"
          << ratioCell(times[i].predictedUs, times[i].publishedUs)
          << "</td></tr>";
    out << "</tbody></table>\n";
  }
  for (const PublishedFigure *figure : anchor)
    if (!compared.count(figure))
      notCompared.emplace(figure->network, figure);
  for (const auto &[network, figure] : notCompared) {
    size_t count = 0;
    for (const PublishedFigure *f : anchor)
      count += f->network == network;
    out << "<p class=\"note not-compared\" data-network=\""
        << htmlEscape(network) << "\">Not compared: " << htmlEscape(network)
        << " (" << htmlEscape(figure->source) << ", " << count
        << " figures) is "
        << shapeText(figure->hidden, figure->intermediate, figure->experts,
                     figure->topK)
        << " at EP8, another shape than every EP8 table of this bundle.</p>\n";
  }
  if (anchor.empty())
    out << "<p class=\"empty\">The published figures hold no EP8 layer "
           "time.</p>\n";
  out << "</section>\n";
}

} // namespace moec::report
