"""History is matched on `config_key` (bench.analysis.frame): a key that changes with the config's shape
rather than its values would start every series over, its baseline and regression floor lost. These keys
were computed before the run's config held the settings' groups (issue 52, when its JSON was flat) and
must stay what they were for the same settings."""

from __future__ import annotations

import pytest

from bench.analysis.frame import config_key
from bench.config.settings import settings_from

PINNED = [
    ({}, "tiny/dali/bs8/img128/amp0/local#f6e39ed7822c"),
    (
        {"launcher": "ssh", "hosts": ["n1:2", "n2"], "ssh_config": "/etc/ssh/x"},
        "tiny/dali/bs8/img128/amp0/ssh#607f3b676102",
    ),
    (
        {
            "launcher": "slurm",
            "partition": "gpu",
            "account": "a",
            "gpus_per_node": 4,
            "ranks_per_node": 2,
            "ideal": "linear",
        },
        "tiny/dali/bs8/img128/amp0/slurm#88c58542a02f",
    ),
    (
        {
            "checkpoint": {"bytes_per_rank": "2MiB", "writes": 2, "reads": 3},
            "checkpoint_every_steps": 5,
            "precision": "bf16",
        },
        "tiny/dali/bs8/img128/amp0/bf16/local#1728f170653a",
    ),
    (
        {"checkpoint": "model", "storage_cache": "1GiB", "dataset_path": "/nfs/data", "epochs": 2, "batch_size": 4},
        "tiny/dali/bs4/img128/amp0/local#d92d5d8aa4b1",
    ),
]


@pytest.mark.parametrize(("values", "key"), PINNED, ids=[k.rsplit("#", 1)[0] for _, k in PINNED])
def test_a_series_keeps_the_key_it_was_stored_under(values, key):
    cfg = settings_from(values).sweep_config("/tmp/home", "/tmp/out")
    assert config_key(cfg) == key
