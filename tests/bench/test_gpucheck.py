"""bench.gpucheck: the GPU check's pair statistics (no scipy on a CUDA image) and its accelerator profile."""

from __future__ import annotations

import math

import pytest
import yaml
from scipy import stats

from bench.gpucheck import PROFILE_VERSION, accelerator_profile, pair_ratio, t975


def test_the_t_table_is_students_t():
    for df in range(1, 31):
        assert t975(df) == pytest.approx(stats.t.ppf(0.975, df), abs=6e-4), df
    assert t975(200) == pytest.approx(stats.t.ppf(0.975, 200), abs=0.02)
    with pytest.raises(ValueError):
        t975(0)


def test_the_pair_ratio_is_the_geometric_mean_with_a_t_interval_on_the_logs():
    ratios = [0.93, 0.95, 0.94, 0.96, 0.92, 0.95]
    got = pair_ratio(ratios)
    logs = [math.log(r) for r in ratios]
    low, high = stats.t.interval(0.95, len(logs) - 1, loc=sum(logs) / 6, scale=stats.sem(logs))
    assert got["n"] == 6 and got["ratio"] == pytest.approx(math.exp(sum(logs) / 6))
    assert (got["ci_low"], got["ci_high"]) == (
        pytest.approx(math.exp(low), rel=1e-4),
        pytest.approx(math.exp(high), rel=1e-4),
    )
    assert pair_ratio([1.1, 1 / 1.1])["ratio"] == pytest.approx(1.0)  # a ratio and its inverse cancel


def test_one_pair_has_no_interval_and_nonsense_is_refused():
    assert pair_ratio([0.9]) == {"ratio": pytest.approx(0.9), "ci_low": None, "ci_high": None, "n": 1}
    with pytest.raises(ValueError):
        pair_ratio([])
    with pytest.raises(ValueError):
        pair_ratio([0.9, 0.0])


def test_the_profile_is_yaml_with_one_mapping_per_workload_and_precision():
    header = {"accelerator": 'NVIDIA H200 "SXM"', "source": "scripts/gpu-check.sh on NVIDIA H200", "dry_run": False}
    entries = [
        {"workload": "ssd", "precision": "bf16", "batch_size": 64, "seconds_per_batch": 0.0492713, "runs": 6},
        {"workload": "ssd", "precision": "fp16", "batch_size": 64, "seconds_per_batch": None, "runs": 0},
        {"workload": "deeplabv3plus", "precision": "bf16", "batch_size": 16, "seconds_per_batch": 0.0553, "runs": 6},
    ]
    doc = yaml.safe_load(accelerator_profile(header, entries))
    assert doc["version"] == PROFILE_VERSION and doc["accelerator"] == 'NVIDIA H200 "SXM"' and doc["dry_run"] is False
    assert doc["workloads"]["ssd"]["bf16"] == {"batch_size": 64, "seconds_per_batch": 0.049271, "runs": 6}
    assert doc["workloads"]["ssd"]["fp16"]["seconds_per_batch"] is None
    assert set(doc["workloads"]) == {"ssd", "deeplabv3plus"}
    assert yaml.safe_load(accelerator_profile(header, []))["workloads"] == {}
