"""The history dashboard's content: per (cluster, workload, GPUs, config) series, the weekly trends with
their bounds, the regression band and the change points, and the table of suite runs.

Built from the results store alone, so what the page draws is what the store holds: accepted runs
as points, every other run hollow (never part of a trend), the floor the regression check held each
run to (recomputed from the runs before it, with the run's own configured tolerance and window), and
the change points the weekly check confirmed.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pandas as pd

from bench.analysis.history.changes import WATCHED, metric_values, series_outliers, step_size
from bench.analysis.history.regression import NOISE_HISTORY_RUNS, history_stats, regression_floor
from bench.analysis.verdict.bounds import scaling_bound
from bench.config.models import Thresholds
from bench.report.plots import Marker, trend_chart
from bench.results.stored import stored_thresholds

MAX_SERIES = 24  # charts per page; the filters narrow it
SERIES_PAGE_RUNS = 260  # the newest runs of each series a page draws: five years of weekly runs
FIGURES = (
    ("throughput_img_s", "images/s"),
    ("scaling_efficiency", "scaling efficiency"),
    ("avg_read_mb_s", "avg epoch-1 read MB/s"),
    ("peak_read_mb_s", "peak epoch-1 read MB/s"),
    ("ckpt_write_mb_s", "checkpoint write MB/s"),
    ("ckpt_read_mb_s", "checkpoint read MB/s"),
)
# Figures a series has only where a suite ran them (the checkpoint phase): drawn where present; each
# has the regression band its check used, as images/s has.
OPTIONAL = ("ckpt_write_mb_s", "ckpt_read_mb_s")
BANDED = ("throughput_img_s", *OPTIONAL)


@dataclass(frozen=True)
class Filters:
    cluster: str | None = None
    workload: str | None = None
    config_key: str | None = None
    gpus: int | None = None

    def apply(self, frame: pd.DataFrame) -> pd.DataFrame:
        for column, value in (("cluster", self.cluster), ("workload", self.workload), ("config_key", self.config_key)):
            if value:
                frame = frame[frame[column] == value]
        if self.gpus is not None:
            frame = frame[frame["gpus"].astype(int) == int(self.gpus)]
        return frame

    def picked(self) -> bool:
        """Whether the filters pick some series (the page then draws their charts)."""
        return any(v not in (None, "") for v in (self.cluster, self.workload, self.config_key, self.gpus))


class UnknownFilter(ValueError):
    """A filter value the store does not have: named with the values it does."""


def check_filters(filters: Filters, results: pd.DataFrame) -> None:
    for field, column in (("cluster", "cluster"), ("workload", "workload"), ("config", "config_key")):
        value = getattr(filters, column)
        have = sorted(results[column].dropna().unique()) if column in results else []
        if value and value not in have:
            raise UnknownFilter(f"{field}: {value!r} is not in the store (have: {', '.join(map(str, have)) or 'none'})")


def _bound(config: str | Mapping | Thresholds | None, gpus: int) -> float | None:
    """The bound the verdict held this run's scale to: bench.analysis.verdict.bounds.scaling_bound, the
    one function that reads the per-GPU table (a table's row covers every scale up to it, not only its own
    count), over the run's stored thresholds (bench.results.stored). A run stored without thresholds draws
    no bound."""
    th = config if isinstance(config, Thresholds) else stored_thresholds(config)
    return None if th is None else scaling_bound(gpus, th)


def _band(
    series: pd.DataFrame, configs: dict[str, Thresholds | None], metric: str = "throughput_img_s"
) -> tuple[list, list]:
    """The regression check's floor and median of `metric` at each run, from the accepted runs before it
    that have it (each run's own window and tolerance): one `history_stats` and one `regression_floor`
    over every run at once, the functions the check itself uses (per run, they took 0.7 s of a 156-run
    series page)."""
    befores, windows, tolerances, seen = [], [], [], []
    for r in series.itertuples():
        th = configs.get(r.suite_run_id) or Thresholds()  # stored without thresholds: judged with the defaults
        befores.append(seen[-NOISE_HISTORY_RUNS:])
        windows.append(th.history_runs)
        tolerances.append(th.regression_tolerance)
        value = getattr(r, metric)
        if r.accepted is True and pd.notna(value):
            seen.append(float(value))
    index = pd.RangeIndex(len(befores))
    stats = history_stats(befores, index, windows)
    floor, _used = regression_floor(stats, pd.Series(tolerances, index=index, dtype=float))
    lows = [None if pd.isna(f) else float(f) for f in floor]
    highs = [None if low is None else float(m) for low, m in zip(lows, stats["history_median"], strict=True)]
    return lows, highs


def series_panels(
    results: pd.DataFrame,
    suite_runs: pd.DataFrame,
    changes: pd.DataFrame,
    filters: Filters,
    annotations: pd.DataFrame | None = None,
    environments: dict[str, dict[str, str]] | None = None,
) -> list[dict]:
    """One panel per series: its key, counts, the four trend charts (SVG), and its change points with
    their annotations and what differed in the environment across each."""
    notes = _notes_by_change(annotations)
    environments = environments or {}
    configs = {r.suite_run_id: stored_thresholds(r.config) for r in suite_runs.itertuples()}
    rows = filters.apply(results).sort_values("started_at")
    panels = []
    keys = rows.groupby(["cluster", "workload", "gpus", "config_key"], sort=True)
    for (cluster, workload, gpus, config_key), series in list(keys)[:MAX_SERIES]:
        series = series.reset_index(drop=True)
        accepted = series["accepted"].fillna(False).astype(bool)
        marks = changes[
            (changes["cluster"] == cluster)
            & (changes["workload"] == workload)
            & (changes["gpus"] == gpus)
            & (changes["config_key"] == config_key)
        ]

        def note_of(c, key=(cluster, workload, int(gpus), config_key)):
            return notes.get((*key, c.metric, c.changed_at))

        panels.append(
            {
                "cluster": cluster,
                "workload": workload,
                "gpus": int(gpus),
                "config_key": config_key,
                "runs": len(series),
                "accepted": int(accepted.sum()),
                "charts": _trend_charts(series, accepted, marks, configs, note_of, workload, gpus),
                "changes": [_change_item(c, series, note_of, environments) for c in marks.itertuples()],
            }
        )
    return panels


def _notes_by_change(annotations: pd.DataFrame | None) -> dict:
    """Each annotation by the change point it explains: (cluster, workload, gpus, config, metric, changed_at)."""
    if annotations is None or annotations.empty:
        return {}
    return {
        (a.cluster, a.workload, int(a.gpus), a.config_key, a.metric, a.changed_at): a for a in annotations.itertuples()
    }


def _trend_charts(
    series: pd.DataFrame,
    accepted: pd.Series,
    marks: pd.DataFrame,
    configs: dict[str, Thresholds | None],
    note_of: Callable,
    workload: str,
    gpus: int,
) -> list[str]:
    """The series' trend chart per figure it has: accepted runs as points, others hollow, outliers aside,
    change points marked; images/s with its regression band, scaling efficiency with its bound."""
    labels = [str(t)[:10] for t in series["started_at"]]
    position = {t: i for i, t in enumerate(series["started_at"].astype(str))}
    charts = []
    for metric, label in FIGURES:
        if metric not in series or series[metric].isna().all():  # no figure at all: no empty chart
            continue
        shown = metric_values(series[accepted], metric) if metric in WATCHED else series[accepted]
        ys = [shown[metric].get(i) if i in shown.index else None for i in series.index]
        others = series[~accepted & series[metric].notna()]
        markers = [
            Marker(
                position[c.changed_at],
                step_size(c.size, c.change),
                n.kind if (n := note_of(c)) is not None else c.state,
            )
            for c in marks[marks["metric"] == metric].itertuples()
            if c.changed_at in position
        ]
        band = _band(series, configs, metric) if metric in BANDED else None
        bound = None
        if metric == "scaling_efficiency":
            bound = [_bound(configs.get(s), gpus) for s in series["suite_run_id"]]
        aside = series_outliers(series[accepted], metric) if metric in WATCHED else series.iloc[0:0]
        charts.append(
            trend_chart(
                f"{workload} @ {gpus} GPUs: {label}",
                list(series.index),
                ys,
                labels,
                label,
                band=band,
                bound=bound,
                markers=markers,
                rejected=(list(others.index), others[metric].astype(float).tolist()),
                outliers=(list(aside.index), aside[metric].astype(float).tolist()),
            )
        )
    return charts


def _change_item(c, series: pd.DataFrame, note_of: Callable, environments: dict[str, dict[str, str]]) -> dict:
    """One change point as the page lists it: figure, when, size, levels, state, what differed in the
    environment across it, and its annotation."""
    from bench.env.fingerprint import across_change, describe

    ids = series["suite_run_id"].astype(str).tolist()
    n = note_of(c)
    return {
        "metric": WATCHED.get(c.metric, c.metric),
        "metric_key": c.metric,
        "changed_at": str(c.changed_at)[:10],
        "changed_at_key": str(c.changed_at),
        "size": step_size(c.size, c.change),
        "before": float(c.before),
        "after": float(c.after),
        "pvalue": float(c.pvalue),
        "state": c.state,
        "what_changed": describe(across_change(ids, str(getattr(c, "changed_in", "") or ""), environments)),
        "annotation": (
            {"kind": n.kind, "note": n.note, "author": n.author or "", "at": str(n.created_at)[:10]}
            if n is not None
            else None
        ),
    }


def runs_table(
    results: pd.DataFrame,
    suite_runs: pd.DataFrame,
    filters: Filters,
    report_link: Callable[[str | None], str | None],
    run_link: Callable[[str | None, str], str | None],
    environments: dict[str, dict[str, str]] | None = None,
) -> list[dict]:
    """Newest first: date, run, cluster, how it came about (scheduled, manual), verdict, how many rows were
    inconclusive, links, what it ran on."""
    environments = environments or {}
    rows = filters.apply(results)
    keys = ["dag_id", "suite_run_id"] if "dag_id" in rows and "dag_id" in suite_runs else ["suite_run_id"]
    verdicts = rows["verdict"].fillna("").astype(str).str.upper()
    counted = pd.DataFrame(  # per run in one pass (two DAGs' runs may share a run id): not a filter per run
        {
            **{k: rows[k] for k in keys},
            "rows": 1,
            "inconclusive": (verdicts == "INCONCLUSIVE").astype(int),
            "failed": verdicts.isin(["FAIL", "FAILED"]).astype(int),
        }
    )
    counts = {(k if isinstance(k, tuple) else (k,)): c for k, c in counted.groupby(keys).sum().to_dict("index").items()}
    # scheduled or manual (Airflow's run type, revision 0021): one per suite run; '' where not recorded
    kinds = rows[keys].assign(run_type=rows["run_type"].fillna("") if "run_type" in rows else "")
    run_types = {
        (k if isinstance(k, tuple) else (k,)): v for k, v in kinds.groupby(keys)["run_type"].first().to_dict().items()
    }
    out = []
    for run in suite_runs.sort_values("started_at", ascending=False).itertuples():
        mine = counts.get(tuple(getattr(run, k) for k in keys))
        if mine is None:
            continue
        inconclusive, failed = int(mine["inconclusive"]), int(mine["failed"])
        verdict = "PASSED" if run.passed else ("FAILED" if failed or not inconclusive else "INCONCLUSIVE")
        out.append(
            {
                "date": str(run.started_at)[:16].replace("T", " "),
                "suite_run_id": run.suite_run_id,
                "cluster": run.cluster,
                "run_type": run_types.get(tuple(getattr(run, k) for k in keys), ""),
                "verdict": verdict,
                "rows": int(mine["rows"]),
                "inconclusive": inconclusive,
                "report": report_link(run.report_path),
                "run": run_link(run.dag_id, run.suite_run_id),
                "environment": environments.get(run.suite_run_id, {}),
            }
        )
    for newer, older in itertools.pairwise(out):  # newest first: the next row is the run before
        newer["previous"] = older["suite_run_id"]
    return out


def options(results: pd.DataFrame) -> dict[str, list[str]]:
    return {c: sorted(map(str, results[c].dropna().unique())) for c in ("cluster", "workload", "config_key")}
