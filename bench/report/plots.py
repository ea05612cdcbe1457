"""Charts for the report and the dashboard, drawn by matplotlib as inline SVG.

Inline SVG because both pages must render with nothing from the network (a worker's file, a page
behind Airflow's login): no JavaScript chart library, no CDN. Text stays SVG text in the viewer's own
sans-serif (searchable, and what the tests read). Each function returns the SVG markup of one figure,
for a template to place.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
SIZE = (5.6, 3.2)  # inches at 96 dpi: 540 x 310 px, two across a laptop screen


@dataclass(frozen=True)
class Series:
    label: str
    xs: Sequence[float]
    ys: Sequence[float | None]
    dashed: bool = False


def _finite(xs, ys) -> tuple[list[float], list[float]]:
    pairs = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None and math.isfinite(y)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _figure(title: str):
    import matplotlib

    matplotlib.use("Agg")  # no display on a worker
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "axes.titlesize": 10, "axes.titleweight": "bold"})
    fig, ax = plt.subplots(figsize=SIZE, dpi=96)
    ax.set_title(title)
    ax.grid(True, color="#eee")
    return fig, ax


def _svg(fig, title: str) -> str:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Title": title})
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]  # inline: no XML prolog or DOCTYPE


def empty(title: str, why: str = "no data") -> str:
    fig, ax = _figure(title)
    ax.axis("off")
    ax.text(0.5, 0.5, why, ha="center", va="center", color="#888", transform=ax.transAxes)
    return _svg(fig, title)


def line_chart(
    title: str,
    series: list[Series],
    x_label: str,
    y_label: str,
    x_labels: list[str] | None = None,
    integer_x: bool = False,
) -> str:
    """Lines with markers where there are few points; x_labels name the positions 0..n-1."""
    if not any(_finite(s.xs, s.ys)[0] for s in series):
        return empty(title)
    fig, ax = _figure(title)
    for i, s in enumerate(series):
        xs, ys = _finite(s.xs, s.ys)
        if not xs:
            continue
        ax.plot(
            xs,
            ys,
            color=PALETTE[i % len(PALETTE)],
            linestyle="--" if s.dashed else "-",
            marker="o" if len(xs) <= 30 else None,
            markersize=3.5,
            linewidth=1.6,
            label=s.label,
        )
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.set_ylim(bottom=0)
    if x_labels:
        ticks = sorted({int(x) for s in series for x in _finite(s.xs, s.ys)[0]})
        step = max(1, math.ceil(len(ticks) / 8))
        ax.set_xticks(ticks[::step], [x_labels[t] for t in ticks[::step]], rotation=30, ha="right")
    elif integer_x:
        ax.set_xticks(sorted({x for s in series for x in _finite(s.xs, s.ys)[0]}))
    ax.legend(loc="best", fontsize=8, frameon=False)
    return _svg(fig, title)


def stacked_bars(title: str, labels: list[str], parts: dict[str, list[float]], y_label: str) -> str:
    """One bar per label, stacked by part: where step time goes at each scale."""
    if not labels:
        return empty(title)
    fig, ax = _figure(title)
    base = [0.0] * len(labels)
    for k, (name, values) in enumerate(parts.items()):
        ax.bar(labels, values, bottom=base, color=PALETTE[k % len(PALETTE)], label=name, width=0.6)
        base = [b + v for b, v in zip(base, values, strict=True)]
    ax.set_ylabel(y_label)
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False)
    return _svg(fig, title)


@dataclass(frozen=True)
class Marker:
    """A change point on a trend: the first run at the new level, with its size."""

    x: float
    change: float
    label: str


def trend_chart(
    title: str,
    xs: Sequence[float],
    ys: Sequence[float | None],
    x_labels: list[str],
    y_label: str,
    band: tuple[Sequence[float | None], Sequence[float | None]] | None = None,
    bound: Sequence[float | None] | None = None,
    markers: Sequence[Marker] = (),
    rejected: tuple[Sequence[float], Sequence[float]] | None = None,
    outliers: tuple[Sequence[float], Sequence[float]] | None = None,
) -> str:
    """One figure of one series over weekly runs: the accepted points, the history band (the floor the
    regression check used), the bound, runs not accepted (hollow), one-week outliers (crosses: set aside,
    never change points) and change points (vertical lines, with their annotation where one was made)."""
    px, py = _finite(xs, ys)
    if not px and not (rejected and rejected[0]):
        return empty(title)
    fig, ax = _figure(title)
    # gids name the groups in the SVG: what the dashboard's tests count against the store
    ax.plot(px, py, color=PALETTE[0], marker="o", markersize=3, linewidth=1.4, label="accepted runs", gid="accepted")
    if band is not None:
        lo, hi = band
        pts = [
            (x, a, b)
            for x, a, b in zip(xs, lo, hi, strict=True)
            if a is not None and b is not None and math.isfinite(a) and math.isfinite(b)
        ]
        if pts:
            ax.fill_between(
                [p[0] for p in pts],
                [p[1] for p in pts],
                [p[2] for p in pts],
                color=PALETTE[0],
                alpha=0.12,
                label="history band (floor..median)",
            )
    if bound is not None:
        bx, by = _finite(xs, bound)
        if bx:
            ax.step(bx, by, where="mid", color=PALETTE[1], linestyle="--", linewidth=1.2, label="bound")
    if rejected and rejected[0]:
        ax.scatter(
            rejected[0], rejected[1], facecolors="none", edgecolors="#888", s=18, label="not accepted", gid="rejected"
        )
    if outliers and outliers[0]:
        ax.scatter(
            outliers[0], outliers[1], marker="x", color=PALETTE[1], s=28, label="one-week outlier", gid="outlier"
        )
    for k, m in enumerate(markers):
        colour = PALETTE[1] if m.change < 0 else PALETTE[2]
        ax.axvline(m.x, color=colour, linewidth=1.2, alpha=0.8, gid=f"change-point-{k}")
        noted = f" {m.label}" if m.label in ("expected", "explained") else ""
        ax.annotate(
            f"{m.change:+.1%}{noted}",
            (m.x, 1.0),
            xycoords=("data", "axes fraction"),
            color=colour,
            fontsize=8,
            ha="left",
            va="top",
            xytext=(2, -2),
            textcoords="offset points",
        )
    ax.set_ylabel(y_label)
    ax.set_ylim(bottom=0)
    ticks = sorted({int(x) for x in list(px) + list(rejected[0] if rejected else [])})
    step = max(1, math.ceil(len(ticks) / 8))
    ax.set_xticks(ticks[::step], [x_labels[t] for t in ticks[::step]], rotation=30, ha="right")
    ax.legend(loc="lower left", fontsize=7, frameon=False)
    return _svg(fig, title)
