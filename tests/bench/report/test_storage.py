"""The report's storage section: what it says about the probe's reads."""

from __future__ import annotations

import pandas as pd

from bench.report import storage


def _probe(**level_keys) -> dict:
    level = {"jobs": 1, "mb_s": 200.0, "bytes": 600_000_000, "seconds": 3.0, **level_keys}
    return {
        "paths": ["/data/coco"],
        "ceiling_mb_s": 200.0,
        "levels": [level, {**level, "jobs": 2}],
        "repeat": {**level, "jobs": 2},
        "method": "direct",
        "block_size": 131072,
        "sample_files": 4096,
        "sample_bytes": 10**9,
        "conclusive": True,
        "reason": "",
        "probed_at": "2026-12-04T00:00:00",
    }


NO_HISTORY = pd.DataFrame(columns=["suite_run_id", "probed_at", "ceiling_mb_s", "conclusive"])


def test_reads_that_came_back_to_touched_files_are_counted_and_old_probes_are_not_called_rereads():
    frame = pd.DataFrame({"workload": ["ssd"], "gpus": [1]})
    probe = _probe(fresh=True)
    probe["repeat"] = {**probe["repeat"], "fresh": False}
    shown = storage.context(frame, probe, NO_HISTORY, "run-1")["probe"]
    assert (shown["rereads"], shown["reads"]) == (1, 3)
    old = storage.context(frame, _probe(), NO_HISTORY, "run-1")["probe"]  # written before "fresh" existed
    assert (old["rereads"], old["reads"]) == (0, 3)


def test_the_aggregate_curve_is_drawn_against_nodes_beside_each_scales_epoch_1_read():
    import json

    hosts = [json.dumps([{"host": "a"}]), json.dumps([{"host": "a"}, {"host": "b"}])]
    frame = pd.DataFrame(
        {"workload": ["ssd", "ssd"], "gpus": [1, 2], "avg_read_mb_s": [2.5, 4.9], "rank_breakdown": hosts}
    )
    probe = _probe() | {
        "per_node_mb_s": 200.0,
        "aggregate": [
            {"nodes": 1, "mb_s": 200.0, "min_node_mb_s": 200.0},
            {"nodes": 2, "mb_s": 210.0, "min_node_mb_s": 98.0},
        ],
        "bound": "store",
    }
    charts = [str(c) for c in storage.context(frame, probe, NO_HISTORY, "run-1")["storage_charts"]]
    drawn = [c for c in charts if "nodes reading at once" in c]
    assert len(drawn) == 1 and "store bound" in drawn[0] and "ssd epoch 1 (1 GPU(s), 2 GPU(s))" in drawn[0]
    assert not any(
        "nodes reading at once" in str(c) for c in storage.context(frame, _probe(), NO_HISTORY, "r")["storage_charts"]
    )
