"""Small, dependency-free SVG charts for the HTML report: lines, bars, a heatmap, timelines.

Pure functions from data to an SVG string; every text value is escaped. They draw what a
person would rather look at than read, and nothing more: no interactivity, no JavaScript.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape

PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777",
           "#4b5563")
WIDTH, HEIGHT = 760, 260
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 24, 40


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1e6 or abs(value) < 1e-2:
        return f"{value:.1e}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _empty(title: str, message: str = "no data in this window") -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="60" role="img">'
            f'<text x="8" y="20" font-weight="bold">{escape(title)}</text>'
            f'<text x="8" y="44" fill="#6b7280">{escape(message)}</text></svg>')


def line_chart(title: str, series: Mapping[str, Sequence[tuple[float, float]]], *,
               x_label: str = "", y_label: str = "", x_ticks: Sequence[tuple[float, str]] = ()
               ) -> str:
    """One line per series of (x, y) points; x is usually epoch seconds."""
    points = [p for values in series.values() for p in values]
    if not points:
        return _empty(title)
    if not any(p[1] for p in points):
        return _empty(title, "none in this window")  # every bin zero: nothing to draw
    x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
    y1 = max(max(p[1] for p in points), 1e-12)
    x1 = x1 if x1 > x0 else x0 + 1
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def sx(x: float) -> float:
        return LEFT + (x - x0) / (x1 - x0) * plot_w

    def sy(y: float) -> float:
        return TOP + plot_h - y / y1 * plot_h

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
             f'role="img" font-family="sans-serif" font-size="11">',
             f'<text x="{LEFT}" y="14" font-weight="bold" font-size="13">{escape(title)}</text>',
             f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{WIDTH - RIGHT}" y2="{TOP + plot_h}" '
             f'stroke="#9ca3af"/>',
             f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}" stroke="#9ca3af"/>']
    for frac in (0.0, 0.5, 1.0):
        y = frac * y1
        parts.append(f'<text x="{LEFT - 4}" y="{sy(y) + 4:.1f}" text-anchor="end">'
                     f'{_fmt(y)}</text>')
    for x, label in x_ticks:
        if x0 <= x <= x1:
            parts.append(f'<text x="{sx(x):.1f}" y="{TOP + plot_h + 14}" text-anchor="middle">'
                         f'{escape(label)}</text>')
    if x_label:
        parts.append(f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 6}" text-anchor="middle" '
                     f'fill="#4b5563">{escape(x_label)}</text>')
    if y_label:
        parts.append(f'<text x="12" y="{TOP + plot_h / 2}" transform="rotate(-90 12 '
                     f'{TOP + plot_h / 2})" text-anchor="middle" fill="#4b5563">'
                     f'{escape(y_label)}</text>')
    for i, (name, values) in enumerate(series.items()):
        colour = PALETTE[i % len(PALETTE)]
        ordered = sorted(values)
        if len(ordered) == 1:
            x, y = ordered[0]
            parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{colour}"/>')
        else:
            path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in ordered)
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.6" '
                         f'points="{path}"/>')
        parts.append(f'<text x="{WIDTH - RIGHT - 4}" y="{TOP + 12 + 13 * i}" text-anchor="end" '
                     f'fill="{colour}">{escape(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def bar_chart(title: str, bars: Sequence[tuple[str, float]], *, unit: str = "") -> str:
    """Horizontal bars, one per (label, value), longest first as given."""
    if not bars:
        return _empty(title)
    row_h, label_w = 18, 220
    height = TOP + row_h * len(bars) + 12
    top = max(max(v for _, v in bars), 1e-12)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
             f'role="img" font-family="sans-serif" font-size="11">',
             f'<text x="8" y="14" font-weight="bold" font-size="13">{escape(title)}</text>']
    span = WIDTH - label_w - 90
    for i, (label, value) in enumerate(bars):
        y = TOP + i * row_h
        w = max(1.0, value / top * span)
        parts.append(f'<text x="{label_w - 6}" y="{y + 12}" text-anchor="end">'
                     f'{escape(label[:40])}</text>'
                     f'<rect x="{label_w}" y="{y + 2}" width="{w:.1f}" height="{row_h - 5}" '
                     f'fill="{PALETTE[0]}"/>'
                     f'<text x="{label_w + w + 4:.1f}" y="{y + 12}">{_fmt(value)}'
                     f'{escape(unit)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def heatmap(title: str, rows: Sequence[str], cols: Sequence[str],
            values: Mapping[tuple[str, str], float], *, row_label: str = "",
            col_label: str = "") -> str:
    """A grid of cells shaded by value (log scale, so one hot cell does not wash out the rest)."""
    if not rows or not cols:
        return _empty(title)
    cell = max(12, min(36, (WIDTH - 120) // max(len(cols), 1)))
    height = TOP + 30 + cell * len(rows) + 10
    width = max(WIDTH, 110 + cell * len(cols))
    top = max(values.values(), default=0.0)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" font-family="sans-serif" font-size="10">',
             f'<text x="8" y="14" font-weight="bold" font-size="13">{escape(title)}</text>',
             f'<text x="100" y="{TOP + 8}" fill="#4b5563">{escape(col_label)}</text>',
             f'<text x="8" y="{TOP + 8}" fill="#4b5563">{escape(row_label)}</text>']
    for j, col in enumerate(cols):
        parts.append(f'<text x="{100 + j * cell + cell / 2:.1f}" y="{TOP + 24}" '
                     f'text-anchor="middle">{escape(col)}</text>')
    for i, row in enumerate(rows):
        y = TOP + 30 + i * cell
        parts.append(f'<text x="94" y="{y + cell * 0.65:.1f}" text-anchor="end">'
                     f'{escape(row)}</text>')
        for j, col in enumerate(cols):
            value = values.get((row, col), 0.0)
            shade = 0.0 if top <= 0 or value <= 0 else math.log1p(value) / math.log1p(top)
            red = int(255 - 35 * shade)
            green = int(255 - 200 * shade)
            blue = int(255 - 220 * shade)
            parts.append(f'<rect x="{100 + j * cell}" y="{y}" width="{cell - 1}" '
                         f'height="{cell - 1}" fill="rgb({red},{green},{blue})">'
                         f'<title>{escape(f"{row} {col}: {_fmt(value)}")}</title></rect>')
    parts.append("</svg>")
    return "".join(parts)


def timelines(title: str, lanes: Sequence[tuple[str, Sequence[tuple[float, float, str]]]]
              ) -> str:
    """One lane per runbook: (start, end, step) segments on a shared time axis (seconds)."""
    segments = [s for _, segs in lanes for s in segs]
    if not segments:
        return _empty(title)
    t0 = min(s[0] for s in segments)
    t1 = max(max(s[1] for s in segments), t0 + 1)
    lane_h, label_w = 22, 250
    height = TOP + lane_h * len(lanes) + 30
    span = WIDTH - label_w - RIGHT
    steps = sorted({s[2].split(":")[0] for s in segments})
    colour = {step: PALETTE[i % len(PALETTE)] for i, step in enumerate(steps)}
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
             f'role="img" font-family="sans-serif" font-size="10">',
             f'<text x="8" y="14" font-weight="bold" font-size="13">{escape(title)}</text>']
    for i, (name, segs) in enumerate(lanes):
        y = TOP + i * lane_h
        parts.append(f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end">'
                     f'{escape(name[-44:])}</text>')
        for start, end, step in segs:
            x = label_w + (start - t0) / (t1 - t0) * span
            w = max(2.0, (end - start) / (t1 - t0) * span)
            parts.append(f'<rect x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="{lane_h - 7}" '
                         f'fill="{colour[step.split(":")[0]]}"><title>{escape(step)}</title>'
                         f'</rect>')
    legend_y = TOP + lane_h * len(lanes) + 16
    for k, step in enumerate(steps):
        parts.append(f'<rect x="{label_w + k * 90}" y="{legend_y - 9}" width="10" height="10" '
                     f'fill="{colour[step]}"/><text x="{label_w + k * 90 + 14}" '
                     f'y="{legend_y}">{escape(step)}</text>')
    parts.append(f'<text x="{WIDTH - RIGHT}" y="{legend_y}" text-anchor="end" fill="#4b5563">'
                 f'{escape(f"{t1 - t0:,.0f} s")}</text></svg>')
    return "".join(parts)
