"""The report's storage section: fio's probe curve and ceiling, per-GPU demand, the projection of
demand against the ceiling from 1 to 1024 GPUs with the knee marked, and the ceiling's history."""

from __future__ import annotations

import json
import math

import pandas as pd
from markupsafe import Markup

from bench.report.plots import Series, line_chart

PROJECTION_MAX_GPUS = 1024


def _num(v, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return "—"
    return f"{v:.{digits}g}" if isinstance(v, float) else str(v)


def _probe_tool(probe: dict) -> tuple[str, str]:
    """(what the probe read with, what one of its readers is called): fio's jobs over a file system, GET
    streams over S3 (bench.storage.s3_probe's method says `s3 ...`)."""
    if str(probe.get("method", "")).startswith("s3"):
        return "S3 GET", "parallel GET streams"
    return "fio", "parallel fio jobs"


def _probe_chart(probe: dict) -> str:
    levels = probe["levels"]
    series = [Series("read MB/s", [lv["jobs"] for lv in levels], [lv["mb_s"] for lv in levels])]
    repeat = probe.get("repeat")  # absent from probes written before the best level was read twice
    if repeat:
        series.append(Series(f"best level again: {repeat['mb_s']:.1f} MB/s", [repeat["jobs"]], [repeat["mb_s"]]))
    return line_chart(
        f"storage probe ({probe['method']}): ceiling {probe['ceiling_mb_s']:.1f} MB/s",
        series,
        _probe_tool(probe)[1],
        "MB/s",
    )


def _scale_nodes(row: dict) -> int:
    """The nodes a scale's ranks ran on (distinct hosts of its per-rank breakdown; one where unknown)."""
    try:
        ranks = json.loads(row.get("rank_breakdown") or "[]")
    except (TypeError, ValueError):
        ranks = []
    return max(1, len({r.get("host") for r in ranks if isinstance(r, dict)}))


def _nodes_chart(probe: dict, frame: pd.DataFrame) -> str:
    """The probe's aggregate MB/s against nodes reading at once (and its slowest node), beside each scale's
    epoch-1 read MB/s at the nodes it trained on: how far the training's demand sits under what the
    nodes can read together, and whether the store or each node's own path stops the climb."""
    curve = probe["aggregate"]
    xs = [a["nodes"] for a in curve]
    series = [
        Series(f"{_probe_tool(probe)[0]} aggregate ({probe['bound']} bound)", xs, [a["mb_s"] for a in curve]),
        Series("slowest node", xs, [a["min_node_mb_s"] for a in curve], dashed=True),
    ]
    usable = frame[pd.to_numeric(frame.get("avg_read_mb_s"), errors="coerce").notna()] if len(frame) else frame
    for workload, rows in usable.groupby("workload", sort=False) if len(usable) else []:
        points = sorted((_scale_nodes(r), float(r["avg_read_mb_s"]), int(r["gpus"])) for r in rows.to_dict("records"))
        label = f"{workload} epoch 1 ({', '.join(f'{g} GPU(s)' for _, _, g in points)})"
        series.append(Series(label, [n for n, _, _ in points], [m for _, m, _ in points]))
    return line_chart(
        f"storage read from {max(xs)} node(s) at once: one node {probe['per_node_mb_s']:.1f} MB/s",
        series,
        "nodes reading at once",
        "MB/s",
        integer_x=True,
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
        x_labels=[str(n) for n in counts],
    )


def _history_chart(probes: pd.DataFrame, probe: dict, suite_run_id: str) -> str:
    h = probes[probes["conclusive"].fillna(False).astype(bool) & (probes["suite_run_id"] != suite_run_id)]
    points = [(str(t)[:10], float(c)) for t, c in zip(h["probed_at"], h["ceiling_mb_s"], strict=True)]
    if probe["conclusive"]:
        points.append((str(probe["probed_at"])[:10], probe["ceiling_mb_s"]))
    if len(points) < 2:
        return ""
    series = [Series(f"{_probe_tool(probe)[0]} ceiling MB/s", list(range(len(points))), [c for _, c in points])]
    if probe.get("history_median"):
        series.append(Series("history median", [0, len(points) - 1], [probe["history_median"]] * 2, dashed=True))
    if probe.get("regression_floor_mb_s"):  # judged only from MIN_HISTORY accepted probes on
        floor = probe["regression_floor_mb_s"]
        series.append(Series("regression floor", [0, len(points) - 1], [floor] * 2, dashed=True))
    return line_chart("storage ceiling history", series, "suite run", "MB/s", x_labels=[d for d, _ in points])


def context(frame: pd.DataFrame, probe: dict | None, probes: pd.DataFrame, suite_run_id: str) -> dict:
    """The storage section's values for the report template; says plainly what could not be sized."""
    rows = frame[frame["per_gpu_read_mb_s"].notna()] if "per_gpu_read_mb_s" in frame else frame.iloc[0:0]
    demand = [
        [
            r["workload"],
            int(r["gpus"]),
            _num(r["per_gpu_read_mb_s"]),
            _num(r.get("per_gpu_peak_mb_s")),
            _num(r.get("img_s_per_gpu")),
            _num(r.get("bytes_per_image")),
        ]
        for r in rows.to_dict("records")
    ]
    sized_rows = frame[frame["supported_gpus"].notna()].to_dict("records") if "supported_gpus" in frame else []
    sized = [
        {
            "workload": s["workload"],
            "demand": _num(s["per_gpu_read_mb_s"]),
            "gpus": int(s["gpus"]),
            "supported": int(s["supported_gpus"]),
            "peak": _num(s.get("supported_gpus_peak")),
            "au": _num(s.get("supported_gpus_au")),
            "planned": _num(s.get("min_supported_gpus")),
            "binds": (
                f"{s.get('storage_bound') or 'client'} ({_num(s.get('storage_ceiling_mb_s'))} MB/s "
                f"on {_num(s.get('probe_nodes'))} node(s))"
            ),
        }
        for s in sized_rows
    ]
    shown = None
    charts = []
    if probe is not None:
        paths = json.loads(probe["paths"]) if isinstance(probe["paths"], str) else probe["paths"]
        reads = [*probe["levels"], *([probe["repeat"]] if probe.get("repeat") else [])]
        # "fresh" is absent from probes written before reads were kept apart: unknown, not a re-read
        rereads = sum(1 for lv in reads if lv.get("fresh") is False)
        shown = {**probe, "paths": paths, "rereads": rereads, "reads": len(reads), "tool": _probe_tool(probe)[0]}
        charts.append(_probe_chart(probe))
        if probe.get("aggregate"):  # absent from probes written before the multi-node probe
            charts.append(_nodes_chart(probe, frame))
        if sized_rows:
            charts.append(_projection_chart(sized_rows, probe["ceiling_mb_s"]))
        history = _history_chart(probes, probe, suite_run_id)
        if history:
            charts.append(history)
    return {"probe": shown, "sized": sized, "demand": demand, "storage_charts": [Markup(c) for c in charts]}
