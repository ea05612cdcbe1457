"""The node ceiling checked before it becomes an ideal (issue 62, item 2): an ideal that cannot hide a loss.

A scale judged against its node ceiling (`ideal: independent`: the same ranks on the same slots as
independent copies) passes whatever took the node's capacity, as long as the ceiling lost it too: beside a
busy loop both fell, and 2 ranks at 127.8 images/s (one rank: 166.4) passed at 0.733 of a ceiling that ran
under the same loop. Interference by a process is caught by its own rule (verdict.interference); this
module checks the ceiling figure itself, whatever took it down:

1. against one rank: N independent copies on N slots that give fewer images/s than one rank alone did
   (the scale's baseline; by more than ONE_RANK_MARGIN, a run's own noise) measure no node the suite can
   stand behind; the scale is judged against linear;
2. against its own history on that node (the accepted runs of the series, from its newest re-baseline):
   a ceiling under its series' regression floor (the floor images/s regressions are judged by) fell, and
   the scale is judged against the ceiling's history median instead.

Either way the row says so in `ceiling_note`, with what the ceiling run saw on its cores (the largest
foreign share it measured, or that there was none: the node itself gave less). The ceiling stored for
the row stays what was measured: history learns the figure, never the substitute.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from bench.analysis.verdict import bounds
from bench.analysis.verdict.interference import culprits

FIGURE = "independent_img_s"
# The ceiling the independent ideal is computed from (scaling.derive reads it where present; dropped after).
JUDGED = "ceiling_judged_img_s"
# A foreign share in the ceiling run at or above this is named as what its cores saw (under the interference
# bound: that rule made the scale INCONCLUSIVE above it).
NAMED_SHARE = 0.02
# What begins the check's clause in `ceiling_note` (always its last: the alert quotes it from there).
PREFIX = "ceiling check: "
# How far under one rank's images/s N copies may measure before the ceiling is no ideal: more than a
# run's noise on a busy 2-core box (two runs of one rank here differ by up to ~5%).
ONE_RANK_MARGIN = 0.10


def _finite(value) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def judged_ceilings(
    frame: pd.DataFrame, history: pd.DataFrame | None, tolerance: float, ideal: str = "independent"
) -> pd.DataFrame:
    """`ceiling_judged_img_s` per row (the measured ceiling, or what replaces it where it fell) and
    `ceiling_note` extended with why. `history`: history_stats of `independent_img_s` per row (None: no
    store, only the one-rank check). Only where the suite's ideal is the ceiling (`independent`): against
    linear (GPU slots) the ceiling judges nothing, and no note says it did."""
    from bench.analysis.history.regression import regression_floor

    f = frame.copy()
    if ideal != "independent":
        f[JUDGED] = f.get(FIGURE, np.nan)
        return f
    floors = regression_floor(history, tolerance)[0] if history is not None else pd.Series(np.nan, index=f.index)
    judged, notes = [], []
    for idx, row in f.iterrows():
        value, why = _judged(row, f, history.loc[idx] if history is not None else None, floors.get(idx))
        judged.append(value)
        before = str(row.get("ceiling_note") or "")
        notes.append("; ".join(n for n in (before, why) if n))
    f[JUDGED] = judged
    f["ceiling_note"] = notes
    return f


def _judged(row: pd.Series, frame: pd.DataFrame, stats: pd.Series | None, floor) -> tuple[float, str]:
    """(the ceiling the ideal uses, why it is not the measured one: '' where it is)."""
    ceiling, gpus = row.get(FIGURE), int(row["gpus"])
    if gpus <= 1 or not _finite(ceiling) or bool(row.get("oversubscribed", False)):
        return ceiling, ""
    one_rank = _one_rank(frame, row["workload"])
    if one_rank is not None and ceiling < (1 - ONE_RANK_MARGIN) * one_rank:
        linear = gpus * one_rank
        why = (
            f"{PREFIX}node ceiling {ceiling:.1f} images/s for {gpus} ranks is under one rank's {one_rank:.1f} "
            f"({_cores(row)}): judged against linear ({linear:.1f})"
        )
        return linear, why
    if stats is not None and _finite(floor) and bounds.fails(bounds.REGRESSION, ceiling, floor):
        median, runs = float(stats["history_median"]), int(stats["history_n"])
        why = (
            f"{PREFIX}node ceiling {ceiling:.1f} images/s for {gpus} ranks fell under its history's floor {floor:.1f} "
            f"(median {median:.1f} over {runs} runs; {_cores(row)}): judged against {median:.1f}"
        )
        return median, why
    return ceiling, ""


def check_text(row) -> str:
    """The check's clause of a row's `ceiling_note` ('' where the ceiling was used as measured)."""
    note = str(row.get("ceiling_note") or "")
    return note[note.find(PREFIX) :] if PREFIX in note else ""


def _one_rank(frame: pd.DataFrame, workload: str) -> float | None:
    """One rank's images/s in this run: the workload's 1-rank scale, where it ran and its figure is valid
    (a run too short for a rate, or cache-distorted, judges no ceiling)."""
    one = frame[(frame["workload"] == workload) & (frame["gpus"] == 1)]
    if one.empty or not bool(one["valid"].iloc[0] if "valid" in one else True):
        return None
    value = one["throughput_img_s"].iloc[0]
    return float(value) if _finite(value) else None


def _cores(row: pd.Series) -> str:
    """What the ceiling run's cores saw: the largest foreign share it measured per node, or none."""
    try:
        ranks = json.loads(row.get("ceiling_foreign_ranks") or "[]")
    except (TypeError, ValueError):
        ranks = []
    seen = culprits(ranks if isinstance(ranks, list) else [], NAMED_SHARE)
    return f"its run saw {seen}" if seen else "no foreign process on its cores: the node itself gave less"
