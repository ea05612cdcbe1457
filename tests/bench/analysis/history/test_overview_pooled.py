"""The overview's per-cluster roll-up carries the pooled status (issue 63): `change` for a shared drop
(stored by the weekly check, or confirmed by the shown runs), `watch` for one low week across the
cluster, `ok` otherwise, with a note where too few series pool; a line's single-series `watch` carries
its size and interval. Frames as the store returns them, drawn with a fixed seed."""

import numpy as np
import pandas as pd

from bench.analysis.history.overview import overview_lines, rollup
from tests.bench.analysis.history.test_overview import NOW

SERIES = (("ssd", 1), ("ssd", 2), ("retinanet-b200", 1), ("retinanet-b200", 2))


def cluster(cluster: str, low: list[float], series=SERIES, seed: int = 6360, runs: int = 16) -> pd.DataFrame:
    """The newest `runs` rows of each series of a cluster (1% own noise, 0.5% shared), one suite run per
    week shared by its series, the last len(low) runs scaled by `low`."""
    rng = np.random.default_rng(seed)
    shared = rng.normal(0, 0.005, runs)
    rows = []
    for i, (workload, gpus) in enumerate(series):
        values = rng.uniform(100, 500) * np.exp(rng.normal(0, 0.01, runs) + shared)
        values[runs - len(low) :] *= low
        for w in range(runs):
            started = NOW - pd.Timedelta(weeks=runs - 1 - w) + pd.Timedelta(hours=i)
            rows.append(
                {"dag_id": "d", "suite_run_id": f"{cluster}-w{w}", "cluster": cluster, "workload": workload}
                | {"gpus": gpus, "config_key": "k", "started_at": started.isoformat(), "accepted": True}
                | {"verdict": "pass", "throughput_img_s": float(values[w]), "scaling_efficiency": 0.9}
            )
    return pd.DataFrame(rows)


def pooled_by_cluster(recent: pd.DataFrame, changes: pd.DataFrame | None = None) -> dict[str, dict]:
    return {c["cluster"]: c["pooled"] for c in rollup(overview_lines(recent, changes, None, NOW))}


def test_the_roll_up_says_watch_or_ok_with_the_shared_drop():
    """The shown runs (16 a series) are too few for the pool to confirm a change (pooled.MIN_REFERENCE_RUNS):
    what they suspect is `watch`, with its shared drop; `change` is the weekly check's, stored (below)."""
    recent = pd.concat(
        [
            cluster("a", [0.96, 0.96]),  # two runs 4% low in every series: a shared drop
            cluster("b", [0.955], seed=6361),  # one low week across the cluster
            cluster("c", [], seed=6362),
            cluster("d", [0.96, 0.96], series=SERIES[:2], seed=6363),  # two series: nothing pooled
        ]
    )
    pooled = pooled_by_cluster(recent)
    assert {k: v["status"] for k, v in pooled.items()} == {"a": "watch", "b": "watch", "c": "ok", "d": "ok"}
    assert pooled["b"]["series_moved"] >= 3 and pooled["c"]["shared_drop"] is None
    a = pooled["a"]
    assert set(a) >= {"cluster", "status", "shared_drop", "ci_low", "ci_high", "series_moved", "series_total"}
    assert a["ci_low"] < 0.04 < a["ci_high"] and (a["series_moved"], a["series_total"]) == (4, 4)
    assert a["kind"] in ("compute-bound", "communication") and a["detected_at"].startswith(str(NOW.date()))
    assert "2 series with history, 3 needed: nothing pooled" in pooled["d"]["note"]


def test_a_stored_cluster_change_is_the_roll_ups_change_until_it_recovers():
    recent = cluster("c", [], seed=6362)
    stored = {"cluster": "c", "workload": "*", "gpus": 0, "config_key": "d", "metric": "pooled", "scope": "cluster"}
    stored |= {"changed_at": "2026-11-02", "detected_at": "2026-11-09", "size": -0.03, "drop_ci_low": 0.02}
    stored |= {"drop_ci_high": 0.04, "moved_most": "storage-bound", "moved": '["ssd @ 1 GPUs"]', "unmoved": "[]"}
    pooled = pooled_by_cluster(recent, pd.DataFrame([stored | {"state": "alerted"}]))["c"]
    assert (pooled["status"], pooled["shared_drop"], pooled["kind"]) == ("change", 0.03, "storage-bound")
    assert pooled_by_cluster(recent, pd.DataFrame([stored | {"state": "recovered"}]))["c"]["status"] == "ok"


def test_a_single_series_watch_line_carries_its_size_and_interval():
    recent = cluster("c", [], seed=6364)
    one = recent["workload"].eq("ssd") & recent["gpus"].eq(1) & recent["suite_run_id"].isin(["c-w14", "c-w15"])
    recent.loc[one, "throughput_img_s"] *= 0.965  # one series, two runs 3.5% low: watch, not alerted
    (line,) = [x for x in overview_lines(recent, None, None, NOW) if (x["workload"], x["gpus"]) == ("ssd", 1)]
    assert line["status"] == "watch"
    drop = line["watch_drop"]
    assert drop["ci_low"] < drop["size"] < drop["ci_high"] and drop["runs"] >= 1
