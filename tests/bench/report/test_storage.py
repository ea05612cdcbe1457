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
