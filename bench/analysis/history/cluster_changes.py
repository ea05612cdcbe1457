"""The pooled test (bench.analysis.history.pooled) over a history table: `bench detect --online --pool
cluster` (issue 63).

The table has a `cluster` column beside timestamp, model, gpus and the figure; a cluster's runs are its
timestamps grouped where each lies within RUN_GAP of the one before (the scales of one suite run start
hours apart; weekly runs are days apart), each (model, gpus) of it one series, with
its kind from an optional `kind` column (one of pooled.KINDS) or from what it is (series_kind). Every
series is also replayed alone as today (detect.replay): a per-series change that a cluster change of
the same runs covers (the series moved with it) is folded into the cluster's one alert, not sent again;
a drop the noise model confirms only at its watch bounds is listed with status `watch`, never alerted.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.analysis.history import pooled
from bench.analysis.history.detect import (
    DEFAULT_SETTINGS,
    MATCH_RUNS,
    DetectorSettings,
    replay,
    replay_watches,
)
from bench.errors import ResultsInputError
from bench.results.schema import CHECKPOINT_RATES

STORAGE_FIGURES = ("avg_read_mb_s", "peak_read_mb_s", "ceiling_mb_s")
RUN_GAP = pd.Timedelta(hours=24)  # timestamps of one cluster closer than this to the one before: one run


def series_kind(metric: str, gpus: int) -> str:
    """What a series' figure mostly measures, where the table does not say (its `kind` column): a
    checkpoint rate, a storage figure (read rates, the probe's ceiling), a one-GPU training rate
    (compute-bound) or a multi-GPU one (communication: what changes with the scale)."""
    if metric.startswith("ckpt_"):
        return "checkpoint"
    if metric in STORAGE_FIGURES:
        return "storage-bound"
    return "compute-bound" if int(gpus) == 1 else "communication"


def _kinds(history: pd.DataFrame, path) -> pd.Series | None:
    """The table's `kind` column checked (each one of pooled.KINDS), or None where it has none."""
    if "kind" not in history.columns:
        return None
    kinds = history["kind"].astype(str).str.strip()
    wrong = ~kinds.isin(pooled.KINDS)
    if wrong.any():
        row = int(wrong.to_numpy().argmax())
        raise ResultsInputError(
            f"{path}: column 'kind' row {row + 2}: {history['kind'].iloc[row]!r}; one of {', '.join(pooled.KINDS)}"
        )
    return kinds


def run_numbers(stamps: pd.Series) -> np.ndarray:
    """Each row's run of its cluster (0, 1, ... oldest first): the scales of one suite run start hours
    apart, weekly runs days apart, so a run is the timestamps within RUN_GAP of the one before."""
    order = np.argsort(stamps.to_numpy(), kind="stable")
    times = stamps.to_numpy()[order]
    gaps = np.diff(times) > np.timedelta64(RUN_GAP)
    runs = np.empty(len(times), dtype=int)
    runs[order] = np.r_[0, np.cumsum(gaps)] if len(times) else []
    return runs


def cluster_series(history: pd.DataFrame, metric: str, path="history") -> dict[str, tuple[list, list]]:
    """Per cluster: (its runs' timestamps, oldest first; [(model, gpus, PoolSeries)]), each series' values
    aligned to the runs (NaN where it has none)."""
    if "cluster" not in history.columns:
        raise ResultsInputError(
            f"{path}: --pool cluster needs a 'cluster' column (timestamp,model,gpus,{metric},cluster)"
        )
    kinds = _kinds(history, path)
    frame = history.assign(cluster=history["cluster"].astype(str), _kind=kinds if kinds is not None else "")
    frame = frame[frame[metric].notna()]
    out = {}
    for cluster, rows in frame.groupby("cluster", sort=True):
        rows = rows.assign(_run=run_numbers(rows["timestamp"]))
        stamps = rows.groupby("_run")["timestamp"].min().sort_index().tolist()
        members = []
        for (model, gpus), group in rows.groupby(["model", "gpus"], sort=True):
            values = np.full(len(stamps), np.nan)
            group = group.sort_values("timestamp").drop_duplicates("_run", keep="last")
            values[group["_run"].to_numpy()] = group[metric].to_numpy(dtype=float)
            kind = str(group["_kind"].iloc[-1]) or series_kind(metric, int(gpus))
            members.append((str(model), int(gpus), pooled.PoolSeries(f"{model} @ {int(gpus)} GPUs", kind, values)))
        out[str(cluster)] = ([pd.Timestamp(t) for t in stamps], members)
    return out


def cluster_object(cluster: str, event: pooled.ClusterEvent, stamps: list, status: str | None = None) -> dict:
    """The contract's cluster object (issue 63) for one cluster change (or the newest run's `watch`)."""
    j = event.judged
    return {
        "cluster": cluster,
        "scope": "cluster",
        "status": status or pooled.CHANGE,
        "shared_drop": _clean(j.shared_drop),
        "ci_low": _clean(j.ci_low),
        "ci_high": _clean(j.ci_high),
        "series_moved": len(j.moved),
        "series_total": j.series_total,
        "kind": j.kind,
        "detected_at": stamps[event.detected].isoformat(),
        "changed_at": stamps[event.at].isoformat(),
        "runs": j.runs,
        "moved": list(j.moved),
        "unmoved": list(j.unmoved),
        "excluded": list(j.excluded),
        "kinds": {k: _clean(v) for k, v in j.kinds.items()},
        "recovered_at": None,
    }


def _clean(v: float) -> float | None:
    return None if v is None or not np.isfinite(v) else float(v)


def _cluster_objects(cluster: str, found: pooled.PoolReplay, stamps: list) -> list[dict]:
    """Every change the replay confirmed (with `recovered_at` where it came back), and the newest run's
    `watch` where that is the cluster's status now."""
    out: list[dict] = []
    for event in found.events:
        if event.kind == pooled.CHANGE:
            out.append(cluster_object(cluster, event, stamps))
        elif out:  # a recovery closes the change before it
            out[-1]["recovered_at"] = stamps[event.at].isoformat()
    if found.status == pooled.WATCH:
        last = len(stamps) - 1
        watch = pooled.ClusterEvent(pooled.WATCH, last - max(found.latest.runs, 1) + 1, last, found.latest)
        out.append(cluster_object(cluster, watch, stamps, pooled.WATCH))
    return out


def _notes(cluster: str, members: list, runs: int) -> list[dict]:
    """Why a cluster pooled nothing, or which series stayed out, at its newest run."""
    ref = np.arange(max(0, runs - pooled.noise.MAX_RUNS - pooled.noise.REFERENCE_RUNS), max(0, runs - 1))
    std = pooled.standardize([s for _, _, s in members], ref, ref)
    notes = []
    if len(std.names) < pooled.MIN_POOL:
        notes.append(
            {
                "cluster": cluster,
                "note": f"{len(std.names)} series with history, {pooled.MIN_POOL} needed: nothing pooled",
            }
        )
    if std.excluded:
        notes.append({"cluster": cluster, "note": f"left out (too little history): {', '.join(std.excluded)}"})
    return notes


def _series_rows(cluster: str, model: str, gpus: int, values: np.ndarray, stamps: list, settings) -> list[dict]:
    """One series' online change points as today (status `change`) and its watch-only drops (`watch`)."""
    keep = np.isfinite(values)
    v, when = values[keep], [s for s, k in zip(stamps, keep, strict=True) if k]
    flagged = replay(v, settings)
    rows = []
    for f in flagged:
        step = f.step
        rows.append(
            _series_row(cluster, model, gpus, when, step.index, step.before, step.after, step.change, step.confidence)
            | {"detected_at": when[f.flagged_at].isoformat(), "confirmed": f.last_seen == len(v) - 1}
            | {"alerted": f.alerted, "status": "change", "pvalue": step.pvalue}
        )
    for at, seen, drop in replay_watches(v, flagged):
        after = drop.level * (1 - drop.size)
        rows.append(
            _series_row(cluster, model, gpus, when, at, drop.level, after, -drop.size, drop.confidence)
            | {"detected_at": when[seen].isoformat(), "confirmed": False, "alerted": False, "status": "watch"}
            | {"pvalue": 1 - drop.confidence, "drop_ci": [_clean(drop.ci_low), _clean(drop.ci_high)], "runs": drop.runs}
        )
    return rows


def _series_row(cluster, model, gpus, when, index, before, after, change, confidence) -> dict:
    return {
        "cluster": cluster,
        "model": model,
        "gpus": gpus,
        "timestamp": when[index].isoformat(),
        "before": _clean(before),
        "after": _clean(after),
        "change": _clean(change),
        "confidence": _clean(confidence),
    }


def _fold(rows: list[dict], clusters: list[dict], stamps: list, match_runs: int = MATCH_RUNS) -> None:
    """Mark the per-series alerts a cluster change covers (the series moved with it, a drop within
    `match_runs` of its runs): folded into the cluster's one alert, not sent again."""
    where = {s.isoformat(): i for i, s in enumerate(stamps)}
    for c in clusters:
        if c["status"] != pooled.CHANGE:
            continue
        at = where[c["changed_at"]]
        for r in rows:
            name = f"{r['model']} @ {r['gpus']} GPUs"
            near = abs(where[r["timestamp"]] - at) <= match_runs and (r["change"] or 0) < 0
            if r["alerted"] and name in c["moved"] and near:
                r["alerted"], r["folded_into"] = False, c["changed_at"]


def pool_report(history: pd.DataFrame, metric: str, settings: DetectorSettings = DEFAULT_SETTINGS, path="history"):
    """{"clusters": [cluster objects], "change_points": [per-series rows], "notes": [...]} of a history
    table replayed run by run (`bench detect --online --pool cluster`)."""
    clusters, rows, notes = [], [], []
    for cluster, (stamps, members) in cluster_series(history, metric, path).items():
        found = pooled.replay_pool([s for _, _, s in members], len(stamps))
        objects = _cluster_objects(cluster, found, stamps)
        mine = [r for m, g, s in members for r in _series_rows(cluster, m, g, s.values, stamps, settings)]
        _fold(mine, objects, stamps)
        clusters += objects
        rows += sorted(mine, key=lambda r: (r["model"], r["gpus"], r["timestamp"]))
        notes += _notes(cluster, members, len(stamps))
    return {"clusters": clusters, "change_points": rows, "notes": notes}


# The figures the overview pools per series (where its runs have them): images/s and the checkpoint rates.
POOLED_FIGURES = ("throughput_img_s", *CHECKPOINT_RATES)
OPEN = ("pending", "alerted", "recorded")  # a stored cluster change nobody saw recover


def _recent_members(rows: pd.DataFrame) -> tuple[list[str], list[pooled.PoolSeries]]:
    """A cluster's shown runs (suite run ids, oldest first) and its series' accepted figures on them."""
    accepted = rows[rows["accepted"].fillna(False).astype(bool)]
    order = accepted.groupby("suite_run_id")["started_at"].min().sort_values()
    runs = [str(r) for r in order.index]
    where = {r: i for i, r in enumerate(runs)}
    members = []
    for (workload, gpus, config), group in accepted.groupby(["workload", "gpus", "config_key"], sort=True):
        for figure in (f for f in POOLED_FIGURES if f in group.columns):
            values = np.full(len(runs), np.nan)
            got = group[group[figure].notna()]
            if got.empty:
                continue
            values[[where[str(r)] for r in got["suite_run_id"]]] = got[figure].to_numpy(dtype=float)
            name = f"{workload} @ {int(gpus)} GPUs" + ("" if figure == POOLED_FIGURES[0] else f" {figure}")
            name += f" ({config})" if accepted["config_key"].nunique() > 1 else ""
            members.append(pooled.PoolSeries(name, series_kind(figure, int(gpus)), values))
    return runs, members


def _stored(cluster: str, changes: pd.DataFrame | None) -> dict | None:
    """The newest open cluster change stored for `cluster` (scope cluster), as the contract's object."""
    if changes is None or changes.empty or "scope" not in changes.columns:
        return None
    mine = changes[(changes["scope"] == "cluster") & (changes["cluster"] == cluster) & changes["state"].isin(OPEN)]
    if mine.empty:
        return None
    row = mine.sort_values("changed_at").iloc[-1].to_dict()
    return stored_object(row)


def stored_object(row: dict) -> dict:
    """A stored cluster change (a change_alerts row of scope cluster) as the contract's object."""
    import json

    moved, unmoved = json.loads(row.get("moved") or "[]"), json.loads(row.get("unmoved") or "[]")
    return {
        "cluster": row["cluster"],
        "scope": "cluster",
        "status": pooled.CHANGE,
        "shared_drop": _clean(-float(row["size"])) if row.get("size") is not None else None,
        "ci_low": _clean(row.get("drop_ci_low")),
        "ci_high": _clean(row.get("drop_ci_high")),
        "series_moved": len(moved),
        "series_total": len(moved) + len(unmoved),
        "kind": row.get("moved_most"),
        "detected_at": str(row["detected_at"]),
        "changed_at": str(row["changed_at"]),
        "moved": moved,
        "unmoved": unmoved,
    }


def recent_clusters(recent: pd.DataFrame, changes: pd.DataFrame | None = None) -> dict[str, dict]:
    """Per cluster, the pooled status of its shown runs (the overview's roll-up, issue 63): a stored open
    cluster change (the weekly check's) is `change`; else the pooled judgement of the newest runs against
    the shown ones before them (`ok`, `watch`, or `change` where the newest run confirms one the store
    does not hold yet), with the shared drop where it is not `ok` and a note where nothing was pooled.
    One judgement per cluster, not a replay: a page stays as fast with many clusters."""
    out: dict[str, dict] = {}
    if recent.empty:
        return out
    for cluster, rows in recent.groupby("cluster", sort=True):
        cluster = str(cluster)
        stored = _stored(cluster, changes)
        if stored is not None:
            out[cluster] = stored
            continue
        runs, members = _recent_members(rows)
        split = pooled._windows(list(range(len(runs))))
        judged = pooled.judge_pool(members, *split) if split else pooled.Pooled(pooled.OK, note="too few runs shown")
        out[cluster] = _live_object(cluster, judged, runs, rows)
    return out


def _live_object(cluster: str, judged: pooled.Pooled, runs: list[str], rows: pd.DataFrame) -> dict:
    """The roll-up's object from the judgement of the newest shown runs."""
    stamps = rows.groupby("suite_run_id")["started_at"].min()
    at = [pd.Timestamp(stamps[r]) for r in runs]
    if judged.status in (pooled.CHANGE, pooled.WATCH):
        last = len(runs) - 1
        event = pooled.ClusterEvent(judged.status, last - max(judged.runs, 1) + 1, last, judged)
        obj = cluster_object(cluster, event, at, judged.status)
    else:
        obj = {"cluster": cluster, "scope": "cluster", "status": pooled.OK, "shared_drop": None, "ci_low": None}
        obj |= {"ci_high": None, "series_moved": 0, "series_total": judged.series_total, "kind": None}
        obj |= {"detected_at": None}
    return obj | {"note": judged.note}
