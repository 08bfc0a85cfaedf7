#!/usr/bin/env python3
"""Checks a `moec report` page against the bundle's manifest.

    check_report.py REPORT.html MANIFEST.json [--model-check CHECK.csv
        [--all-figures]] [--bench BENCH.json] [--published FIGURES.csv]

The manifest (from `moec extract`) says what the page must name: every
selection table by its key ("flash ep4 ws1024") in a heading, every
configuration id, and every kernel name. The page must be self-contained
(no <script>, no <link>, no <img>/<iframe>/<object>, no src= at all, no
href= except to an anchor of the page itself, no url() in CSS other than a
reference to an element of the page) and every inline <svg> must be
well-formed XML. A chart that says how many points it draws
(data-points) draws that many elements of class "point".

With the measurements the page was written from, the sections that show
them are checked against the files themselves: --model-check, one point
per predicted figure of the bundle's networks (every one with
--all-figures) in the scatter and in the error chart; --bench, per table
one measured point per key of the file, and the SYNTHETIC label when the
test double timed; --published, every EP8 layer figure either drawn once
beside an EP8 table or named as another shape, not compared.
Prints one line per failure and exits 1 if there is any.
"""
import argparse
import csv
import json
import re
import sys
import xml.etree.ElementTree as ElementTree
from html.parser import HTMLParser


class Page(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.problems = []
        self.ids = set()
        self.hrefs = []
        self.headings = []
        self.text = []
        self._heading = None
        self.svg_count = 0
        self.not_compared = set()

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag in ("script", "link", "img", "iframe", "object", "embed",
                   "base", "frame", "audio", "video", "source"):
            self.problems.append(f"element <{tag}> in a self-contained page")
        for name, value in attrs:
            if name == "src":
                self.problems.append(f"<{tag} src={value!r}> refers to another file")
            if name.startswith("on"):
                self.problems.append(f"<{tag} {name}=...> is a script")
            if name in ("href", "xlink:href"):
                self.hrefs.append(value or "")
        if "id" in attributes:
            self.ids.add(attributes["id"])
        if tag == "svg":
            self.svg_count += 1
        if tag in ("h1", "h2", "h3"):
            self._heading = []
        if "data-network" in attributes:
            self.not_compared.add(attributes["data-network"])

    def handle_endtag(self, tag):
        if tag in ("h1", "h2", "h3") and self._heading is not None:
            self.headings.append(" ".join("".join(self._heading).split()))
            self._heading = None

    def handle_data(self, data):
        self.text.append(data)
        if self._heading is not None:
            self._heading.append(data)


def points_of(svg):
    """The attributes of the elements of class "point" in a parsed <svg>."""
    return [element.attrib for element in svg.iter()
            if "point" in element.attrib.get("class", "").split()]


def figure_of_network(figure_network, table_network):
    return table_network in (figure_network, figure_network + "-fused")


def check_chart(charts, chart, attribute, expected, problems):
    """Chart `chart` draws one point per value of `expected` (sorted), each
    naming it in `attribute`, or is absent when there is nothing to draw.
    Returns how many points it draws."""
    if not expected:
        if chart in charts:
            problems.append(f"{chart} drawn with nothing to draw")
        return 0
    if chart not in charts:
        problems.append(f"no chart {chart}")
        return 0
    drawn = sorted(p.get(attribute, "") for p in points_of(charts[chart]))
    if drawn != expected:
        problems.append(f"{chart} draws {drawn}, expected {expected}")
    return len(drawn)


def check_model_check(args, manifest, charts, page, problems, report):
    with open(args.model_check, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    networks = {table["network"] for table in manifest.get("selection", [])}
    expected = sorted(row["figure"] for row in rows if row["predicted_us"] and (
        args.all_figures or any(figure_of_network(row["network"], n) for n in networks)))
    if "model-check" not in page.ids:
        problems.append("no section model-check")
        return
    for chart in ("model-check-scatter", "model-check-error"):
        check_chart(charts, chart, "data-figure", expected, problems)
    print(f"{report}: model-check: {len(expected)} figures drawn")


def check_bench(args, manifest, charts, text, problems, report):
    with open(args.bench, encoding="utf-8") as f:
        bench = json.load(f)
    if bench.get("synthetic") and "SYNTHETIC" not in text:
        problems.append("test-double timings without the SYNTHETIC label")
    if not bench.get("synthetic") and "SYNTHETIC" in text:
        problems.append("device timings labelled SYNTHETIC")
    drawn_total = 0
    for index, table in enumerate(manifest.get("selection", [])):
        keys = sorted(str(row["m"]) for row in bench["rows"]
                      if (row["network"], row["ep"], row["workspace"]) ==
                      (table["network"], table["ep"], table["workspace"]))
        drawn_total += check_chart(charts, f"bench-table-{index}", "data-m",
                                   keys, problems)
    print(f"{report}: bench: {drawn_total} measured keys drawn"
          f"{' (synthetic)' if bench.get('synthetic') else ''}")


def check_published(args, manifest, charts, page, problems, report):
    with open(args.published, encoding="utf-8") as f:
        figures = [row for row in csv.DictReader(f)
                   if row["ep"] == "8" and row["quantity"] == "layer"]
    has_ep8 = any(table["ep"] == 8 for table in manifest.get("selection", []))
    if not has_ep8:
        if "anchor-ep8" in page.ids:
            problems.append("an EP8 section without an EP8 table")
        return
    if "anchor-ep8" not in page.ids:
        problems.append("no section anchor-ep8")
        return
    drawn = [p.get("data-label", "") for name, svg in charts.items()
             if name.startswith("anchor-") and not name.startswith("anchor-error-")
             for p in points_of(svg)]
    for figure in figures:
        times = drawn.count(figure["figure"])
        other_shape = figure["network"] in page.not_compared
        if times + other_shape != 1:
            problems.append(f"figure {figure['figure']} drawn {times} times"
                            f"{' and named not compared' if other_shape else ''}")
    for label in drawn:
        if label not in {figure["figure"] for figure in figures}:
            problems.append(f"anchor point {label} is no EP8 figure")
    print(f"{report}: anchor: {len(drawn)} figures drawn, not compared: "
          f"{', '.join(sorted(page.not_compared)) or 'none'}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("report")
    parser.add_argument("manifest")
    parser.add_argument("--model-check")
    parser.add_argument("--all-figures", action="store_true")
    parser.add_argument("--bench")
    parser.add_argument("--published")
    args = parser.parse_args()
    report_path, manifest_path = args.report, args.manifest
    with open(report_path, encoding="utf-8") as f:
        html = f.read()
    with open(manifest_path, encoding="utf-8") as f:
        manifest = json.load(f)

    page = Page()
    page.feed(html)
    page.close()
    problems = list(page.problems)
    text = " ".join(page.text)

    if not html.startswith("<!DOCTYPE html>"):
        problems.append("the page does not start with <!DOCTYPE html>")
    for href in page.hrefs:
        if not href.startswith("#"):
            problems.append(f"href={href!r} refers to another file or site")
        elif href[1:] not in page.ids:
            problems.append(f"href={href!r} names no element of the page")
    for match in re.finditer(r"url\(([^)]*)\)", html):
        target = match.group(1).strip("'\" ")
        if not target.startswith("#") or target[1:] not in page.ids:
            problems.append(f"url({target}) is not an element of the page")
    if re.search(r"@import", html):
        problems.append("CSS @import refers to another file")

    svgs = re.findall(r"<svg\b.*?</svg>", html, flags=re.S)
    if len(svgs) != page.svg_count:
        problems.append(f"{page.svg_count} <svg> elements but {len(svgs)} closed ones")
    charts = {}
    for index, svg in enumerate(svgs):
        try:
            tree = ElementTree.fromstring(svg)
        except ElementTree.ParseError as error:
            problems.append(f"svg #{index} is not well-formed XML: {error}")
            continue
        if "id" in tree.attrib:
            charts[tree.attrib["id"]] = tree
        if "data-points" in tree.attrib and \
                len(points_of(tree)) != int(tree.attrib["data-points"]):
            problems.append(f"svg #{index} says {tree.attrib['data-points']} "
                            f"points and draws {len(points_of(tree))}")
    if args.model_check:
        check_model_check(args, manifest, charts, page, problems, report_path)
    if args.bench:
        check_bench(args, manifest, charts, text, problems, report_path)
    if args.published:
        check_published(args, manifest, charts, page, problems, report_path)

    for table in manifest.get("selection", []):
        key = f"{table['network']} ep{table['ep']} ws{table['workspace']}"
        if key not in page.headings:
            problems.append(f"no heading names table {key}")
    for config in manifest.get("configs", []):
        if config["id"] not in page.headings and \
                not any(h.startswith(config["id"] + " ") for h in page.headings):
            problems.append(f"no heading names configuration {config['id']}")
    used = {i for config in manifest.get("configs", []) for i in config["kernels"]}
    for index, kernel in enumerate(manifest.get("kernels", [])):
        if index in used and kernel["name"] not in html:
            problems.append(f"kernel {kernel['name']} is not named")

    for problem in problems:
        print(f"{report_path}: {problem}")
    print(f"{report_path}: {len(manifest.get('selection', []))} tables, "
          f"{len(manifest.get('configs', []))} configurations, {len(svgs)} svg, "
          f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
