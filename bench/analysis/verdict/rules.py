"""Which rows the suite can stand behind, and each row's verdict: pass, fail or inconclusive.

A figure measured too briefly, with unsteady steps, or scaled against a baseline that is itself not
conclusive, is INCONCLUSIVE with its reason: neither passed nor failed, never accepted into history.
The verdict compares the point estimate with its bound; an interval that straddles the bound only
labels the row borderline.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from bench.analysis.verdict import bounds
from bench.analysis.verdict.interference import PREFIX as INTERFERENCE
from bench.analysis.verdict.interference import culprits, share_bound
from bench.config.models import Thresholds
from bench.slots import contention_summary

PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"
# measured_s may fall short of min_measure_s by this much (timer granularity between ranks) and still count
WINDOW_SLACK = 0.98


def _finite(value) -> bool:
    return value is not None and isinstance(value, (int, float, np.floating)) and math.isfinite(value)


def contention_note(slots_json) -> str:
    """The ranks' own `contention` notes (ranks that shared cores or a GPU nobody planned to share), joined."""
    try:
        slots = json.loads(slots_json) if isinstance(slots_json, str) and slots_json else []
    except json.JSONDecodeError:
        return ""
    return contention_summary([s for s in slots if isinstance(s, dict)])


def _ranks(raw) -> list[dict]:
    try:
        ranks = json.loads(raw) if isinstance(raw, str) and raw else []
    except json.JSONDecodeError:
        return []
    return [x for x in ranks if isinstance(x, dict)] if isinstance(ranks, list) else []


def interference_note(row: dict, limit: float) -> str:
    """'interference: ...' naming the process on each node where the scale's ranks, or the node ceiling's
    it is judged against, lost more than `limit` of their cores to foreign work; '' where neither did."""
    own = culprits(_ranks(row.get("rank_breakdown")), limit)
    judged_by_ceiling = row.get("ideal") == "independent" and int(row.get("gpus") or 0) > 1
    ceiling = culprits(_ranks(row.get("ceiling_foreign_ranks")), limit) if judged_by_ceiling else ""
    parts = [own] if own else []
    parts += [f"node ceiling run: {ceiling}"] if ceiling else []
    if not parts:
        return ""
    again = "; still there when measured again after the last scale" if bool(row.get("remeasured", False)) else ""
    return f"{INTERFERENCE} {'; '.join(parts)} (over {limit:.0%} of a rank's cores: max_foreign_share){again}"


def measurement_problems(frame: pd.DataFrame, thresholds: Thresholds) -> pd.Series:
    """Why each valid row's own measurement cannot be trusted ("" where it can)."""
    reasons = []
    spread_limit = bounds.bound(bounds.STEP_TIME_SPREAD, 0, thresholds)
    foreign_limit = share_bound(thresholds)
    for r in frame.to_dict("records"):
        why = ""
        if bool(r.get("valid", False)):
            measured, wanted = r.get("measured_s"), r.get("min_measure_s")
            spread = r.get("step_time_spread")
            shared = contention_note(r.get("slots"))
            neighbours = interference_note(r, foreign_limit)
            if shared:  # ranks fought over cores: a figure of the contention, not of the infrastructure
                why = f"ranks shared cores or a GPU: {shared}"
            elif neighbours:  # somebody else's work took the cores: not the infrastructure's figure
                why = neighbours
            elif _finite(r.get("storage_errors")) and r["storage_errors"] > 0:  # the store dropped GETs
                why = (
                    f"the store failed {int(r['storage_errors'])} GET(s) that the ranks tried again: its figures "
                    "hold the stalls of a store dropping connections"
                )
            elif not _finite(r.get("throughput_img_s")) or r["throughput_img_s"] <= 0:
                why = "no positive measured throughput"
            elif _finite(wanted) and bounds.fails(bounds.MEASURED, measured, WINDOW_SLACK * wanted):
                why = f"measured {measured:.1f}s, shorter than min_measure_s {wanted:g}s"
            elif bounds.fails(bounds.STEP_TIME_SPREAD, spread, spread_limit):
                why = (
                    f"step times too unstable: spread (p90-p10)/median {spread:.2f} > "
                    f"max_step_time_spread {spread_limit:g}"
                )
        reasons.append(why)
    return pd.Series(reasons, index=frame.index, dtype=object)


def with_baseline_problems(frame: pd.DataFrame, reasons: pd.Series) -> pd.Series:
    """A scale compared with a baseline that is missing, failed or inconclusive cannot be judged either."""
    out = reasons.copy()
    for idx, r in frame.iterrows():
        if out[idx] or not bool(r.get("valid", False)) or r["gpus"] == r.get("baseline_gpus"):
            continue
        base = frame[(frame["workload"] == r["workload"]) & (frame["gpus"] == r.get("baseline_gpus"))]
        if base.empty or not bool(base["valid"].iloc[0]):
            out[idx] = f"no valid baseline at {r.get('baseline_gpus')} GPU(s) to scale against"
        elif reasons[base.index[0]]:
            why = reasons[base.index[0]]
            lead = f"{INTERFERENCE} " if why.startswith(INTERFERENCE) else ""  # the cause stays first
            out[idx] = f"{lead}baseline at {int(r['baseline_gpus'])} GPU(s) is inconclusive ({why})"
        elif not _finite(r.get("scaling_efficiency")):
            out[idx] = "scaling efficiency could not be computed"
    return out


def row_verdicts(frame: pd.DataFrame, failed: dict[tuple[str, int], list[str]]) -> pd.DataFrame:
    """verdict, borderline per row; `failed` lists each row's critical expectation failures."""
    f = frame.copy()
    verdicts, borderline = [], []
    for r in f.to_dict("records"):
        key = (r["workload"], int(r["gpus"]))
        if r.get("state") != "COMPLETED" or not bool(r.get("valid", False)):
            verdicts.append(FAIL)
        elif r.get("inconclusive_reason"):
            verdicts.append(INCONCLUSIVE)
        elif failed.get(key):
            verdicts.append(FAIL)
        else:
            verdicts.append(PASS)
        lo, hi, bound = (
            r.get("scaling_efficiency_ci_low"),
            r.get("scaling_efficiency_ci_high"),
            r.get("min_scaling_efficiency"),
        )
        borderline.append(bounds.straddles(bounds.SCALING_EFFICIENCY, lo, hi, bound))
    f["verdict"], f["borderline"] = verdicts, borderline
    return f


def suite_verdict(frame: pd.DataFrame) -> str:
    if (frame["verdict"] == FAIL).any():
        return "FAILED"
    if (frame["verdict"] == INCONCLUSIVE).any():
        return "INCONCLUSIVE"
    return "PASSED"


def oversubscription_note(row: pd.Series) -> str:
    """'oversubscribed: 4 ranks on 2 slot(s)' from the rows' recorded slots ('' when not oversubscribed)."""
    if not bool(row.get("oversubscribed", False)):
        return ""
    slots = json.loads(row.get("slots") or "[]")
    distinct = {(s["host"], tuple(s["cpus"]), s.get("gpu")) for s in slots}
    return f"oversubscribed: {int(row['gpus'])} ranks on {len(distinct)} slot(s); ranks shared cores"
