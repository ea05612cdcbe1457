"""Accelerators the storage feeds at AU, measured under a real cgroup-v1 blkio read throttle (issue 39):
an emulated workload whose one accelerator reads D = batch x record / seconds per batch, on an ext4 of
its own held at T bytes/s, swept at 1 and 2 ranks by `bench sweep`. The count that holds min_au is
floor(T / D) (+-1), and AU falls at the next count."""

from __future__ import annotations

import json
import math
import subprocess

import pytest
import yaml

from tests.conftest import BENCH
from tests.infra.faults import blkio_read_throttle, store_device
from tests.infra.suite_files import records_workload

pytestmark = [pytest.mark.rates, pytest.mark.slow]

BATCH, RECORD, SECONDS = 4, 64 << 10, 0.05
DEMAND = BATCH * RECORD / SECONDS  # 5.24 MB/s per accelerator
# One accelerator is fed in full, two at ~0.7 AU, against a min_au of 0.8: floor(T / (D x 0.8)) = 1 =
# floor(T / D). A first version held min_au 0.9 at T = 1.5 D: one rank measured AU 0.902 (blkio's throttle
# slices delay a batch's reads now and then even under the limit), too near the bound to assert.
THROTTLE = int(1.4 * DEMAND)
MIN_AU = 0.8


def test_accelerators_at_au_is_the_throttle_over_one_accelerators_demand(tmp_path):
    workload = records_workload(
        tmp_path / "throttled.yaml",
        files=1536,
        record_bytes=RECORD,
        batch=BATCH,
        seconds_per_batch=SECONDS,
        min_au=MIN_AU,
    )
    with store_device(tmp_path / "store.img", tmp_path / "store", 256) as store:
        config = tmp_path / "suite.yaml"
        settings = {"dataset_path": str(store / "data"), "workloads": [str(workload)], "gpus": [1, 2], "steps": 30}
        settings |= {"min_measure_s": 3, "warmup_steps": 2, "ceilings": False, "probe_storage": False}
        settings |= {"confirm_causes": False, "confirm_regressions": False}
        config.write_text(yaml.safe_dump(settings))
        with blkio_read_throttle(store, THROTTLE) as prefix:
            argv = [BENCH, "sweep", "--config", str(config), "--output-dir", str(tmp_path / "out")]
            argv += ["--results-url", f"sqlite:///{tmp_path}/r.db"]
            done = subprocess.run(
                ["bash", "-c", f'{prefix} && exec "$@"', "sweep", *argv], capture_output=True, text=True, timeout=600
            )
    out = done.stdout
    assert "accelerators_at_au" in out, out[-3000:] + done.stderr[-3000:]
    outcome = json.loads(out[out.index("{") : out.rindex("}") + 1])
    (entry,) = outcome["accelerators_at_au"]["throttled"]
    assert entry["measured"] is True and entry["accelerator"] == "custom"
    # 1 rank is fed (T = 1.4 D), 2 are not (2 D > T / 0.8): the count is floor(T / D) = 1 exactly, and AU
    # fell at 2 (a tolerance of +-1 accepted every count a 1-2 rank sweep can give)
    assert entry["accelerators"] == math.floor(THROTTLE / DEMAND) == 1, entry
    assert entry["au_fell_at"] == 2 and entry["largest_scale"] == 2, entry
