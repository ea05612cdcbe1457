"""host_bound: a GPU busy under 0.7 of its step with no data wait is named, on a failing row and as a note
on a passing one; a CPU row (no GPU busy figure) never is. The results row carries backend, precision
and gpu_busy_share from the summary."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from bench.analysis.frame import COLUMNS, build_frame, row_from_result
from bench.analysis.verdict.bottleneck import add_bottlenecks, diagnose, host_bound
from tests.bench.launch.summaries import valid_summary


def gpu_row(busy: float, wait: float, gpus: int = 1, verdict: str = "fail") -> dict:
    rank = {
        "rank": 0,
        "host": "g1",
        "images": 640,
        "images_per_s": 1347.0,
        "measured_s": 0.475,
        "compute_s": 0.4,
        "comm_s": 0.0,
        "compute_median_s": 0.04,
        "data_wait_share": wait,
        "comm_share": 0.0,
    }
    return {
        "workload": "ssd",
        "gpus": gpus,
        "baseline_gpus": 1,
        "state": "COMPLETED",
        "verdict": verdict,
        "borderline": False,
        "oversubscribed": False,
        "straggler_gap": 0.0,
        "slowest_rank": 0,
        "slowest_host": "g1",
        "data_wait_share": wait,
        "compute_share": 0.9,
        "comm_share": 0.0,
        "au": 1 - wait,
        "gpu_util": 36.0,
        "gpu_busy_share": busy,
        "avg_read_mb_s": np.nan,
        "rank_breakdown": json.dumps([rank]),
    }


def test_a_gpu_idle_for_the_host_is_host_bound():
    cause, evidence = diagnose(gpu_row(0.36, 0.04), None, 0.1, None, au_failed=False)
    assert cause == "host_bound"
    assert "GPU busy 36%" in evidence and "NVML utilisation 36%" in evidence and "AU 96%" in evidence


def test_busy_gpu_data_wait_or_no_gpu_is_not_host_bound():
    assert host_bound(gpu_row(0.85, 0.04)) is None  # the GPU is the limit
    assert host_bound(gpu_row(0.36, 0.30)) is None  # the data is: the data-wait rules decide
    assert host_bound(gpu_row(np.nan, 0.0)) is None  # a CPU row: no GPU busy figure, no claim
    assert host_bound({**gpu_row(0.5, 0.0), "gpu_busy_share": None}) is None
    assert diagnose(gpu_row(np.nan, 0.0), None, 0.1, None, au_failed=False)[0] == "undetermined"


def test_a_passing_host_bound_row_carries_the_note_and_a_clean_one_none():
    frame = pd.DataFrame([gpu_row(0.36, 0.02, verdict="pass"), gpu_row(0.9, 0.02, gpus=2, verdict="pass")])
    named = add_bottlenecks(frame, 0.1, None, set())
    assert named["bottleneck"].tolist() == ["host_bound", ""]


def test_results_row_carries_backend_precision_and_gpu_busy_share():
    s = valid_summary(precision="bf16")
    s["utilisation"]["gpu_busy_share"] = 0.42
    row = row_from_result("r1", "ssd", 1, {"state": "COMPLETED", "summary": s}, "local", "c", "t")
    assert {"backend", "precision", "gpu_busy_share"} <= set(COLUMNS)
    assert (row["backend"], row["precision"], row["gpu_busy_share"]) == ("horovod", "bf16", 0.42)
    cpu = valid_summary(backend="ddp")  # a CPU summary: gpu_busy_share null -> NaN, never 0
    cpu["utilisation"]["gpu_busy_share"] = None
    frame = build_frame([row_from_result("r1", "ssd", 2, {"state": "COMPLETED", "summary": cpu}, "local", "c", "t")])
    assert frame["backend"][0] == "ddp" and frame["precision"][0] == "fp32"
    assert np.isnan(frame["gpu_busy_share"][0])
