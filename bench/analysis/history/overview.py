"""The overview: one line per series that answers "is anything wrong this week?", worst first.

Built from a bounded slice of the store (the newest `RECENT_RUNS` rows of each series, its change points
and annotations), never from the whole history: a page stays as fast at 156 weeks as at 8. Each line is
judged with the machinery the weekly check itself uses, not a second one: the regression floor
(`regression.series_floor`: the median of the last `history_runs` accepted runs and the tolerance the
series' own noise allows) says whether the latest run regressed and whether its changes against the
previous run and the baseline are outside noise; the stored change points (`changes`) and their
annotations (`annotations.baseline_since`, the re-baseline) say whether a change is open or explained.
The latest run is judged on the figure its own check judged (`checked`: the better of the scale's run
and its second run, `repeat_img_s` or a checkpoint figure's `ckpt_*_checked`), so a line never reads
`regressed` where the run's verdict passed on its second run.

Statuses, worst first (`STATUSES`): `regressed` (the latest run's figure is under its history floor),
`missed_bound` (the latest run failed with a figure that is not under its floor: it missed a bound;
the line's `cause` names the scale's bottleneck and the node that stood out, where one did),
`no_result` (the latest run failed without a figure: a launch or a run that gave none),
`inconclusive` (the latest run could not be judged; a run judged on its other figures whose epoch-1
read rate failed its own validity rule keeps its status, and the line's `inconclusive_figure` says
"epoch-1 read rate INCONCLUSIVE — <why>"), `change` (a confirmed change
point in the shown runs that nobody annotated), `stale` (no run for two of the series' own periods:
the median gap between its runs, a week for a weekly suite), `annotated` (its newest change point
was marked expected or explained), `watch` (issue 54: the latest run alone suspects a drop the noise
model has not confirmed yet, `noise.next_judgement`; shown, never alerted), `ok`. All but the last three need
attention (`NEEDS_ATTENTION`). `regressed` includes a drop the noise model confirmed: the floor is
`regression_floor`'s, the verdict's.

A series whose runs have checkpoint figures (`ckpt_write_mb_s`, `ckpt_read_mb_s`) also gets a line per
figure in the same form (`checkpoint_lines`), judged as the weekly check judges it: the figure's own
accepted runs since the baseline (`history_values(..., column=)`'s set) through the same floor.
"""

from __future__ import annotations

import base64
import binascii
import json

import numpy as np
import pandas as pd

from bench.analysis.history.cluster_changes import recent_clusters
from bench.analysis.history.noise import WATCH, next_judgement
from bench.analysis.history.regression import history_stats, regression_floor
from bench.analysis.verdict import bounds
from bench.analysis.verdict.expectations import THROUGHPUT_NOT_REGRESSED
from bench.config.models import Thresholds
from bench.results.schema import CHECKPOINT_RATES, RUN_ROW, SERIES_KEY

# A checkpoint figure's stored "better of two runs" (what its regression floor was held against).
CHECKPOINT_CHECKED = {figure: figure.replace("_mb_s", "_checked") for figure in CHECKPOINT_RATES}
CHECKED_FROM = {"throughput_img_s": "repeat_img_s", **CHECKPOINT_CHECKED}

STATUSES: tuple[str, ...] = (
    "regressed",
    "missed_bound",
    "no_result",
    "inconclusive",
    "change",
    "stale",
    "annotated",
    "watch",
    "ok",
)
NEEDS_ATTENTION: tuple[str, ...] = ("regressed", "missed_bound", "no_result", "inconclusive", "change", "stale")
# Rows read per series: the sparkline's runs and enough accepted ones before the latest for the floor's
# window (the default history_runs, 8, plus a few not accepted). The noise model reads these too (its
# reference is at most 12 runs here, 52 in the verdict): a drop it confirms fails the run's verdict, which
# makes the line `regressed` whatever this slice says; `watch` is judged on this slice.
RECENT_RUNS = 16
STALE_PERIODS = 2
DEFAULT_PERIOD = pd.Timedelta(days=7)  # a series with one run: the weekly schedule's period
OPEN_CHANGES = ("pending", "alerted", "recorded")  # a change point nobody explained yet (not recovered)
FAILED = ("FAIL", "FAILED")
# What each line reads of the results rows.
COLUMNS = (
    *RUN_ROW,
    "throughput_img_s",
    "repeat_img_s",  # a suspected regression's second run: the latest is judged on the better of the two
    "scaling_efficiency",
    *CHECKPOINT_RATES,  # a series' checkpoint lines, where its runs have the figures
    *CHECKPOINT_CHECKED.values(),
    "bottleneck",  # a failed latest run's cause, and the node that stood out (revision 0019)
    "slow_node",
    "avg_read_mb_s",  # the latest run's epoch-1 read figure, where its own validity rule failed
    "bandwidth_valid",
    "bandwidth_note",
)
CEILING = "storage ceiling"  # the workload column of a storage-ceiling line
MAX_GPUS = 4096  # a series id's GPUs: the bound bench.config holds a sweep's `gpus` to


def checked(frame: pd.DataFrame, figure: str) -> np.ndarray:
    """Each row's `figure` as its run's check judged it: the better of the scale's run and its second run
    (`repeat_img_s`; a checkpoint figure's stored `ckpt_*_checked`), the first run's where no second
    ran or the row was stored without the figure."""
    first = frame[figure].astype(float).to_numpy()
    second = CHECKED_FROM.get(figure)
    if second is None or second not in frame:
        return first
    return np.fmax(first, frame[second].astype(float).to_numpy())


def _judged_values(values: np.ndarray, judged: np.ndarray, rows: np.ndarray) -> list[float]:
    """The runs a line is judged on, oldest first: the history's as stored (the weekly check's history
    reads the first run's figure), the latest as its own check judged it (`checked`)."""
    out = values[rows].tolist()
    if out:
        out[-1] = float(judged[rows[-1]])
    return out


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
    if not all(isinstance(v, str) for v in (cluster, workload, config_key)) or type(gpus) is not int:
        raise ValueError(f"{series!r} is not a series id (see /api/series)")
    if not 1 <= gpus <= MAX_GPUS:  # a larger one overflows the store's integer (a 500, not an answer)
        raise ValueError(f"gpus {gpus} is not in 1..{MAX_GPUS}")
    return {"cluster": cluster, "workload": workload, "gpus": gpus, "config_key": config_key}


def _num(value) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def judge_many(values: list[list[float]], tolerances: list[float], windows: list[int]) -> list[dict]:
    """For each series, the latest of its `values` (accepted runs since the baseline, oldest first) against
    the previous one and against the regression floor of the `window` runs before it: deltas, whether
    each is outside the tolerance the floor used (None where unjudged: too few runs), whether it is under
    the floor. One `history_stats` and one `regression_floor` over every series: the weekly check's own
    functions, run once for a thousand series instead of once per series."""
    index = pd.RangeIndex(len(values))
    before = [v[:-1] if v else [] for v in values]
    stats = history_stats(before, index, list(windows))
    floor, used = regression_floor(stats, pd.Series(tolerances, index=index, dtype=float))
    medians, floor, used = (x.to_numpy(dtype=float) for x in (stats["history_median"], floor, used))
    out = []
    for i, v in enumerate(values):
        if not v:
            out.append(
                {"latest": None, "delta_prev": None, "delta_baseline": None, "noise": {}, "under_floor": False}
                | {"watch": False, "watch_drop": None}
            )
            continue
        latest, median, tol = v[-1], _num(medians[i]), _num(used[i])
        delta_prev = latest / before[i][-1] - 1 if before[i] and before[i][-1] else None
        delta_baseline = latest / median - 1 if median else None

        def outside(delta, tol=tol):
            return None if delta is None or tol is None else bool(abs(delta) > tol)

        out.append(
            {
                "latest": latest,
                "delta_prev": delta_prev,
                "delta_baseline": delta_baseline,
                "noise": {"delta_prev": outside(delta_prev), "delta_baseline": outside(delta_baseline)},
                "under_floor": bounds.fails(bounds.REGRESSION, latest, _num(floor[i])),
                **_watch(next_judgement(before[i], latest, float(tolerances[i]))),
            }
        )
    return out


def _watch(drop) -> dict:
    """`watch` (the latest runs suspect a drop the per-series alert bounds do not confirm: issue 54's one
    low run, or issue 63's drop confirmed only at the watch bounds) and `watch_drop`: its size, 95%
    interval and the runs it rests on (None unless watch)."""
    if drop.status != WATCH:
        return {"watch": False, "watch_drop": None}
    shown = {"size": drop.size, "ci_low": drop.ci_low, "ci_high": drop.ci_high, "runs": drop.runs}
    return {"watch": True, "watch_drop": {k: _num(v) if k != "runs" else int(v) for k, v in shown.items()}}


def judge(values: list[float], tolerance: float, window: int) -> dict:
    """`judge_many` for one series."""
    return judge_many([values], [tolerance], [window])[0]


def _stale(stamps: np.ndarray, now: pd.Timestamp) -> bool:
    """No run for STALE_PERIODS of the series' own period (the median gap between its runs); `stamps`
    are its runs' times as UTC nanoseconds, oldest first (NaT dropped)."""
    stamps = stamps[stamps != np.iinfo(np.int64).min]
    if not len(stamps):
        return False
    gaps = np.diff(stamps)
    period = pd.Timedelta(int(np.median(gaps))) if len(gaps) else DEFAULT_PERIOD
    period = period if period > pd.Timedelta(0) else DEFAULT_PERIOD
    return bool(now - pd.Timestamp(int(stamps[-1]), tz="UTC") > STALE_PERIODS * period)


def _change_status(marks: list[tuple[str, str, str]], annotated: set[tuple[str, str]], since: str) -> str | None:
    """`change` for a confirmed change point (metric, changed_at, state) among the shown runs (from `since`)
    that nobody annotated; `annotated` where the newest change point of the series was explained."""
    if not marks:
        return None
    for metric, changed_at, state in marks:
        if changed_at >= since and (metric, changed_at) not in annotated and state in OPEN_CHANGES:
            return "change"
    metric, changed_at, _state = max(marks, key=lambda m: m[1])
    return "annotated" if (metric, changed_at) in annotated else None


def _key(row) -> tuple:
    return tuple(int(row[k]) if k == "gpus" else str(row[k]) for k in SERIES_KEY)


def _by_series(changes: pd.DataFrame | None, annotations: pd.DataFrame | None) -> tuple[dict, dict, dict]:
    """Per series key: its change points (metric, changed_at, state), its annotated (metric, changed_at)
    and its baseline (as `annotations.baseline_since`: the newest annotated change)."""
    marks: dict[tuple, list] = {}
    notes: dict[tuple, set] = {}
    since: dict[tuple, str] = {}
    for row in changes.to_dict("records") if changes is not None and not changes.empty else []:
        marks.setdefault(_key(row), []).append((str(row["metric"]), str(row["changed_at"]), str(row["state"])))
    for row in annotations.to_dict("records") if annotations is not None and not annotations.empty else []:
        key = _key(row)
        notes.setdefault(key, set()).add((str(row["metric"]), str(row["changed_at"])))
        since[key] = max(since.get(key, ""), str(row["changed_at"]))
    return marks, notes, since


def _rank(line: dict) -> tuple:
    delta = line["delta_baseline"]
    ident = (line["cluster"], line["id"] or "", line.get("config_key") or "", line.get("figure", ""))
    return (STATUSES.index(line["status"]), delta if delta is not None else 0.0, *ident)


def worst_first(lines: list[dict]) -> list[dict]:
    """Lines of any figure (series, checkpoint, ceiling) in the overview's order."""
    return sorted(lines, key=_rank)


def _nanoseconds(times: pd.Series) -> np.ndarray:
    """UTC nanoseconds of ISO times (NaT, for one that is none, as int64's minimum)."""
    return pd.DatetimeIndex(pd.to_datetime(times, utc=True, errors="coerce")).as_unit("ns").asi8


def _columns(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    return {
        "thr": frame["throughput_img_s"].astype(float).to_numpy(),
        "checked": checked(frame, "throughput_img_s"),
        "eff": frame["scaling_efficiency"].astype(float).to_numpy(),
        "accepted": frame["accepted"].fillna(False).astype(bool).to_numpy(),
        "started": frame["started_at"].astype(str).to_numpy(),
        "stamps": _nanoseconds(frame["started_at"]),
        "verdict": frame["verdict"].fillna("").astype(str).str.upper().to_numpy(),
        "run": frame["suite_run_id"].astype(str).to_numpy(),
        "cause": _causes(frame),
        "failed": _failed_names(frame),
        "inconclusive_figure": _inconclusive_figures(frame),
    }


def _inconclusive_figures(frame: pd.DataFrame) -> np.ndarray:
    """Each row's figure whose own validity rule failed, as the alert states it ('' none): an epoch-1
    read rate measured but not valid (too short for a rate, served from the cache), as the verdict's
    ExpectBandwidthNotCacheDistorted judges it (bench.analysis.verdict.evaluate.inconclusive_figures).
    Its row is still judged on its other figures: the line keeps its status and says this beside it."""
    n = len(frame)
    if "bandwidth_valid" not in frame or "avg_read_mb_s" not in frame:
        return np.full(n, "", dtype=object)
    measured = pd.to_numeric(frame["avg_read_mb_s"], errors="coerce").notna().to_numpy()
    valid = frame["bandwidth_valid"].map(lambda v: v is True or v == 1 or str(v).lower() == "true").to_numpy()
    notes = frame["bandwidth_note"].fillna("").astype(str).to_numpy() if "bandwidth_note" in frame else [""] * n
    return np.array(
        [
            f"epoch-1 read rate INCONCLUSIVE — {note or 'not a valid read figure'}" if m and not v else ""
            for m, v, note in zip(measured, valid, notes, strict=True)
        ],
        dtype=object,
    )


def _failed_names(frame: pd.DataFrame) -> np.ndarray:
    """Each row's failed expectations as the verdict stored them (a JSON list; '' where none stored)."""
    names = frame["failed_expectations"] if "failed_expectations" in frame else pd.Series("", index=frame.index)
    return names.fillna("").astype(str).to_numpy()


def _causes(frame: pd.DataFrame) -> np.ndarray:
    """Each row's cause as a line shows it: its bottleneck, with the node that stood out ('' none)."""
    causes = frame["bottleneck"] if "bottleneck" in frame else pd.Series("", index=frame.index)
    nodes = frame["slow_node"] if "slow_node" in frame else pd.Series("", index=frame.index)
    out = []
    for cause, node in zip(causes.fillna("").astype(str), nodes.fillna("").astype(str), strict=True):
        out.append(f"{cause or 'node'} ({node})" if node else cause)
    return np.array(out, dtype=object)


def _failed_status(figure: float, failed: str, accepted: list[float], tolerance: float, window: int) -> str:
    """A failed latest run's word: `no_result` without a figure; `regressed` where its verdict failed the
    regression check (the verdict's own judgement, on its longer history: no second rule here) or, for a
    row stored without that record, where its figure is under the floor of the accepted runs before it;
    else `missed_bound` (it failed a bound, not its history)."""
    if not np.isfinite(figure):
        return "no_result"
    if THROUGHPUT_NOT_REGRESSED in failed:
        return "regressed"
    return "regressed" if judge([*accepted, float(figure)], tolerance, window)["under_floor"] else "missed_bound"


def _groups(frame: pd.DataFrame) -> list[tuple[tuple, np.ndarray]]:
    grouped = frame.groupby(list(SERIES_KEY), sort=False).indices.items()
    return [(_key(dict(zip(SERIES_KEY, k, strict=True))), rows) for k, rows in grouped]


def _configured(thresholds: dict[str, Thresholds] | None, run_id) -> Thresholds:
    """The Thresholds run `run_id` was judged with (bench.results.stored reads them), the model's
    defaults where none are known for it."""
    return (thresholds or {}).get(str(run_id)) or Thresholds()


def _thresholds(groups, col: dict, thresholds: dict[str, Thresholds] | None) -> tuple[list[float], list[int]]:
    """Each series' tolerance and window: its latest run's configured ones."""
    tolerances, windows = [], []
    for _series, rows in groups:
        th = _configured(thresholds, col["run"][rows[-1]])
        tolerances.append(th.regression_tolerance)
        windows.append(th.history_runs)
    return tolerances, windows


def overview_lines(
    recent: pd.DataFrame,
    changes: pd.DataFrame | None = None,
    annotations: pd.DataFrame | None = None,
    now: pd.Timestamp | None = None,
    thresholds: dict[str, Thresholds] | None = None,
) -> list[dict]:
    """Every series' line, worst first (status, then the largest drop against its baseline). `recent`:
    the newest rows of each series (`ResultsStore.results_of(..., newest=RECENT_RUNS)`); `thresholds`:
    suite run id -> its configured thresholds (the latest run's window and tolerance judge the series).
    The series' checkpoint lines are `checkpoint_lines`'."""
    now = now if now is not None else pd.Timestamp.now(tz="UTC")
    if recent.empty:
        return []
    frame = recent.sort_values([*SERIES_KEY, "started_at"]).reset_index(drop=True)
    col = _columns(frame)
    groups = _groups(frame)
    marks, notes, since = _by_series(changes, annotations)
    picked = []
    for key, rows in groups:
        ok = col["accepted"][rows] & ~np.isnan(col["thr"][rows])
        if key in since:
            ok &= col["started"][rows] >= since[key]
        picked.append(rows[ok])
    tolerances, windows = _thresholds(groups, col, thresholds)
    judged = judge_many([_judged_values(col["thr"], col["checked"], p) for p in picked], tolerances, windows)
    pooled = recent_clusters(frame, changes)  # the cluster's pooled status, for its roll-up line (issue 63)
    lines = []
    for i, ((key, rows), used, verdict) in enumerate(zip(groups, picked, judged, strict=True)):
        last = col["verdict"][rows[-1]]
        if last in FAILED:
            before = col["thr"][used].tolist()  # the accepted runs, as history reads them
            figure, failed = col["checked"][rows[-1]], col["failed"][rows[-1]]
            status = _failed_status(figure, failed, before, tolerances[i], windows[i])
        elif verdict["under_floor"]:
            status = "regressed"
        elif last == "INCONCLUSIVE":
            status = "inconclusive"
        else:
            status = _change_status(marks.get(key, []), notes.get(key, set()), col["started"][rows[0]]) or "ok"
            status = "stale" if status != "change" and _stale(col["stamps"][rows], now) else status
            status = "watch" if status == "ok" and verdict["watch"] else status
        spark = [_num(v) if a else None for v, a in zip(col["checked"][rows], col["accepted"][rows], strict=True)]
        lines.append(
            {
                "id": series_id(*key),
                **dict(zip(SERIES_KEY, key, strict=True)),
                "figure": "throughput_img_s",
                "status": status,
                "cause": col["cause"][rows[-1]] if status in ("missed_bound", "regressed") else "",
                # the latest run's figure that could not be judged (issue 49: INCONCLUSIVE, never FAILED)
                "inconclusive_figure": col["inconclusive_figure"][rows[-1]],
                "latest_efficiency": _num(col["eff"][used[-1]]) if len(used) else None,
                "latest_img_s": verdict["latest"],
                "delta_prev": verdict["delta_prev"],
                "delta_baseline": verdict["delta_baseline"],
                "outside_noise": verdict["noise"],
                "latest_at": col["started"][rows[-1]],
                "latest_run": col["run"][rows[-1]],
                "spark": spark,
                "watch_drop": verdict["watch_drop"] if status == "watch" else None,
                "pooled": pooled[key[0]],
            }
        )
    return sorted(lines, key=_rank)


def checkpoint_lines(
    recent: pd.DataFrame,
    annotations: pd.DataFrame | None = None,
    now: pd.Timestamp | None = None,
    thresholds: dict[str, Thresholds] | None = None,
) -> list[dict]:
    """Each series' checkpoint write and read lines (where its shown runs have the figure), in the
    overview's form, worst first. A line is judged as the weekly check judges the figure: its accepted
    runs that have it, since the series' annotated baseline, through `judge_many` (the regression floor
    of `history_runs` of them and the tolerance their noise allows), with the newest run that has it
    counted as the latest even when not accepted (a run whose checkpoint figure regressed is stored not
    accepted), unless it was inconclusive. Statuses: `regressed` (the newest figure is under its floor),
    `inconclusive` (the newest run with the figure could not be judged), `stale` (no figure for two of
    its own periods), `ok`; change points are watched on images/s, not here."""
    now = now if now is not None else pd.Timestamp.now(tz="UTC")
    figures = [f for f in CHECKPOINT_RATES if f in recent.columns and recent[f].notna().any()]
    if recent.empty or not figures:
        return []
    frame = recent.sort_values([*SERIES_KEY, "started_at"]).reset_index(drop=True)
    col, groups = _columns(frame), _groups(frame)
    _marks, _notes, since = _by_series(None, annotations)
    tolerances, windows = _thresholds(groups, col, thresholds)
    lines = []
    for figure in figures:
        values, judged_as = frame[figure].astype(float).to_numpy(), checked(frame, figure)
        shown, picked, tol, win = [], [], [], []
        for i, (key, rows) in enumerate(groups):
            rows = rows[~np.isnan(values[rows])]
            if not len(rows):
                continue
            judged = col["verdict"][rows[-1]] != "INCONCLUSIVE"
            ok = col["accepted"][rows].copy()
            ok[-1] = judged
            if key in since:
                ok &= col["started"][rows] >= since[key]
            shown.append((key, rows, ok, judged))
            picked.append(_judged_values(values, judged_as, rows[ok]))
            tol.append(tolerances[i])
            win.append(windows[i])
        for (key, rows, ok, judged), verdict in zip(shown, judge_many(picked, tol, win), strict=True):
            if not judged:
                status = "inconclusive"
            elif verdict["under_floor"]:
                status = "regressed"
            else:
                status = "stale" if _stale(col["stamps"][rows], now) else "ok"
            lines.append(
                {
                    "id": series_id(*key),
                    **dict(zip(SERIES_KEY, key, strict=True)),
                    "figure": figure,
                    "status": status,
                    "latest_efficiency": None,
                    "latest_img_s": None,
                    "latest_mb_s": verdict["latest"],
                    "delta_prev": verdict["delta_prev"],
                    "delta_baseline": verdict["delta_baseline"],
                    "outside_noise": verdict["noise"],
                    "latest_at": col["started"][rows[-1]],
                    "latest_run": col["run"][rows[-1]],
                    "spark": [_num(v) if k else None for v, k in zip(judged_as[rows], ok, strict=True)],
                }
            )
    return sorted(lines, key=_rank)


def ceiling_lines(
    probes: pd.DataFrame, now: pd.Timestamp | None = None, thresholds: dict[str, Thresholds] | None = None
) -> list[dict]:
    """The storage-ceiling lines in the overview's form: per (cluster, probed files), the newest ceiling
    against the previous accepted one and the floor of the accepted probes before it (the suite's own
    probe check, with the newest probe's run's tolerance and window, `thresholds`: suite run id -> its
    Thresholds, as the suite judged it). A probe is stored accepted only when conclusive and not
    regressed, so a newest probe that is conclusive but not accepted is `regressed` (its ceiling still
    shown and judged), and one that is not conclusive `inconclusive`."""
    now = now if now is not None else pd.Timestamp.now(tz="UTC")
    lines = []
    if probes.empty:
        return lines
    for (cluster, paths, _size), rows in probes.sort_values("probed_at").groupby(
        ["cluster", "paths", "sample_bytes"], sort=False
    ):
        accepted = rows["accepted"].fillna(False).astype(bool)
        conclusive = rows["conclusive"].fillna(False).astype(bool) if "conclusive" in rows else accepted
        counted = accepted & rows["ceiling_mb_s"].notna()
        counted.iloc[-1] = bool(conclusive.iloc[-1] and pd.notna(rows["ceiling_mb_s"].iloc[-1]))
        th = _configured(thresholds, rows["suite_run_id"].iloc[-1])
        judged = judge(rows["ceiling_mb_s"][counted].astype(float).tolist(), th.regression_tolerance, th.history_runs)
        if not conclusive.iloc[-1]:
            status = "inconclusive"
        elif judged["under_floor"] or not accepted.iloc[-1]:
            status = "regressed"
        else:
            status = "stale" if _stale(_nanoseconds(rows["probed_at"]), now) else "ok"
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
                "spark": [_num(v) for v in rows["ceiling_mb_s"].where(counted)],
            }
        )
    return sorted(lines, key=_rank)


def needs_attention(lines: list[dict]) -> list[dict]:
    return [line for line in lines if line["status"] in NEEDS_ATTENTION]


def rollup(lines: list[dict]) -> list[dict]:
    """One line per cluster: how many series, how many lines of each status (a series' checkpoint lines
    and the storage-ceiling lines count too), its worst status, and `pooled` (issue 63): the cluster's
    pooled status (`ok`, `watch`, `change`) with the shared drop, as its series lines carry it
    (cluster_changes.recent_clusters; None for a cluster with no series line), and `storage`: the storage
    under test its lines' latest runs read (`S3 (endpoint, bucket)`, `PATH on FSTYPE SOURCE`; each distinct
    one, "; "-joined; None where no run kept it)."""
    out: dict[str, dict] = {}
    stores: dict[str, set[str]] = {}
    for line in lines:
        entry = out.setdefault(line["cluster"], {"cluster": line["cluster"], "series": 0, "counts": {}, "pooled": None})
        entry["pooled"] = entry["pooled"] or line.get("pooled")
        if line.get("storage"):
            stores.setdefault(line["cluster"], set()).add(str(line["storage"]))
        entry["series"] += line.get("figure", "throughput_img_s") == "throughput_img_s"
        entry["counts"][line["status"]] = entry["counts"].get(line["status"], 0) + 1
    for entry in out.values():
        entry["storage"] = "; ".join(sorted(stores.get(entry["cluster"], ()))) or None
        entry["worst"] = min(entry["counts"], key=STATUSES.index)
        entry["counts"] = {s: entry["counts"][s] for s in STATUSES if s in entry["counts"]}
    return sorted(out.values(), key=lambda e: (STATUSES.index(e["worst"]), e["cluster"]))
