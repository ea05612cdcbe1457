"""The dashboard marks a one-week dip as an outlier (a cross), never as a change point."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.report.history import Filters, series_panels


def test_a_one_week_dip_is_drawn_as_an_outlier_not_a_change_point():
    rng = np.random.default_rng(3)
    rows = [
        {
            "suite_run_id": f"r{i:02d}",
            "dag_id": "d",
            "cluster": "c",
            "workload": "ssd",
            "gpus": 2,
            "config_key": "k",
            "started_at": f"2026-01-{i + 1:02d}",
            "accepted": True,
            "verdict": "pass",
            "throughput_img_s": 100.0 * (0.7 if i == 10 else 1.0) + rng.normal(0, 1),
            "scaling_efficiency": 0.9,
            "avg_read_mb_s": np.nan,
            "peak_read_mb_s": np.nan,
            "bandwidth_valid": False,
        }
        for i in range(20)
    ]
    runs = pd.DataFrame([{"suite_run_id": r["suite_run_id"], "config": "{}", "dag_id": "d"} for r in rows])
    changes = pd.DataFrame(columns=["cluster", "workload", "gpus", "config_key", "metric", "changed_at"])
    (panel,) = series_panels(pd.DataFrame(rows), runs, changes, Filters(None, None, None))
    throughput = panel["charts"][0]
    assert "one-week outlier" in throughput and "change-point" not in throughput
    flat = [dict(r, throughput_img_s=100.0) for r in rows]
    (panel,) = series_panels(pd.DataFrame(flat), runs, changes, Filters(None, None, None))
    assert "one-week outlier" not in panel["charts"][0]
