"""Which failed expectations of a series passed again in this run: one "recovered" note each.

A change point's recovery (bench.analysis.history.changes) needs a history long enough to find a step
in: a bound the storage broke one week and kept the next (a bandwidth efficiency under a throttle, a
checkpoint write efficiency) alerted once and was never said to be over. So the verdict's own failures
recover too: an expectation a series failed in its newest judged run before this one (pass or fail,
never an inconclusive run: it said nothing) and that this run judged again without failing it.

The note is keyed like a change point's recovery (CHANGE_KEY: the series, `metric` the expectation's
name, `changed_at` the failing run's start; kind "recovered"), so the alert task sends it once per
target and records it in `change_deliveries`; an expectation name is never a watched figure's, so the
two kinds of recovery never share a key. It is derived from the stored runs before this one and this
run's own rows, so recording the run again lists the same notes.
"""

from __future__ import annotations

import json

import pandas as pd

from bench.analysis.verdict.expectations import CHECKS
from bench.analysis.verdict.rules import FAIL, PASS
from bench.results.schema import SERIES_KEY

JUDGED = (PASS, FAIL)  # verdicts that judged a row's figures (an inconclusive row judged nothing)


def failed(row: dict) -> list[str]:
    """A stored or judged row's failed expectations (JSON text in the results column)."""
    try:
        names = json.loads(row.get("failed_expectations") or "[]")
    except (TypeError, json.JSONDecodeError):
        return []
    return [str(n) for n in names] if isinstance(names, list) else []


def _figure(value) -> str:
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return "n/a"
    return f"{value:.3g}" if isinstance(value, int | float) else str(value)


def verdict_recoveries(previous: pd.DataFrame, frame: pd.DataFrame, suite_run_id: str) -> list[dict]:
    """Notices (kind "recovered", with CHANGE_KEY, `line`, `recovered_in`) for every expectation a row
    of `frame` (this run, judged) passes that its series failed in its newest judged run in
    `previous` (the stored rows, read before or after this run was stored: its own rows are left out)."""
    if previous.empty or frame.empty or "failed_expectations" not in previous:
        return []
    by_name = {c.name: c for c in CHECKS}
    started = str(frame["started_at"].iloc[0])
    earlier = previous[
        (previous["suite_run_id"].astype(str) != suite_run_id)
        & (previous["started_at"].astype(str) < started)
        & previous["verdict"].isin(JUDGED)
    ]
    notices = []
    for row in frame.to_dict("records"):
        if row.get("verdict") not in JUDGED:
            continue
        mine = earlier
        for c in SERIES_KEY:
            mine = mine[mine[c] == (int(row[c]) if c == "gpus" else row[c])]
        if mine.empty:
            continue
        last = mine.sort_values("started_at").iloc[-1].to_dict()
        now_failing = set(failed(row))
        for name in failed(last):
            check = by_name.get(name)
            if check is None or name in now_failing or pd.isna(row.get(check.column)):
                continue  # still failing, or not judged on a figure this time: nothing recovered
            bound = row.get(check.bound_column) if check.bound_column else None
            line = (
                f"{row['workload']} @ {int(row['gpus'])} GPUs, {check.metric}: recovered — "
                f"{_figure(row.get(check.metric))} passes {name} again"
                + (f" (bound {_figure(bound)})" if bound is not None and not pd.isna(bound) else "")
                + f"; it failed at {_figure(last.get(check.metric))} in run {last['suite_run_id']}"
            )
            notices.append(
                {
                    "kind": "recovered",
                    "line": line,
                    **{c: int(row[c]) if c == "gpus" else str(row[c]) for c in SERIES_KEY},
                    "metric": name,
                    "changed_at": str(last["started_at"]),
                    "changed_in": str(last["suite_run_id"]),
                    "recovered_in": suite_run_id,
                }
            )
    return notices
