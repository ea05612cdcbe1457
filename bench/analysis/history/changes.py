"""Which change points of a series the latest run confirmed, which of them to alert, which regressions recovered.

The weekly DAG calls this after each run is stored, per (cluster, workload, GPUs, config) series and
watched figure. A change point is news once, for the run that confirms it, whether or not the figure
is inside its bound (a 9% drop within a 30% tolerance is still news); the next runs find it again and
only refine its numbers. A regression whose series later steps back to its old level gets one
"recovered" note. A change point whose level already had `local_runs` runs when it was first confirmed
(history recorded before this check existed, or a shift that only the established-level test finds) is
recorded for the dashboard, not alerted (detect.is_news).

News is stored `pending`, never `alerted`: only a delivery makes it so. The alert task sends each
notice to every alert target on its own, records each target that got it (`change_deliveries`), and
turns the change point `alerted` once all of them did; a retry sends only what a target still lacks.
So a Slack outage loses nothing and duplicates nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from bench.analysis.history.detect import (
    DEFAULT_SETTINGS,
    MATCH_RUNS,
    DetectorSettings,
    Step,
    confirmed,
    drop_step,
    find_steps,
    is_news,
    outliers,
    same_change,
)
from bench.results.schema import ALERTED, CHANGE_KEY, PENDING, RECORDED, RECOVERED, RECOVERY

# Figures watched over time; all are better when higher. The label is what an alert calls it.
WATCHED = {
    "throughput_img_s": "images/s",
    "scaling_efficiency": "scaling efficiency",
    "avg_read_mb_s": "avg epoch-1 read MB/s",
}
NEWS = (PENDING, ALERTED)  # a change point that is (or was) sent: a regression among them can recover


def step_size(size: float | None, change: float) -> float:
    """A stored change point's step where it happened; rows stored before sizes were kept fall back to
    the change of the segment means."""
    return float(change) if size is None or pd.isna(size) else float(size)


def _size(row: dict) -> float:
    return step_size(row.get("size"), row["change"])


@dataclass(frozen=True)
class Notice:
    kind: str  # "change" or "recovered"
    row: dict  # the change_alerts row it is about

    def line(self) -> str:
        r = self.row
        if r.get("scope") == "cluster":
            return cluster_line(self.kind, r)
        what = f"{r['workload']} @ {r['gpus']} GPUs, {WATCHED.get(r['metric'], r['metric'])}"
        size = _size(r)
        if self.kind == "recovered":
            return (
                f"{what}: recovered — back to {r['recovered_level']:.4g} (was {r['before']:.4g} before the "
                f"{size:+.1%} change point of {r['changed_at'][:10]}); confirmed by run {r['recovered_in']}"
            )
        word = "regression" if size < 0 else "improvement"
        return (
            f"{what}: change point ({word}) {size:+.1%} at {r['changed_at'][:10]}: mean {r['before']:.4g} -> "
            f"{r['after']:.4g}, p={r['pvalue']:.1e}{_how_sure(r)}; confirmed by run {r['detected_in']}"
        )


def cluster_line(kind: str, r: dict) -> str:
    """A cluster change's notice (issue 63): the shared drop with its interval, the series that moved and
    those that did not, the kind of figure that moved most; or its recovery."""
    import json

    when = str(r["changed_at"])[:10]
    if kind == "recovered":
        return (
            f"cluster-wide change of {when} (suite {r['config_key']}): recovered, confirmed by run {r['recovered_in']}"
        )
    moved, still = json.loads(r.get("moved") or "[]"), json.loads(r.get("unmoved") or "[]")
    drop = -_size(r)
    low, high = r.get("drop_ci_low"), r.get("drop_ci_high")
    ci = "" if low is None or pd.isna(low) else f" (95% CI {float(low):.1%} to {float(high):.1%})"
    return (
        f"cluster-wide change (suite {r['config_key']}): shared drop {drop:.1%}{ci} from {when}, "
        f"{len(moved)} of {len(moved) + len(still)} series moved ({', '.join(moved) or 'none'})"
        + (f"; did not move: {', '.join(still)}" if still else "")
        + f"; moved most: {r.get('moved_most') or 'unknown'}; confirmed by run {r['detected_in']} "
        f"({r.get('confirmed_runs')} runs at the new level)"
    )


def _how_sure(r: dict) -> str:
    """How sure a drop the noise model confirmed is (issue 54): its 95% interval and the runs at the new
    level that confirmed it; '' for a change point without them (E-Divisive's: its p-value says it)."""
    low, high, runs = r.get("drop_ci_low"), r.get("drop_ci_high"), r.get("confirmed_runs")
    if any(v is None or pd.isna(v) for v in (low, high, runs)):
        return ""
    return f", drop 95% CI {float(low):.1%} to {float(high):.1%}, {int(runs)} runs at the new level"


def metric_values(series: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The runs whose figure counts: bandwidth only where it was a valid storage figure."""
    keep = series[metric].notna()
    if metric == "avg_read_mb_s" and "bandwidth_valid" in series:
        keep &= series["bandwidth_valid"].fillna(False).astype(bool)
    return series[keep]


def series_outliers(series: pd.DataFrame, metric: str, settings: DetectorSettings = DEFAULT_SETTINGS) -> pd.DataFrame:
    """The runs of one series and figure set aside as one-week outliers (a bad node, a busy storage
    week): the dashboard marks them apart, never as change points. `series` as watch_series takes it;
    the newest run is never one yet (the week after it decides). A dip below the floor is still that
    week's regression (bench.analysis.history.regression)."""
    runs = metric_values(series, metric)
    return runs.iloc[outliers(runs[metric].to_numpy(dtype=float), settings)]


def _index_of(stamps: list[str], when: str) -> int | None:
    return stamps.index(when) if when in stamps else None


def watch_series(
    series: pd.DataFrame,
    metric: str,
    known: pd.DataFrame,
    suite_run_id: str,
    settings: DetectorSettings = DEFAULT_SETTINGS,
    match_runs: int = MATCH_RUNS,
) -> tuple[list[dict], list[Notice]]:
    """(change_alerts rows to upsert, notices to send) for one series and figure after `suite_run_id`.

    `series`: the accepted runs, oldest first (started_at, suite_run_id, the figure); `known`: the
    change_alerts rows already stored for this series and figure.
    """
    runs = metric_values(series, metric)
    if runs.empty or runs["suite_run_id"].iloc[-1] != suite_run_id:
        return [], []  # this run added no figure to the series: nothing new to confirm
    values = runs[metric].to_numpy(dtype=float)
    stamps = runs["started_at"].astype(str).tolist()
    ids = runs["suite_run_id"].astype(str).tolist()
    steps = confirmed(find_steps(values, settings), find_steps(values[:-1], settings), match_runs)
    first = series.iloc[0]
    stored = [r for r in known.to_dict("records") if _index_of(stamps, r["changed_at"]) is not None]
    # The noise model's drop test on the runs since the newest stored change (detect.replay's second test).
    since = max((_index_of(stamps, r["changed_at"]) for r in stored), default=0)
    drop = drop_step(values, since)
    if drop is not None and not any(same_change(s.index, s.size, drop.index, drop.size, match_runs) for s in steps):
        steps.append(drop)
    key = {
        "cluster": first["cluster"],
        "workload": first["workload"],
        "gpus": int(first["gpus"]),
        "config_key": first["config_key"],
        "metric": metric,
    }
    rows: list[dict] = []
    notices: list[Notice] = []
    latest = len(values) - 1
    for step in steps:
        old = _stored_match(stored, stamps, step, match_runs)
        if old is not None:  # found again: refine its numbers, keep its key and state
            rows.append({**old, **_step_stats(step)})
            continue
        recovers = _recovered_by(step, stored, stamps, settings)
        state = RECOVERY if recovers else PENDING if is_news(step.index, len(values), settings) else RECORDED
        found = {"changed_at": stamps[step.index], "changed_in": ids[step.index]}
        detected = {"detected_at": stamps[latest], "detected_in": suite_run_id}
        row = key | _step_stats(step) | found | detected | {"state": state, "recovered_at": None, "recovered_in": None}
        rows.append(row)
        stored.append(row)
        if state == PENDING:
            notices.append(Notice("change", row))
        for r in recovers:
            done = {**r, "state": RECOVERED, "recovered_at": stamps[latest], "recovered_in": suite_run_id}
            rows.append(done)
            notices.append(Notice("recovered", done | {"recovered_level": step.after}))
    return rows, notices


def _step_stats(step: Step) -> dict:
    sure = {}  # E-Divisive's refinement keeps what the drop test that first confirmed it said
    if step.runs:  # the noise model's drop test: its interval and the runs that confirmed it
        sure = {"drop_ci_low": step.drop_ci[0], "drop_ci_high": step.drop_ci[1], "confirmed_runs": step.runs}
    stats = {"before": step.before, "after": step.after, "change": step.change, "pvalue": step.pvalue}
    return stats | {"size": step.size} | sure


def _stored_match(stored: list[dict], stamps: list[str], step: Step, match_runs: int) -> dict | None:
    """The stored change this step is (the nearest one within `match_runs` with the same sign), or None."""
    at = [_index_of(stamps, r["changed_at"]) for r in stored]
    same = [r for r, i in zip(stored, at, strict=True) if same_change(i, _size(r), step.index, step.size, match_runs)]
    if not same:
        return None
    return min(same, key=lambda r: abs(_index_of(stamps, r["changed_at"]) - step.index))


def _recovered_by(step: Step, stored: list[dict], stamps: list[str], settings: DetectorSettings) -> list[dict]:
    """The sent regressions before this step that it recovers: a rise back to within min_change of the level
    before the drop."""
    return [
        r
        for r in stored
        if r["state"] in NEWS
        and _size(r) < 0
        and _index_of(stamps, r["changed_at"]) < step.index
        and step.size > 0
        and step.after >= r["before"] * (1 - settings.min_change)
    ]


def run_notices(known: pd.DataFrame, suite_run_id: str) -> list[Notice]:
    """The notices of `suite_run_id` among one series' and figure's stored change points: each news change
    point it confirmed, and each regression it saw recover (with the level the series came back to).

    Read from the store, not from what this call found new, so that recording the run again (a retried
    task, a crash between storing and reporting) lists the same notices; the alert task sends each
    only to the targets that still lack it."""
    rows = sorted(known.to_dict("records"), key=lambda r: str(r["changed_at"]))
    notices = [
        Notice("change", r)
        for r in rows
        if r["detected_in"] == suite_run_id and r["state"] in (*NEWS, RECOVERED)  # only news ever recovers
    ]
    for r in rows:
        if r["state"] != RECOVERED or r["recovered_in"] != suite_run_id:
            continue
        later = [x for x in rows if str(x["changed_at"]) > str(r["changed_at"])]
        steps = [x for x in later if x["state"] == RECOVERY and x["detected_in"] == suite_run_id]
        level = float(steps[0]["after"]) if steps else float("nan")
        notices.append(Notice("recovered", r | {"recovered_level": level}))
    return notices


def notice_key(notice: dict) -> tuple | None:
    """(change point key..., notice kind): what a delivery is recorded under; None for a notice that names
    no stored change point (it is sent as it is, every time)."""
    if any(notice.get(c) is None for c in CHANGE_KEY) or notice.get("kind") not in ("change", "recovered"):
        return None
    return (*(int(notice[c]) if c == "gpus" else str(notice[c]) for c in CHANGE_KEY), notice["kind"])


def due(notices: list[dict], target: str, delivered: dict[tuple, set[str]], everywhere: str = "*") -> list[dict]:
    """The notices `target` has not got yet: never one it (or every target, `everywhere`) was recorded as
    having got."""
    out = []
    for n in notices:
        key = notice_key(n)
        got = delivered.get(key, set()) if key is not None else set()
        if target not in got and everywhere not in got:
            out.append(n)
    return out


def series_keys(frame: pd.DataFrame) -> list[tuple[str, str, int, str]]:
    """(cluster, workload, GPUs, config) of each accepted row of this run."""
    accepted = frame[frame["accepted"].fillna(False).astype(bool)]
    return sorted(
        {(r.cluster, r.workload, int(r.gpus), r.config_key) for r in accepted.itertuples()},
        key=lambda k: (k[0], k[1], k[2], k[3]),
    )
