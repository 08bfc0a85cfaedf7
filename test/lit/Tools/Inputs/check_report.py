#!/usr/bin/env python3
"""Checks a `moec report` page against the bundle's manifest.

    check_report.py REPORT.html MANIFEST.json

The manifest (from `moec extract`) says what the page must name: every
selection table by its key ("flash ep4 ws1024") in a heading, every
configuration id, and every kernel name. The page must be self-contained
(no <script>, no <link>, no <img>/<iframe>/<object>, no src= at all, no
href= except to an anchor of the page itself, no url() in CSS other than a
reference to an element of the page) and every inline <svg> must be
well-formed XML. Prints one line per failure and exits 1 if there is any.
"""
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

    def handle_endtag(self, tag):
        if tag in ("h1", "h2", "h3") and self._heading is not None:
            self.headings.append(" ".join("".join(self._heading).split()))
            self._heading = None

    def handle_data(self, data):
        self.text.append(data)
        if self._heading is not None:
            self._heading.append(data)


def main():
    report_path, manifest_path = sys.argv[1], sys.argv[2]
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
    for index, svg in enumerate(svgs):
        try:
            ElementTree.fromstring(svg)
        except ElementTree.ParseError as error:
            problems.append(f"svg #{index} is not well-formed XML: {error}")

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
