"""Small inline-SVG line charts: the report must render offline, with no JS or CDN."""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


@dataclass(frozen=True)
class Series:
    label: str
    xs: list[float]
    ys: list[float | None]
    dashed: bool = False


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        hi = lo + 1
    step = 10 ** math.floor(math.log10((hi - lo) / n))
    for m in (1, 2, 5, 10):
        if (hi - lo) / (step * m) <= n:
            step *= m
            break
    start = math.floor(lo / step) * step
    return [start + i * step for i in range(int((hi - start) / step) + 2) if start + i * step <= hi + step * 0.01]


def line_chart(
    title: str,
    series: list[Series],
    x_label: str,
    y_label: str,
    width: int = 520,
    height: int = 300,
    x_labels: list[str] | None = None,
) -> str:
    pts = [(x, y) for s in series for x, y in zip(s.xs, s.ys, strict=True) if y is not None and math.isfinite(y)]
    if not pts:
        return f'<figure><figcaption>{escape(title)}</figcaption><p class="empty">no data</p></figure>'
    left, right, top, bottom = 60, 20, 30, 45
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y1 = max(p[1] for p in pts) * 1.1 or 1.0
    x1 = x1 if x1 > x0 else x0 + 1
    sx = lambda x: left + (x - x0) / (x1 - x0) * (width - left - right)  # noqa: E731
    sy = lambda y: height - bottom - y / y1 * (height - top - bottom)  # noqa: E731
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="{escape(title)}"><rect width="100%" height="100%" fill="white"/>',
        f'<text x="{width / 2}" y="18" text-anchor="middle" font-weight="bold">{escape(title)}</text>',
    ]
    for t in _ticks(0, y1):
        out.append(
            f'<line x1="{left}" x2="{width - right}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" stroke="#eee"/>'
            f'<text x="{left - 5}" y="{sy(t) + 4:.1f}" text-anchor="end" font-size="11">{t:g}</text>'
        )
    xticks = sorted({p[0] for p in pts}) if len({p[0] for p in pts}) <= 12 else _ticks(x0, x1)
    if x_labels:  # x is an index into x_labels: label each tick by its own position, never by tick order
        xticks = sorted({round(t) for t in xticks if 0 <= round(t) < len(x_labels) and x0 <= round(t) <= x1})
    for t in xticks:
        label = x_labels[int(t)] if x_labels else f"{t:g}"
        out.append(
            f'<text x="{sx(t):.1f}" y="{height - bottom + 15}" text-anchor="middle" font-size="11">'
            f"{escape(label)}</text>"
        )
    out.append(
        f'<text x="{width / 2}" y="{height - 8}" text-anchor="middle" font-size="12">{escape(x_label)}</text>'
        f'<text x="14" y="{height / 2}" transform="rotate(-90 14 {height / 2})" text-anchor="middle" '
        f'font-size="12">{escape(y_label)}</text>'
        f'<line x1="{left}" x2="{left}" y1="{top}" y2="{height - bottom}" stroke="#333"/>'
        f'<line x1="{left}" x2="{width - right}" y1="{height - bottom}" y2="{height - bottom}" stroke="#333"/>'
    )
    for i, s in enumerate(series):
        colour = PALETTE[i % len(PALETTE)]
        xy = [(sx(x), sy(y)) for x, y in zip(s.xs, s.ys, strict=True) if y is not None and math.isfinite(y)]
        if not xy:
            continue
        dash = ' stroke-dasharray="6 4"' if s.dashed else ""
        out.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="2"{dash} points="'
            + " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
            + '"/>'
        )
        if len(xy) <= 30:
            out += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>' for x, y in xy]
        out.append(
            f'<text x="{left + 10}" y="{top + 14 + 14 * i}" font-size="11" fill="{colour}">{escape(s.label)}</text>'
        )
    out.append("</svg>")
    return f"<figure>{''.join(out)}</figure>"


def stacked_bars(title: str, labels: list[str], parts: dict[str, list[float]], y_label: str) -> str:
    """One bar per label, stacked by part (shares of step time): the breakdown per scale."""
    if not labels:
        return f'<figure><figcaption>{escape(title)}</figcaption><p class="empty">no data</p></figure>'
    width, height, left, right, top, bottom = 520, 300, 60, 130, 30, 45
    totals = [sum(v[i] for v in parts.values()) for i in range(len(labels))]
    y1 = max(max(totals), 1e-9)
    band = (width - left - right) / len(labels)
    sy = lambda y: (height - top - bottom) * y / y1  # noqa: E731
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="{escape(title)}"><rect width="100%" height="100%" fill="white"/>',
        f'<text x="{width / 2}" y="18" text-anchor="middle" font-weight="bold">{escape(title)}</text>',
        f'<text x="14" y="{height / 2}" transform="rotate(-90 14 {height / 2})" text-anchor="middle" '
        f'font-size="12">{escape(y_label)}</text>',
    ]
    for t in _ticks(0, y1):
        y = height - bottom - sy(t)
        out.append(
            f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>'
            f'<text x="{left - 5}" y="{y + 4:.1f}" text-anchor="end" font-size="11">{t:g}</text>'
        )
    for i, label in enumerate(labels):
        x, base = left + i * band + band * 0.15, height - bottom
        for k, values in enumerate(parts.values()):
            h = sy(values[i])
            out.append(
                f'<rect x="{x:.1f}" y="{base - h:.1f}" width="{band * 0.7:.1f}" height="{h:.1f}" '
                f'fill="{PALETTE[k % len(PALETTE)]}"/>'
            )
            base -= h
        out.append(
            f'<text x="{x + band * 0.35:.1f}" y="{height - bottom + 15}" text-anchor="middle" '
            f'font-size="11">{escape(label)}</text>'
        )
    for k, name in enumerate(parts):
        out.append(
            f'<rect x="{width - right + 10}" y="{top + 14 * k}" width="10" height="10" '
            f'fill="{PALETTE[k % len(PALETTE)]}"/><text x="{width - right + 24}" y="{top + 9 + 14 * k}" '
            f'font-size="11">{escape(name)}</text>'
        )
    out.append("</svg>")
    return f"<figure>{''.join(out)}</figure>"
