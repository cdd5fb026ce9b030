"""The report's SVG charts: well-formed, escaped, honest about empty data."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from fabricwatch.report.svg import bar_chart, heatmap, line_chart, timelines


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)  # noqa: S314 - our own output, parsed to prove it is well-formed


def test_line_chart_draws_one_polyline_per_series() -> None:
    svg = line_chart("downs", {"a": [(0, 1), (10, 3), (20, 2)], "b": [(0, 0), (20, 5)]})
    root = parse(svg)
    polylines = root.findall(".//{http://www.w3.org/2000/svg}polyline")
    assert len(polylines) == 2
    # the highest point of series b touches the top of the plot area
    ys = [float(p.split(",")[1]) for p in polylines[1].attrib["points"].split()]
    assert min(ys) == 24.0


def test_text_is_escaped() -> None:
    svg = bar_chart("<script>", [("node<1>/mlx5_0:1", 3.0)])
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    parse(svg)


def test_empty_charts_say_so() -> None:
    for svg in (line_chart("x", {"a": []}), bar_chart("x", []), heatmap("x", [], [], {}),
                timelines("x", [])):
        assert "no data in this window" in svg
        parse(svg)


def test_heatmap_shades_hotter_cells_darker() -> None:
    svg = heatmap("h", ["SU1"], ["r0", "r1"], {("SU1", "r0"): 1.0, ("SU1", "r1"): 1000.0})
    rects = parse(svg).findall(".//{http://www.w3.org/2000/svg}rect")
    greens = [int(r.attrib["fill"].split(",")[1]) for r in rects]
    assert greens[0] > greens[1]


def test_timelines_one_lane_per_runbook() -> None:
    svg = timelines("t", [("wf1", [(0, 10, "isolate (done)"), (10, 20, "ladder:swap (done)")]),
                          ("wf2", [(5, 6, "budget (refused)")])])
    root = parse(svg)
    titles = [t.text for t in root.iter("{http://www.w3.org/2000/svg}title")]
    assert titles == ["isolate (done)", "ladder:swap (done)", "budget (refused)"]
