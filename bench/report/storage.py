"""The report's storage section: fio's probe curve and ceiling, per-GPU demand, the projection of
demand against the ceiling from 1 to 1024 GPUs with the knee marked, and the ceiling's history."""

from __future__ import annotations

import json
import math
from html import escape

import pandas as pd

from bench.report.svg import Series, line_chart

PROJECTION_MAX_GPUS = 1024


def _num(v, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return "—"
    return f"{v:.{digits}g}" if isinstance(v, float) else escape(str(v))


def _probe_chart(probe: dict) -> str:
    levels = probe["levels"]
    return line_chart(
        f"storage probe: fio cold reads ({probe['method']}), ceiling {probe['ceiling_mb_s']:.1f} MB/s",
        [Series("read MB/s", [lv["jobs"] for lv in levels], [lv["mb_s"] for lv in levels])],
        "parallel fio jobs",
        "MB/s",
    )


def _projection_chart(sized: list[dict], ceiling: float) -> str:
    counts = [2**i for i in range(int(math.log2(PROJECTION_MAX_GPUS)) + 1)]
    xs = list(range(len(counts)))
    series = [Series(f"storage ceiling {ceiling:.0f} MB/s", xs, [ceiling] * len(xs), dashed=True)]
    for s in sized:
        d = s["per_gpu_read_mb_s"]
        series.append(Series(f"{s['workload']}: N x {d:.2f} MB/s", xs, [n * d for n in counts]))
        if s["supported_gpus"]:  # the knee: where demand meets the ceiling
            knee = math.log2(max(s["supported_gpus"], 1))
            series.append(
                Series(f"{s['workload']}: knee at {s['supported_gpus']} GPUs", [knee, knee], [0.0, ceiling], True)
            )
    return line_chart(
        "projected epoch-1 read demand vs the storage ceiling",
        series,
        "GPUs",
        "MB/s",
        width=620,
        x_labels=[str(n) for n in counts],
    )


def _history_chart(probes: pd.DataFrame, probe: dict, suite_run_id: str) -> str:
    h = probes[probes["conclusive"].fillna(False).astype(bool) & (probes["suite_run_id"] != suite_run_id)]
    points = [(str(t)[:10], float(c)) for t, c in zip(h["probed_at"], h["ceiling_mb_s"], strict=True)]
    if probe["conclusive"]:
        points.append((str(probe["probed_at"])[:10], probe["ceiling_mb_s"]))
    if len(points) < 2:
        return ""
    series = [Series("fio ceiling MB/s", list(range(len(points))), [c for _, c in points])]
    if probe.get("history_median"):
        series.append(Series("history median", [0, len(points) - 1], [probe["history_median"]] * 2, dashed=True))
    if probe.get("regression_floor_mb_s"):  # judged only from MIN_HISTORY accepted probes on
        floor = probe["regression_floor_mb_s"]
        series.append(Series("regression floor", [0, len(points) - 1], [floor] * 2, dashed=True))
    return line_chart("storage ceiling history", series, "suite run", "MB/s", x_labels=[d for d, _ in points])


def section(frame: pd.DataFrame, probe: dict | None, probes: pd.DataFrame, suite_run_id: str) -> str:
    """HTML for the storage section; says plainly what could not be sized and why."""
    rows = frame[frame["per_gpu_read_mb_s"].notna()] if "per_gpu_read_mb_s" in frame else frame.iloc[0:0]
    demand = "".join(
        f"<tr><td>{escape(r['workload'])}</td><td>{int(r['gpus'])}</td><td>{_num(r['per_gpu_read_mb_s'])}</td>"
        f"<td>{_num(r.get('per_gpu_peak_mb_s'))}</td><td>{_num(r.get('img_s_per_gpu'))}</td>"
        f"<td>{_num(r.get('bytes_per_image'))}</td></tr>"
        for r in rows.to_dict("records")
    )
    parts = ["<h2>Storage sizing</h2>"]
    if probe is None:
        parts.append(
            "<p class=warn>No storage probe result for this run (probe off, or it failed: see the task log).</p>"
        )
    else:
        note = "" if probe["conclusive"] else f" <span class=warn>inconclusive: {escape(probe['reason'])}</span>"
        paths = json.loads(probe["paths"]) if isinstance(probe["paths"], str) else probe["paths"]
        parts.append(
            f"<p>fio ceiling <b>{probe['ceiling_mb_s']:.1f} MB/s</b> ({escape(probe['method'])} reads, block "
            f"{probe['block_size']} B, {probe['sample_files']} files, {probe['sample_bytes'] / 1e6:.1f} MB sampled "
            f"from {escape(', '.join(paths))})"
            f"{note}.</p>"
        )
    sized = []
    if "supported_gpus" in frame:
        for r in frame[frame["supported_gpus"].notna()].to_dict("records"):
            sized.append(r)
    if sized:
        rows_html = "".join(
            f"<tr><td>{escape(s['workload'])}</td><td>{_num(s['per_gpu_read_mb_s'])} (at {int(s['gpus'])})</td>"
            f"<td><b>{int(s['supported_gpus'])}</b></td><td>{_num(s.get('supported_gpus_peak'))}</td>"
            f"<td>{_num(s.get('supported_gpus_au'))}</td><td>{_num(s.get('min_supported_gpus'))}</td></tr>"
            for s in sized
        )
        parts.append(
            "<table><tr><th>workload</th><th>demand MB/s per GPU (largest, at GPUs)</th><th>GPUs fed (avg)</th>"
            f"<th>GPUs fed (peak)</th><th>GPUs fed at 90% AU</th><th>planned</th></tr>{rows_html}</table>"
        )
    elif probe is not None:
        parts.append(
            "<p class=warn>Not sized: no scale has a valid, cache-free epoch-1 read rate"
            + ("" if probe["conclusive"] else " and the probe is inconclusive")
            + ".</p>"
        )
    if demand:
        parts.append(
            "<table><tr><th>workload</th><th>GPUs</th><th>avg MB/s per GPU</th><th>peak MB/s per GPU</th>"
            f"<th>images/s per GPU</th><th>bytes per image</th></tr>{demand}</table>"
        )
    charts = []
    if probe is not None:
        charts.append(_probe_chart(probe))
        if sized:
            charts.append(_projection_chart(sized, probe["ceiling_mb_s"]))
        charts.append(_history_chart(probes, probe, suite_run_id))
    parts.append(f'<div class="grid">{"".join(charts)}</div>')
    return "".join(parts)
