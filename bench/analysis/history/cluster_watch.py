"""The weekly check's cluster-wide changes (issue 63): after a run is stored, the series of each of its
clusters (same DAG, every workload and scale the cluster's history has, their images/s and checkpoint
rates) are pooled (bench.analysis.history.pooled) over their accepted history, and a shared drop this
run confirmed is stored once as a change point of scope `cluster` (pending: sent once, to every target,
as any change point), naming the series that moved and those that did not, the shared size with its 95%
interval and the kind of figure that moved most. The series' own change points this run found that the
cluster change covers (the series moved with it, a drop within detect.MATCH_RUNS of it) are recorded,
not sent: one alert per shared drop. A stored cluster change whose pooled figure this run saw come back
turns `recovered`, with one note.

A cluster row is keyed like a series' change point: (cluster, workload "*", gpus 0, config_key the
DAG id, metric "pooled", changed_at); the store's `scope` column says what it is (revision 0022).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from bench.analysis.history import pooled
from bench.analysis.history.changes import step_size
from bench.analysis.history.cluster_changes import POOLED_FIGURES, series_kind
from bench.analysis.history.detect import MATCH_RUNS
from bench.results.schema import ALERTED, PENDING, RECORDED, RECOVERED

POOLED_METRIC = "pooled"
ALL = "*"
SCOPE = "cluster"
NEWS = (PENDING, ALERTED)


def cluster_key(cluster: str, dag_id: str) -> dict:
    """The change-point key fields of a cluster change of `dag_id`'s runs on `cluster`."""
    return {"cluster": cluster, "workload": ALL, "gpus": 0, "config_key": dag_id or ALL, "metric": POOLED_METRIC}


def _histories(store, frame: pd.DataFrame, suite_run_id: str) -> dict[tuple[str, str], list]:
    """(cluster, DAG of this run) -> [(series key, its accepted runs)] for every series of this run."""
    accepted = frame[frame["accepted"].fillna(False).astype(bool)]
    out: dict[str, list] = {}
    for r in accepted.drop_duplicates(["cluster", "workload", "gpus", "config_key"]).itertuples():
        key = (str(r.cluster), str(r.workload), int(r.gpus), str(r.config_key))
        out.setdefault(key[0], []).append((key, store.accepted_series(*key)))
    return {(cluster, _dag(histories, suite_run_id)): histories for cluster, histories in out.items()}


def _dag(histories: list[tuple[tuple, pd.DataFrame]], suite_run_id: str) -> str:
    """The DAG this run's stored rows belong to (ALL for a run made outside Airflow)."""
    for _key, h in histories:
        mine = h[h["suite_run_id"] == suite_run_id] if "dag_id" in h else h.iloc[:0]
        if not mine.empty and str(mine["dag_id"].iloc[-1]):
            return str(mine["dag_id"].iloc[-1])
    return ALL


def pool_members(histories: list[tuple[tuple, pd.DataFrame]]) -> tuple[list[str], list[str], list, dict]:
    """(run ids oldest first, their start times, [PoolSeries], name -> series key) of one cluster."""
    runs = pd.concat([h[["suite_run_id", "started_at"]] for _, h in histories if not h.empty], ignore_index=True)
    if runs.empty:
        return [], [], [], {}
    order = runs.groupby("suite_run_id")["started_at"].min().sort_values()
    ids, stamps = [str(i) for i in order.index], [str(s) for s in order.to_numpy()]
    where = {r: i for i, r in enumerate(ids)}
    members, names = [], {}
    for key, h in histories:
        for figure in (f for f in POOLED_FIGURES if f in h.columns):
            got = h[h[figure].notna()]
            if got.empty:
                continue
            values = np.full(len(ids), np.nan)
            values[[where[str(r)] for r in got["suite_run_id"]]] = got[figure].to_numpy(dtype=float)
            name = f"{key[1]} @ {key[2]} GPUs" + ("" if figure == POOLED_FIGURES[0] else f" {figure}")
            members.append(pooled.PoolSeries(name, series_kind(figure, key[2]), values))
            names[name] = key
    return ids, stamps, members, names


def _row(key: dict, event: pooled.ClusterEvent, ids: list[str], stamps: list[str]) -> dict:
    """The change_alerts row of a cluster change this run confirmed."""
    from math import erfc, sqrt

    j = event.judged
    return key | {
        "changed_at": stamps[event.at],
        "changed_in": ids[event.at],
        "detected_at": stamps[event.detected],
        "detected_in": ids[event.detected],
        "before": None,
        "after": None,
        "change": -j.shared_drop,
        "size": -j.shared_drop,
        "pvalue": 0.5 * erfc(j.z / sqrt(2)),
        "drop_ci_low": j.ci_low,
        "drop_ci_high": j.ci_high,
        "confirmed_runs": j.runs,
        "state": PENDING,
        "recovered_at": None,
        "recovered_in": None,
        "scope": SCOPE,
        "moved_most": j.kind,
        "moved": json.dumps(list(j.moved)),
        "unmoved": json.dumps(list(j.unmoved)),
    }


def watch_clusters(store, frame: pd.DataFrame, suite_run_id: str) -> None:
    """Store the cluster changes this run confirmed and the recoveries it saw, then fold the series' own
    change points this run found that an open cluster change covers (after the series' own are stored:
    covered ones turn from pending to recorded, whether the cluster change was confirmed in this run or
    earlier: a series alone confirms a shared drop a run or two after the pool does)."""
    for (cluster, dag), histories in _histories(store, frame, suite_run_id).items():
        ids, stamps, members, names = pool_members(histories)
        if not ids or ids[-1] != suite_run_id:
            continue  # this run added no pooled figure to the cluster
        found = pooled.replay_pool(members, len(ids))
        key = cluster_key(cluster, dag)
        known = _cluster_rows(store, cluster, key)
        stored = set(known["changed_at"].astype(str))
        for event in (e for e in found.events if e.detected == len(ids) - 1):
            if event.kind == pooled.CHANGE and stamps[event.at] not in stored:
                store.upsert_change(_row(key, event, ids, stamps))
            elif event.kind == pooled.RECOVERED and event.closes is not None:
                closed = known["state"].isin(NEWS) & known["changed_at"].astype(str).eq(stamps[event.closes])
                for row in known[closed].to_dict("records"):  # only the change it closes: one note
                    back = {"state": RECOVERED, "recovered_at": stamps[event.at], "recovered_in": suite_run_id}
                    store.upsert_change(row | back)
        where = {s: i for i, s in enumerate(ids)}  # a series' change is placed by its run (its own start differs)
        rows = store.change_alerts(cluster)  # read once: the folds below change series rows' states only
        mine = rows[rows["detected_in"].eq(suite_run_id) & rows["state"].eq(PENDING)].to_dict("records")
        for row in _cluster_rows(store, cluster, key, rows).to_dict("records"):
            if row["state"] in NEWS:  # its drop: the series' own drops near its first run
                _fold(store, mine, row, names, where, where.get(str(row["changed_in"])), -1)
            elif row["state"] == RECOVERED and str(row.get("recovered_at")) in stamps:  # its way back: their rises
                _fold(store, mine, row, names, where, stamps.index(str(row["recovered_at"])), 1)


def _cluster_rows(store, cluster: str, key: dict, rows: pd.DataFrame | None = None) -> pd.DataFrame:
    """The stored cluster changes of `key`'s DAG on `cluster` (from `rows` where already read)."""
    rows = store.change_alerts(cluster) if rows is None else rows
    if rows.empty or "scope" not in rows:
        return rows.assign(changed_at=pd.Series(dtype=str), state=pd.Series(dtype=str))
    mine = rows["scope"].eq(SCOPE) & rows["config_key"].eq(key["config_key"])
    return rows[mine]


def _fold(store, found: list[dict], change: dict, names: dict, where: dict, first: int | None, sign: int) -> None:
    """Of the series' change points this run found (`found`: pending, detected in this run), those the
    stored cluster change `change` covers: their series moved with it, and a step of `sign` (-1 a drop, +1
    a rise: the way back of a recovered one) within detect.MATCH_RUNS of run `first` (its first run, or
    its first run back). Recorded, not sent: one notice per shared drop, one note for its recovery."""
    listed = change.get("moved")
    moved = {names[n] for n in json.loads(listed if isinstance(listed, str) else "[]") if n in names}
    if first is None or not moved:
        return
    for row in found:
        key = (str(row["cluster"]), str(row["workload"]), int(row["gpus"]), str(row["config_key"]))
        at = where.get(str(row["changed_in"]))
        if (
            row.get("scope") != SCOPE
            and key in moved
            and at is not None
            and abs(at - first) <= MATCH_RUNS
            and step_size(row.get("size"), row["change"]) * sign > 0
        ):
            store.upsert_change(row | {"state": RECORDED})


def cluster_notices(store, frame: pd.DataFrame, suite_run_id: str) -> list[dict]:
    """The cluster changes this run confirmed and the recoveries it saw, read back from the store (so a
    rerun lists the same ones), as the outcome carries notices: kind, line and the row."""
    from bench.analysis.history.changes import Notice

    out = []
    for cluster in sorted(set(frame["cluster"].astype(str))):
        rows = store.change_alerts(cluster)
        if rows.empty or "scope" not in rows:
            continue
        for r in rows[rows["scope"].eq(SCOPE)].to_dict("records"):
            r = {k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()}
            if r["detected_in"] == suite_run_id and r["state"] in (*NEWS, RECOVERED):
                out.append(Notice("change", r))
            if r["state"] == RECOVERED and r["recovered_in"] == suite_run_id:
                out.append(Notice("recovered", r))
    return [{"kind": n.kind, "line": n.line(), **n.row} for n in out]
