"""The overview: one line per series that answers "is anything wrong this week?", worst first.

Built from a bounded slice of the store (the newest `RECENT_RUNS` rows of each series, its change points
and annotations), never from the whole history: a page stays as fast at 156 weeks as at 8. Each line is
judged with the machinery the weekly check itself uses, not a second one: the regression floor
(`regression.series_floor`: the median of the last `history_runs` accepted runs and the tolerance the
series' own noise allows) says whether the latest run regressed and whether its changes against the
previous run and the baseline are outside noise; the stored change points (`changes`) and their
annotations (`annotations.baseline_since`, the re-baseline) say whether a change is open or explained.

Statuses, worst first (`STATUSES`): `regressed` (the latest accepted run is under its floor, or the
latest run failed), `inconclusive` (the latest run could not be judged), `change` (a confirmed change
point in the shown runs that nobody annotated), `stale` (no run for two of the series' own periods:
the median gap between its runs, a week for a weekly suite), `annotated` (its newest change point
was marked expected or explained), `ok`. The first four need attention (`NEEDS_ATTENTION`).
"""

from __future__ import annotations

import base64
import binascii
import json

import numpy as np
import pandas as pd

from bench.analysis.history.annotations import baseline_since
from bench.analysis.history.regression import series_floor
from bench.config import DEFAULT_HISTORY_RUNS, DEFAULT_REGRESSION_TOLERANCE
from bench.results.schema import SERIES_KEY

STATUSES: tuple[str, ...] = ("regressed", "inconclusive", "change", "stale", "annotated", "ok")
NEEDS_ATTENTION: tuple[str, ...] = ("regressed", "inconclusive", "change", "stale")
# Rows read per series: the sparkline's runs and enough accepted ones before the latest for the floor's
# window (the default history_runs, 8, plus a few not accepted).
RECENT_RUNS = 16
STALE_PERIODS = 2
DEFAULT_PERIOD = pd.Timedelta(days=7)  # a series with one run: the weekly schedule's period
OPEN_CHANGES = ("pending", "alerted", "recorded")  # a change point nobody explained yet (not recovered)
FAILED = ("FAIL", "FAILED")
# What each line reads of the results rows.
COLUMNS = (
    "dag_id",
    "suite_run_id",
    *SERIES_KEY,
    "started_at",
    "accepted",
    "verdict",
    "throughput_img_s",
    "scaling_efficiency",
)
CEILING = "storage ceiling"  # the workload column of a storage-ceiling line


def series_id(cluster: str, workload: str, gpus: int | None, config_key: str) -> str:
    """A series' id in URLs: its key as base64url JSON (config keys hold slashes)."""
    raw = json.dumps([cluster, workload, gpus, config_key], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def series_key(series: str) -> dict:
    """The key of a series id (ValueError for one no `series_id` made)."""
    try:
        raw = base64.urlsafe_b64decode(series + "=" * (-len(series) % 4))
        cluster, workload, gpus, config_key = json.loads(raw)
    except (ValueError, TypeError, binascii.Error):
        raise ValueError(f"{series!r} is not a series id (see /api/series)") from None
    if not all(isinstance(v, str) for v in (cluster, workload, config_key)) or not isinstance(gpus, int):
        raise ValueError(f"{series!r} is not a series id (see /api/series)")
    return {"cluster": cluster, "workload": workload, "gpus": gpus, "config_key": config_key}


def _num(value) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def judge(values: list[float], tolerance: float, window: int) -> dict:
    """The latest of `values` (accepted runs since the baseline, oldest first) against the previous one and
    against the regression floor of the `window` runs before it: deltas, whether each is outside the
    tolerance the floor used (None where unjudged: too few runs), and whether it is under the floor."""
    if not values:
        return {"latest": None, "delta_prev": None, "delta_baseline": None, "noise": {}, "under_floor": False}
    latest, before = values[-1], values[:-1][-window:]
    stats = series_floor(before, tolerance)
    used, median, floor = stats["tolerance_used"], stats["history_median"], stats["regression_floor"]
    delta_prev = latest / before[-1] - 1 if before and before[-1] else None
    delta_baseline = latest / median - 1 if median else None

    def outside(delta):
        return None if delta is None or used is None else bool(abs(delta) > used)

    return {
        "latest": latest,
        "delta_prev": delta_prev,
        "delta_baseline": delta_baseline,
        "noise": {"delta_prev": outside(delta_prev), "delta_baseline": outside(delta_baseline)},
        "under_floor": floor is not None and latest < floor,
        "tolerance_used": used,
    }


def _stale(times: pd.Series, now: pd.Timestamp) -> bool:
    """No run for STALE_PERIODS of the series' own period (the median gap between its runs)."""
    stamps = pd.to_datetime(times, utc=True, errors="coerce").dropna().sort_values()
    if stamps.empty:
        return False
    gaps = stamps.diff().dropna()
    period = gaps.median() if len(gaps) else DEFAULT_PERIOD
    period = period if period > pd.Timedelta(0) else DEFAULT_PERIOD
    return bool(now - stamps.iloc[-1] > STALE_PERIODS * period)


def _change_status(marks: pd.DataFrame, notes: pd.DataFrame, since: str) -> str | None:
    """`change` for a confirmed, unannotated change point among the shown runs; `annotated` where the
    newest change point of the series was explained; None else."""
    if marks.empty:
        return None
    annotated = set() if notes.empty else set(zip(notes["metric"], notes["changed_at"].astype(str), strict=True))
    shown = marks[marks["changed_at"].astype(str) >= since]
    for c in shown.itertuples():
        if (c.metric, str(c.changed_at)) not in annotated and c.state in OPEN_CHANGES:
            return "change"
    newest = marks.sort_values("changed_at").iloc[-1]
    return "annotated" if (newest["metric"], str(newest["changed_at"])) in annotated else None


def _of_series(frame: pd.DataFrame | None, key: tuple) -> pd.DataFrame:
    if frame is None or frame.empty:
        return pd.DataFrame(columns=[*SERIES_KEY, "metric", "changed_at", "state"])
    mask = np.ones(len(frame), dtype=bool)
    for column, value in zip(SERIES_KEY, key, strict=True):
        mask &= (frame[column].astype(int) == int(value)) if column == "gpus" else (frame[column] == value)
    return frame[mask]


def series_line(
    series: pd.DataFrame,
    changes: pd.DataFrame | None,
    annotations: pd.DataFrame | None,
    now: pd.Timestamp,
    thresholds: dict | None = None,
) -> dict:
    """One series' overview line from its newest rows (oldest first)."""
    th = thresholds or {}
    first = series.iloc[0]
    key = tuple(first[c] for c in SERIES_KEY)
    notes = _of_series(annotations, key)
    since = baseline_since(notes, *key)
    accepted = series[series["accepted"].fillna(False).astype(bool) & series["throughput_img_s"].notna()]
    if since is not None:
        accepted = accepted[accepted["started_at"].astype(str) >= since]
    window = int(th.get("history_runs", DEFAULT_HISTORY_RUNS))
    judged = judge(
        accepted["throughput_img_s"].astype(float).tolist(),
        float(th.get("regression_tolerance", DEFAULT_REGRESSION_TOLERANCE)),
        window,
    )
    latest = series.iloc[-1]
    verdict = str(latest.get("verdict") or "").upper()
    status = "ok"
    if verdict in FAILED or judged["under_floor"]:
        status = "regressed"
    elif verdict == "INCONCLUSIVE":
        status = "inconclusive"
    else:
        status = _change_status(_of_series(changes, key), notes, str(series["started_at"].iloc[0])) or "ok"
        if status != "change" and _stale(series["started_at"], now):
            status = "stale"
    last_accepted = accepted.iloc[-1] if not accepted.empty else None
    return {
        "id": series_id(str(key[0]), str(key[1]), int(key[2]), str(key[3])),
        "cluster": key[0],
        "workload": key[1],
        "gpus": int(key[2]),
        "config_key": key[3],
        "figure": "throughput_img_s",
        "status": status,
        "latest_efficiency": _num(last_accepted["scaling_efficiency"]) if last_accepted is not None else None,
        "latest_img_s": judged["latest"],
        "delta_prev": judged["delta_prev"],
        "delta_baseline": judged["delta_baseline"],
        "outside_noise": judged["noise"],
        "latest_at": str(latest["started_at"]),
        "latest_run": str(latest["suite_run_id"]),
        "spark": [_num(v) for v in series["throughput_img_s"].where(series["accepted"].fillna(False).astype(bool))],
    }


def _rank(line: dict) -> tuple:
    delta = line["delta_baseline"]
    return (STATUSES.index(line["status"]), delta if delta is not None else 0.0, line["cluster"], line["id"])


def overview_lines(
    recent: pd.DataFrame,
    changes: pd.DataFrame | None = None,
    annotations: pd.DataFrame | None = None,
    now: pd.Timestamp | None = None,
    thresholds: dict[str, dict] | None = None,
) -> list[dict]:
    """Every series' line, worst first (status, then the largest drop against its baseline). `recent`:
    the newest rows of each series (`ResultsStore.results_of(..., newest=RECENT_RUNS)`); `thresholds`:
    suite run id -> its configured thresholds (the latest run's window and tolerance judge the series)."""
    now = now if now is not None else pd.Timestamp.now(tz="UTC")
    thresholds = thresholds or {}
    lines = []
    if recent.empty:
        return lines
    for _, series in recent.sort_values("started_at").groupby(list(SERIES_KEY), sort=False):
        series = series.reset_index(drop=True)
        th = thresholds.get(str(series["suite_run_id"].iloc[-1]))
        lines.append(series_line(series, changes, annotations, now, th))
    return sorted(lines, key=_rank)


def ceiling_lines(probes: pd.DataFrame, now: pd.Timestamp | None = None) -> list[dict]:
    """The storage-ceiling lines in the overview's form: per (cluster, probed files), the newest ceiling
    against the previous one and the floor of the probes before it (the same floor as the suite's)."""
    now = now if now is not None else pd.Timestamp.now(tz="UTC")
    lines = []
    if probes.empty:
        return lines
    for (cluster, paths, _size), rows in probes.sort_values("probed_at").groupby(
        ["cluster", "paths", "sample_bytes"], sort=False
    ):
        ok = rows[rows["accepted"].fillna(False).astype(bool) & rows["ceiling_mb_s"].notna()]
        judged = judge(ok["ceiling_mb_s"].astype(float).tolist(), DEFAULT_REGRESSION_TOLERANCE, DEFAULT_HISTORY_RUNS)
        status = "regressed" if judged["under_floor"] else "stale" if _stale(rows["probed_at"], now) else "ok"
        label = ", ".join(json.loads(paths)) if isinstance(paths, str) and paths.startswith("[") else str(paths)
        lines.append(
            {
                "id": None,  # no points route: the probes are not a results series
                "cluster": cluster,
                "workload": CEILING,
                "gpus": None,
                "config_key": label,
                "figure": "ceiling_mb_s",
                "status": status,
                "latest_efficiency": None,
                "latest_img_s": None,
                "latest_mb_s": judged["latest"],
                "delta_prev": judged["delta_prev"],
                "delta_baseline": judged["delta_baseline"],
                "outside_noise": judged["noise"],
                "latest_at": str(rows["probed_at"].iloc[-1]),
                "latest_run": str(rows["suite_run_id"].iloc[-1]),
                "spark": [_num(v) for v in rows["ceiling_mb_s"].where(rows["accepted"].fillna(False).astype(bool))],
            }
        )
    return sorted(lines, key=_rank)


def needs_attention(lines: list[dict]) -> list[dict]:
    return [line for line in lines if line["status"] in NEEDS_ATTENTION]


def rollup(lines: list[dict]) -> list[dict]:
    """One line per cluster: how many series, how many of each status, its worst status."""
    out: dict[str, dict] = {}
    for line in lines:
        entry = out.setdefault(line["cluster"], {"cluster": line["cluster"], "series": 0, "counts": {}})
        entry["series"] += 1
        entry["counts"][line["status"]] = entry["counts"].get(line["status"], 0) + 1
    for entry in out.values():
        entry["worst"] = min(entry["counts"], key=STATUSES.index)
        entry["counts"] = {s: entry["counts"][s] for s in STATUSES if s in entry["counts"]}
    return sorted(out.values(), key=lambda e: (STATUSES.index(e["worst"]), e["cluster"]))
