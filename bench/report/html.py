"""The per-run offline HTML report: the reference study's figures, plus the verdict and history.

The page is the Jinja2 template `templates/report.html` (autoescaped); this module turns the
evaluation into the plain values and matplotlib charts it shows.
"""

from __future__ import annotations

import itertools
import json
import os
from datetime import datetime
from pathlib import Path

import pandas as pd
from markupsafe import Markup

from bench.analysis.verdict import bounds
from bench.analysis.verdict.evaluate import Evaluation
from bench.config.models import SweepConfig
from bench.env.fingerprint import storage_under_test
from bench.report.plots import Series, line_chart, stacked_bars
from bench.safe_fs import write_file


def _num(v, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return "—"
    return f"{v:.{digits}g}" if isinstance(v, float) else str(v)


def _bandwidth_cell(r: dict) -> str:
    """yes, or no with the reason: a figure the suite cannot stand behind says why."""
    if r.get("bandwidth_valid") is True:
        return "yes"
    note = r.get("bandwidth_note")
    return "no" + (f": {note}" if isinstance(note, str) and note else "")


def _why(r: dict) -> str:
    reason = r.get("inconclusive_reason")
    if isinstance(reason, str) and reason:
        return reason
    if r.get("state") != "COMPLETED":
        return str(r.get("state"))
    return _second_run_note(r)


def _second_run_note(r: dict) -> str:
    """Why a row whose shown (first-run) efficiency is under its bound still passed: its second run met
    the bound (a bound miss is FAILED only when both runs miss it; bench.analysis.verdict.expectations.
    with_second_run). Without it the table would show a pass beside a figure under its bound."""
    figures = [r.get(k) for k in ("scaling_efficiency", "repeat_scaling_efficiency", "min_scaling_efficiency")]
    first, again, bound = figures
    if r.get("verdict") != "pass" or not all(isinstance(x, int | float) and pd.notna(x) for x in figures):
        return ""
    name = bounds.SCALING_EFFICIENCY
    if bounds.meets(name, first, bound) or not bounds.meets(name, again, bound):
        return ""
    return f"first run {first:.3f} under the {bound:.2f} bound; the second run {again:.3f} met it: passed"


def _with_interval(value, low, high) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "—"
    if low is None or high is None or pd.isna(low) or pd.isna(high):
        return _num(value, 4)
    return f"{_num(value, 4)} [{_num(low, 4)}, {_num(high, 4)}]"


# (header, cell) per column: two tables of a dozen columns each fit the page.
SCALING_COLUMNS = [
    ("workload", lambda r: _num(r["workload"])),
    ("GPUs", lambda r: _num(r["gpus"])),
    ("verdict", lambda r: _num(r.get("verdict"))),
    ("why", lambda r: _why(r)),
    (
        "images/s [95% CI]",
        lambda r: _with_interval(r["throughput_img_s"], r.get("throughput_ci_low"), r.get("throughput_ci_high")),
    ),
    (
        "scaling efficiency [95% CI]",
        lambda r: _with_interval(
            r.get("scaling_efficiency"), r.get("scaling_efficiency_ci_low"), r.get("scaling_efficiency_ci_high")
        ),
    ),
    ("against", lambda r: _num(r.get("ideal")) if isinstance(r.get("ideal"), str) else "linear"),
    ("bound", lambda r: _num(r.get("min_scaling_efficiency"))),
    ("linear eff.", lambda r: _num(r.get("linear_efficiency"))),
    ("node ceiling images/s", lambda r: _num(r.get("independent_img_s"))),
    (
        "expected images/s (binds; allreduce ms)",
        lambda r: (
            f"{_num(r.get('expected_img_s'))} ({r['expected_bound_by']}{_allreduce_cell(r)})"
            if isinstance(r.get("expected_bound_by"), str) and r.get("expected_bound_by")
            else "—"
        ),
    ),
    ("measured / expected", lambda r: _num(r.get("efficiency_vs_expected"))),
    ("borderline", lambda r: "yes" if r.get("borderline") is True else ""),
    ("measured s", lambda r: _num(r.get("measured_s"))),
    ("step spread", lambda r: _num(r.get("step_time_spread"))),
    ("oversubscribed", lambda r: "yes" if r.get("oversubscribed") is True else ""),
    ("regression floor", lambda r: _regression_cell(r)),
    ("bottleneck", lambda r: _bottleneck_cell(r)),
]


def _allreduce_cell(r: dict) -> str:
    """The scale's own allreduce probe ("; allreduce 1.7 ms at 1.4 GB/s bus"), "" where none ran."""
    seconds, bus = r.get("allreduce_s"), r.get("allreduce_bus_gb_s")
    if not isinstance(seconds, float) or pd.isna(seconds):
        return ""
    at = f" at {_num(bus)} GB/s bus" if isinstance(bus, float) and not pd.isna(bus) else ""
    return f"; allreduce {_num(seconds * 1e3)} ms{at}"


def _bottleneck_cell(r: dict) -> str:
    cause = r.get("bottleneck")
    if not isinstance(cause, str) or not cause:
        return ""
    confirmed = " (confirmed by reruns)" if r.get("cause_check") == "confirmed" else ""
    return f"{cause}{confirmed}: {r.get('bottleneck_evidence') or ''}"


def _breakdown_charts(frame: pd.DataFrame) -> list[str]:
    """Stacked shares of step time per scale, beside the throughput chart of the same workload."""
    charts = []
    for workload, g in frame.groupby("workload"):
        g = g[g["data_wait_share"].notna()].sort_values("gpus") if "data_wait_share" in g else g.iloc[0:0]
        if g.empty:
            continue
        compute, wait, comm = g["compute_share"].tolist(), g["data_wait_share"].tolist(), g["comm_share"].tolist()
        other = [max(0.0, 1 - a - b - c) for a, b, c in zip(compute, wait, comm, strict=True)]
        charts.append(
            stacked_bars(
                f"{workload}: where step time goes",
                [f"{int(n)} GPU{'s' if n > 1 else ''}" for n in g["gpus"]],
                {"compute": compute, "data wait": wait, "exposed comm.": comm, "other": other},
                "share of step time",
            )
        )
    return charts


def _noise_note(r: dict) -> str:
    """The noise model's part (issue 54): the series' spread, a regressed row's drop interval, or that
    the series is too short for it (the fixed tolerance judged)."""
    cv, low, high = r.get("noise_cv"), r.get("drop_ci_low"), r.get("drop_ci_high")
    if cv is None or pd.isna(cv):
        return "; fixed tolerance: too few runs for the noise model"
    note = f"; spread {cv:.1%}"
    return note if low is None or pd.isna(low) else f"{note}; drop {low:.1%} to {high:.1%} (95%)"


def _regression_cell(r: dict) -> str:
    """The floor this row was held to, the tolerance it used (widened to the series' noise) and why not."""
    floor, used, n = r.get("regression_floor"), r.get("regression_tolerance_used"), r.get("history_n")
    if floor is None or pd.isna(floor):
        return "—" if n is None or pd.isna(n) else f"not judged: {int(n)} of 3 runs of history"
    cell = f"{_num(floor, 4)} (−{used:.0%}, {int(n)} runs{_noise_note(r)})"
    second = r.get("repeat_img_s")
    return cell if second is None or pd.isna(second) else f"{cell}; run again: {_num(second, 4)}"


STORAGE_COLUMNS = [
    ("workload", lambda r: _num(r["workload"])),
    ("GPUs", lambda r: _num(r["gpus"])),
    ("epoch s", lambda r: _num(r.get("epoch_time_s"))),
    ("1st epoch s", lambda r: _num(r.get("first_epoch_time_s"))),
    ("avg MB/s (ep. 1)", lambda r: _num(r.get("avg_read_mb_s"))),
    ("peak MB/s (ep. 1)", lambda r: _num(r.get("peak_read_mb_s"))),
    ("bandwidth eff.", lambda r: _num(r.get("bandwidth_efficiency"))),
    ("bytes from", lambda r: _num(r.get("bytes_source") or None)),
    ("cache risk", lambda r: _num(r.get("cache_risk"))),
    ("cache-served", lambda r: _num(r.get("cache_served"))),
    ("bandwidth valid", lambda r: _bandwidth_cell(r)),
    ("CPU %", lambda r: _num(r.get("cpu_util"))),
    ("mem %", lambda r: _num(r.get("mem_util"))),
    ("GPU %", lambda r: _num(r.get("gpu_util"))),
    ("GPU mem %", lambda r: _num(r.get("gpu_mem_util"))),
    ("AU", lambda r: _num(r.get("au"))),
    ("GPU busy", lambda r: _gpu_busy_cell(r)),
    ("data wait", lambda r: _num(r.get("data_wait_share"))),
    ("comm.", lambda r: _num(r.get("comm_share"))),
    ("straggler", lambda r: _straggler_cell(r)),
]


def _text(value) -> str:
    """A label column's value: "" where the frame holds none (NaN from a frame read back)."""
    return value if isinstance(value, str) else ""


def _gb_s(mb_s) -> float | None:
    return None if mb_s is None or pd.isna(mb_s) else float(mb_s) / 1e3


def _rate_interval(checkpoints: list[dict]) -> tuple[float, float]:
    """95% interval of the phase's GB/s (all bytes over all of the slowest ranks' seconds): a bootstrap
    over its checkpoints (each one's bytes and seconds resampled together), fixed seed."""
    import numpy as np

    from bench.analysis.stats import interval

    nbytes = np.array([c["bytes"] for c in checkpoints], dtype=float)
    seconds = np.array([c["seconds"] for c in checkpoints], dtype=float)
    pick = np.random.default_rng(0).integers(0, len(checkpoints), (2000, len(checkpoints)))
    return interval(nbytes[pick].sum(axis=1) / seconds[pick].sum(axis=1) / 1e9)


def checkpoint_intervals(runs: list[dict]) -> dict[tuple[str, int], dict]:
    """Each scale's checkpoint write and read GB/s intervals, where the phase wrote or read more than one
    checkpoint (one checkpoint has no spread to show)."""
    out = {}
    for r in runs:
        phase = ((r.get("result") or {}).get("summary") or {}).get("checkpoint") or {}
        if phase.get("status") != "done":
            continue
        spans = {}
        for kind in ("write", "read"):
            checkpoints = phase[kind]["checkpoints"]
            if len(checkpoints) > 1 and all(c["seconds"] > 0 for c in checkpoints):
                spans[kind] = _rate_interval(checkpoints)
        out[(r["workload"], int(r["gpus"]))] = spans
    return out


def _floor_gb_s(r: dict, figure: str, efficiency: str) -> float | None:
    """The GB/s at which this row's efficiency meets its bound (the verdict's own comparison, in GB/s)."""
    value, eff, bound = r.get(figure), r.get(f"{efficiency}_checked"), r.get("min_checkpoint_efficiency")
    if any(v is None or pd.isna(v) for v in (value, eff, bound)) or not eff > 0:
        return None
    return float(value) / float(eff) * float(bound) / 1e3


def checkpoint_table(records: list[dict], intervals: dict) -> dict | None:
    """Per scale: write and read GB/s (with their interval over checkpoints), their efficiency against the
    ideal and the bound, the bytes written, the stall share of training and the phase's outcome; None
    when no scale ran a checkpoint phase or saved during training."""
    shown = [r for r in records if _text(r.get("ckpt_state")) or pd.notna(r.get("ckpt_stall_share"))]
    if not shown:
        return None

    def rate(r: dict, kind: str) -> str:
        low_high = intervals.get((r["workload"], int(r["gpus"])), {}).get(kind, (None, None))
        return _with_interval(_gb_s(r.get(f"ckpt_{kind}_mb_s")), *low_high)

    def eff(r: dict, kind: str) -> str:
        checked = r.get(f"ckpt_{kind}_efficiency_checked")
        value = _num(r.get(f"ckpt_{kind}_efficiency"))
        return value if checked is None or pd.isna(checked) or value == "—" else f"{value} (judged)"

    columns = [
        ("workload", lambda r: _num(r["workload"])),
        ("GPUs", lambda r: _num(r["gpus"])),
        ("write GB/s [95% CI]", lambda r: rate(r, "write")),
        ("read GB/s [95% CI]", lambda r: rate(r, "read")),
        ("write eff.", lambda r: eff(r, "write")),
        ("read eff.", lambda r: eff(r, "read")),
        ("bound", lambda r: _num(r.get("min_checkpoint_efficiency"))),
        ("GB written", lambda r: _num((r.get("ckpt_bytes") or float("nan")) / 1e9)),
        ("stall share", lambda r: _num(r.get("ckpt_stall_share"))),
        (
            "phase",
            lambda r: ": ".join(x for x in (_text(r.get("ckpt_state")) or "off", _text(r.get("ckpt_note"))) if x),
        ),
    ]
    return _table(shown, columns)


def _checkpoint_charts(frame: pd.DataFrame) -> list[str]:
    """Per workload: checkpoint write and read GB/s per scale, each with the GB/s its efficiency bound
    asks for at that scale (the verdict's floor: a point under its dashed line failed)."""
    charts = []
    if "ckpt_write_mb_s" not in frame or not frame["ckpt_write_mb_s"].notna().any():
        return charts
    for workload, g in frame.groupby("workload"):
        g = g.sort_values("gpus")
        if not g["ckpt_write_mb_s"].notna().any():
            continue
        xs = g["gpus"].astype(float).tolist()
        rows = g.to_dict("records")
        series = []
        for kind in ("write", "read"):
            figure = f"ckpt_{kind}_mb_s"
            series.append(Series(kind, xs, [_gb_s(v) for v in g[figure]]))
            floor = [_floor_gb_s(r, figure, f"ckpt_{kind}_efficiency") for r in rows]
            if any(f is not None for f in floor):
                series.append(Series(f"{kind} at the efficiency bound", xs, floor, dashed=True))
        charts.append(
            line_chart(f"{workload}: checkpoint GB/s vs GPUs", series, "GPUs (ranks)", "GB/s", integer_x=True)
        )
    return charts


def _gpu_busy_cell(r: dict) -> str:
    """The share, or "no GPU" where the row ran without one: no rank's slot names a GPU and NVML saw
    none (an empty cell there would read as a figure that went missing); "—" where a GPU row has none."""
    busy = r.get("gpu_busy_share")
    if busy is not None and not pd.isna(busy):
        return _num(busy)
    slots = json.loads(r["slots"]) if isinstance(r.get("slots"), str) else []
    util = r.get("gpu_util")
    if slots and all(s.get("gpu") is None for s in slots) and (util is None or pd.isna(util)):
        return "no GPU"
    return "—"


def _straggler_cell(r: dict) -> str:
    host = r.get("slowest_host")
    if not isinstance(host, str) or not host:
        return _num(r.get("straggler_gap"), 2)
    return f"rank {int(r['slowest_rank'])} on {host}, {r['straggler_gap']:.0%} below median"


def _table(records: list[dict], columns) -> dict:
    return {"headers": [name for name, _ in columns], "rows": [[cell(r) for _, cell in columns] for r in records]}


def _scaling_charts(frame: pd.DataFrame) -> list[str]:
    charts = []
    for workload, g in frame.groupby("workload"):
        g = g.sort_values("gpus")
        xs = g["gpus"].astype(float).tolist()
        base = g[g["gpus"] == g["baseline_gpus"]]
        thr = g["throughput_img_s"].tolist()
        ideal = [
            float(base["throughput_img_s"].iloc[0]) * x / float(base["gpus"].iloc[0])
            if not base.empty and pd.notna(base["throughput_img_s"].iloc[0])
            else None
            for x in xs
        ]
        ceiling = g["independent_img_s"].tolist() if "independent_img_s" in g else []
        charts.append(
            line_chart(
                f"{workload}: images/s vs GPUs",
                [
                    Series("measured", xs, thr),
                    Series("ideal linear", xs, ideal, dashed=True),
                    *(
                        [Series("node ceiling (independent copies)", xs, ceiling, dashed=True)]
                        if any(pd.notna(c) for c in ceiling)
                        else []
                    ),
                    *(
                        [
                            Series("95% CI low", xs, g["throughput_ci_low"].tolist(), dashed=True),
                            Series("95% CI high", xs, g["throughput_ci_high"].tolist(), dashed=True),
                        ]
                        if "throughput_ci_low" in g
                        else []
                    ),
                ],
                "GPUs (ranks)",
                "images/s",
                integer_x=True,
            )
        )
        charts.append(
            line_chart(
                f"{workload}: time per epoch",
                [
                    Series("epoch", xs, g["epoch_time_s"].tolist()),
                    Series("1st epoch", xs, g["first_epoch_time_s"].tolist(), dashed=True),
                ],
                "GPUs (ranks)",
                "seconds",
                integer_x=True,
            )
        )
        charts.append(
            line_chart(
                f"{workload}: 1st-epoch read bandwidth",
                [
                    Series("average", xs, g["avg_read_mb_s"].tolist()),
                    Series("peak", xs, g["peak_read_mb_s"].tolist(), dashed=True),
                ],
                "GPUs (ranks)",
                "MB/s",
                integer_x=True,
            )
        )
    return charts


def _timeline(samples: list[dict], key: str, t0: float) -> tuple[list, list, list, list]:
    """Read MB/s and utilisation in bins as wide as the peak figure's (at least 1 s, at least one page-cache
    scan pass), so the chart and the peak in the table measure the same thing; counters summed over ranks."""
    import numpy as np

    from bench.metrics.io import cumulative_at

    periods = [s.get("dataset_scan_period_s") or 0.0 for s in samples if key == "dataset_read_bytes"]
    width = max(1.0, float(np.median(periods)) if periods else 0.0)
    end = max(s["t"] for s in samples)
    edges = np.arange(t0, end + width, width)
    if len(edges) < 2:
        return [], [], [], []
    total = np.zeros(len(edges))
    for rank in sorted({s["rank"] for s in samples}):
        total += cumulative_at([s for s in samples if s["rank"] == rank], key, edges)
    mid = (edges[:-1] + edges[1:]) / 2 - t0
    mb = np.diff(total) / width / 1e6
    util = {"cpu_util": [], "gpu_util": []}
    for lo, hi in itertools.pairwise(edges):
        for name, out in util.items():
            values = [s[name] for s in samples if lo <= s["t"] < hi and s.get(name) is not None]
            out.append(float(np.mean(values)) if values else None)
    return mid.tolist(), mb.tolist(), util["cpu_util"], util["gpu_util"]


_TIMELINE_COUNTERS = (
    ("s3_read_bytes", "dataset MB/s (S3 GETs received)"),
    ("dataset_read_bytes", "dataset MB/s (page cache)"),
    ("read_bytes", "process reads MB/s (procio: libraries included)"),
)


def _timeline_charts(runs: list[dict]) -> list[str]:
    charts = []
    for workload in sorted({r["workload"] for r in runs}):
        done = [r for r in runs if r["workload"] == workload and r["result"].get("state") == "COMPLETED"]
        if not done:
            continue
        run = max(done, key=lambda r: r["gpus"])
        metrics = Path(run["result"]["output_dir"]) / "metrics"
        samples = []
        for f in sorted(metrics.glob("samples-rank*.jsonl")):
            samples += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        if not samples:
            continue
        t0 = min(s["t"] for s in samples)
        # The counter the figures above took the dataset's bytes from, best first (bench.metrics.registry's
        # order): over S3 what the ranks' GETs received, else the dataset-only page-cache counter the node
        # sampler recorded, else the process counter, labelled with what it includes.
        key, label = next(
            ((k, text) for k, text in _TIMELINE_COUNTERS if any(s.get(k) is not None for s in samples)),
            _TIMELINE_COUNTERS[-1],
        )
        xs, mb, cpu, gpu = _timeline(samples, key, t0)
        charts.append(
            line_chart(f"{workload} on {run['gpus']} ranks: read bandwidth", [Series(label, xs, mb)], "seconds", "MB/s")
        )
        util = [Series("CPU %", xs, cpu)]
        if any(v is not None for v in gpu):
            util.append(Series("GPU %", xs, gpu))
        charts.append(line_chart(f"{workload} on {run['gpus']} ranks: utilisation", util, "seconds", "percent"))
    return charts


def _history_chart(history: pd.DataFrame, frame: pd.DataFrame) -> list[str]:
    """Scaling efficiency over past runs of this suite's own series: same cluster and config key only."""
    if history.empty or "scaling_efficiency" not in history or frame.empty:
        return []
    mine = set(zip(frame["cluster"], frame["config_key"], strict=True))
    matching = pd.Series(
        [(c, k) in mine for c, k in zip(history["cluster"], history["config_key"], strict=True)], index=history.index
    )
    h = history[matching & history["scaling_efficiency"].notna() & history["valid"].fillna(False).astype(bool)]
    if h.empty:
        return []
    runs = sorted(h["started_at"].unique())
    index = {r: i for i, r in enumerate(runs)}
    series = []
    for (workload, gpus), g in h.groupby(["workload", "gpus"]):
        if (g["gpus"] == g["baseline_gpus"]).all() if "baseline_gpus" in g else g["scaling_efficiency"].eq(1).all():
            continue  # the baseline is 1 by definition
        series.append(
            Series(f"{workload} @{gpus}", [index[r] for r in g["started_at"]], g["scaling_efficiency"].tolist())
        )
    labels = [str(r)[:10] for r in runs]
    return (
        [line_chart("scaling efficiency history", series, "suite run", "efficiency", x_labels=labels)] if series else []
    )


def _borderline(frame: pd.DataFrame) -> list[dict]:
    return [
        {
            "workload": r["workload"],
            "gpus": r["gpus"],
            "efficiency": _num(r["scaling_efficiency"]),
            "low": _num(r["scaling_efficiency_ci_low"]),
            "high": _num(r["scaling_efficiency_ci_high"]),
            "bound": _num(r["min_scaling_efficiency"]),
        }
        for r in frame.to_dict("records")
        if r.get("borderline") is True
    ]


def _slots(frame: pd.DataFrame) -> list[dict]:
    return [
        {
            "workload": r["workload"],
            "gpus": r["gpus"],
            "rank": s["rank"],
            "host": s["host"],
            "cpus": ",".join(map(str, s["cpus"])),
            "gpu": _num(s.get("gpu")),
            "bound_by": s.get("bound_by", ""),
            "oversubscribed": "yes" if s.get("oversubscribed") else "no",
        }
        for r in frame.to_dict("records")
        for s in json.loads(r.get("slots") or "[]")
    ]


def _nodes(frame: pd.DataFrame) -> list[dict]:
    """Each multi-node scale's per-node figures (the `node_figures` column), the node that stands out
    against its peers marked (bench.analysis.verdict.nodes)."""
    out = []
    for r in frame.to_dict("records"):
        try:
            nodes = json.loads(r.get("node_figures") or "[]")
        except (TypeError, json.JSONDecodeError):
            continue
        if len(nodes) < 2:
            continue
        for n in nodes:
            out.append(
                {
                    "workload": r["workload"],
                    "gpus": r["gpus"],
                    "host": n["host"],
                    "ranks": n.get("ranks"),
                    "read_mb_s": _num(n.get("read_mb_s")),
                    "img_s": _num(n.get("img_s")),
                    "compute_img_s": _num(n.get("compute_img_s")),
                    "comm_share": _num(n.get("comm_share")),
                    "data_wait_share": _num(n.get("data_wait_share")),
                    "ring_recv_algbw_mb_s": _num(n.get("ring_recv_algbw_mb_s")),
                    "ring_send_algbw_mb_s": _num(n.get("ring_send_algbw_mb_s")),
                    "ring_latency_us": _num(n.get("ring_latency_us")),
                    "slow": bool(r.get("slow_node")) and str(r.get("slow_node")) == str(n["host"]),
                    "why": _node_evidence(r),
                }
            )
    return out


def _node_evidence(row: dict) -> str:
    """Why the scale's node stands out, as its cause says it (the figure may be the storage probe's: a
    slow link slows every rank of a synchronous job alike, so the scale's own per-node figures can agree)."""
    evidence = str(row.get("bottleneck_evidence") or "")
    if str(row.get("bottleneck") or "") == "node" and evidence:
        return evidence.split(" (", 1)[0]
    return "against the median of its peers (the verdict's warnings say on which figure)"


def _failures(failures: list[dict]) -> list[dict]:
    return [{**f, "value": _num(f["value"]), "bound": _num(f["bound"])} for f in failures]


def template(name: str):
    """One Jinja2 environment for the report's pages: autoescaped; charts come in as Markup."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    env = Environment(
        loader=PackageLoader("bench.report", "templates"),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env.get_template(name)


def write_report(
    path: Path,
    suite_run_id: str,
    ev: Evaluation,
    runs: list[dict],
    history: pd.DataFrame,
    cfg: SweepConfig,
    probes: pd.DataFrame | None = None,
    changes: list[dict] | None = None,
    storage_line: str | None = None,
) -> Path:
    """The run's report. `storage_line`: the storage under test as the record names it for the alert too
    (bench.env.fingerprint.storage_under_test); from `runs` where not given."""
    from bench.report import storage

    frame = ev.frame
    records = frame.to_dict("records")
    th = cfg.bounds
    charts = _scaling_charts(frame) + _breakdown_charts(frame) + _checkpoint_charts(frame) + _timeline_charts(runs)
    charts += _history_chart(history, frame)
    checkpoints = checkpoint_table(records, checkpoint_intervals(runs))
    html = template("report.html").render(
        suite_run_id=suite_run_id,
        verdict=ev.verdict,
        ideal=cfg.resolved_ideal(),
        verdict_class={"PASSED": "pass", "FAILED": "fail"}.get(ev.verdict, "warn"),
        cfg=cfg,
        storage_under_test=storage_line or storage_under_test(runs, cfg.data.dataset_path),
        th=th,
        gpus=sorted(cfg.training.gpus),
        by_gpus=", ".join(f"{k} GPUs {v}" for k, v in sorted(th.min_scaling_efficiency_by_gpus.items())),
        generated=datetime.now().isoformat(timespec="seconds"),
        failures=_failures(ev.failures),
        inconclusive=ev.inconclusive,
        warnings=ev.warnings,
        borderline=_borderline(frame),
        changes=changes or [],
        data_docs=os.path.relpath(ev.data_docs, path.parent) if ev.data_docs else None,
        tables=[
            _table(records, SCALING_COLUMNS),
            _table(records, STORAGE_COLUMNS),
            *([checkpoints] if checkpoints else []),
        ],
        slots=_slots(frame),
        nodes=_nodes(frame),
        charts=[Markup(c) for c in charts],
        at_au=getattr(ev, "accelerators_at_au", {}),
        **storage.context(frame, ev.probe, probes if probes is not None else pd.DataFrame(), suite_run_id),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file(path, html)
    return path
