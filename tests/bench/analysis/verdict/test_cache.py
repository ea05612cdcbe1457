"""Cache-served labelling: a declared storage cache that could hold the dataset, and an epoch-1 rate
above the storage's own cold ceiling. (The measured case on a real mount: tests/bench/metrics/
test_network_mount.py.) The labelled figure stays in the table, is never valid, and says why."""

import json

import numpy as np
import pandas as pd
import pytest

from bench.analysis.verdict.cache import CEILING_SLACK, label_cache_served
from bench.config.models import SweepConfig, TrainConfig
from bench.errors import ConfigError


def frame(dataset_bytes: float, rate: float, hosts: int = 1) -> pd.DataFrame:
    ranks = [{"rank": i, "host": f"n{i}"} for i in range(hosts)]
    return pd.DataFrame(
        {
            "dataset_bytes": [dataset_bytes],
            "avg_read_mb_s": [rate],
            "cache_risk": [False],
            "bandwidth_valid": [True],
            "bandwidth_note": [""],
            "rank_breakdown": [json.dumps(ranks)],
        }
    )


def test_a_dataset_that_fits_the_declared_storage_cache_is_labelled():
    row = label_cache_served(frame(3e9, 100.0), storage_cache_bytes=512 * 2**30, ceiling_mb_s=None).iloc[0]
    assert row["cache_served"] and row["cache_risk"] and not row["bandwidth_valid"]
    assert row["bandwidth_note"].startswith("cache-served: the dataset (3 GB) fits the storage's declared cache")
    row = label_cache_served(frame(3e12, 100.0), storage_cache_bytes=512 * 2**30, ceiling_mb_s=None).iloc[0]
    assert not row["cache_served"] and row["bandwidth_valid"]  # 3 TB does not fit 512 GiB


def test_a_rate_above_the_cold_ceiling_per_node_is_labelled():
    above = label_cache_served(frame(1e12, 2 * 500.0 * CEILING_SLACK + 1, hosts=2), None, 500.0).iloc[0]
    assert above["cache_served"] and "above the storage's cold read ceiling 500.0 MB/s" in above["bandwidth_note"]
    # Two nodes reading 900 MB/s in all is 450 MB/s each: below one node's ceiling, a storage figure.
    within = label_cache_served(frame(1e12, 900.0, hosts=2), None, 500.0).iloc[0]
    assert not within["cache_served"] and within["bandwidth_valid"]
    unknown = label_cache_served(frame(1e12, np.nan), None, 500.0).iloc[0]
    assert not unknown["cache_served"]


@pytest.mark.parametrize("bad", ["lots", "-5GiB", "12 parsecs"])
def test_a_declared_cache_that_is_not_a_size_is_refused_naming_the_field(tmp_path, bad):
    from bench.config.models import SETTING_GROUPS
    from bench.config.types import parse

    train = TrainConfig(workload="ssd", data=tmp_path, steps=2).model_dump()
    values = {"dataset_path": tmp_path, "output_dir": tmp_path, "train": train, "storage_cache": bad}
    with pytest.raises(ConfigError, match=rf"^storage_cache: storage cache size '{bad}' does not match"):
        parse(SweepConfig, values, groups=tuple(SETTING_GROUPS))
