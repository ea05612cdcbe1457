"""`bench sizing`: the GPUs a storage ceiling feeds, from any results table; contract and bad input."""

import json
import math
import subprocess

import pandas as pd
import pytest

from bench.analysis.verdict.sizing import add_sizing, supported
from tests.conftest import BENCH

# The reference study's shape: avg and peak epoch-1 read MB/s per GPU count (figures invented, shape kept:
# bandwidth drops above 32 GPUs where the dataset fit the storage servers' cache).
STUDY = """model,gpus,throughput_img_s,avg_read_mb_s,peak_read_mb_s
ssd,4,1200,400,900
ssd,16,4700,1600,3000
ssd,32,9400,3300,5200
ssd,64,18000,2500,4100
deeplabv3plus,4,300,150,420
deeplabv3plus,16,1180,610,1500
"""


def sizing(tmp_path, text: str, *args: str) -> subprocess.CompletedProcess:
    path = tmp_path / "r.csv"
    path.write_text(text)
    return subprocess.run([BENCH, "sizing", str(path), *args], capture_output=True, text=True, timeout=120)


def test_contract_floor_of_ceiling_over_largest_per_gpu_demand(tmp_path):
    done = sizing(tmp_path, STUDY, "--ceiling-mb-s", "10000", "--json")
    assert done.returncode == 0, done.stderr
    rows = {r["workload"]: r for r in json.loads(done.stdout)["workloads"]}
    assert set(rows["ssd"]) >= {
        "workload",
        "per_gpu_demand_mb_s",
        "per_gpu_peak_mb_s",
        "supported_gpus",
        "supported_gpus_peak",
    }
    # ssd: the largest avg per GPU is at 32 GPUs (3300 / 32), not the cache-lowered 64-GPU figure
    assert rows["ssd"]["per_gpu_demand_mb_s"] == pytest.approx(3300 / 32)
    assert rows["ssd"]["supported_gpus"] == math.floor(10000 / (3300 / 32)) == 96
    assert rows["ssd"]["per_gpu_peak_mb_s"] == pytest.approx(900 / 4)
    assert rows["ssd"]["supported_gpus_peak"] == math.floor(10000 / 225) == 44
    assert rows["ssd"]["supported_gpus_au"] == math.floor(10000 / (0.9 * 3300 / 32))
    assert rows["deeplabv3plus"]["per_gpu_demand_mb_s"] == pytest.approx(610 / 16)
    assert rows["deeplabv3plus"]["supported_gpus"] == math.floor(10000 / (610 / 16))


def test_exact_multiple_is_not_lost_to_rounding():
    # 0.3 * 10 is 2.9999999999999996 in binary: the floor must still be 10
    assert supported(3.0, 0.3) == 10
    assert supported(1000.0, 100.0) == 10
    assert supported(99.9, 100.0) == 0
    assert supported(100.0, 0.0) is None


def test_rows_marked_cache_distorted_do_not_set_the_demand(tmp_path):
    text = "workload,gpus,avg_read_mb_s,peak_read_mb_s,bandwidth_valid\nssd,1,50,60,True\nssd,2,900,950,False\n"
    done = sizing(tmp_path, text, "--ceiling-mb-s", "200", "--json")
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)["workloads"][0]
    assert row["per_gpu_demand_mb_s"] == pytest.approx(50) and row["supported_gpus"] == 4


@pytest.mark.parametrize(
    ("text", "args", "named"),
    [
        ("model,gpus,avg_read_mb_s\nssd,4,100\n", ["--ceiling-mb-s", "100"], "'peak_read_mb_s'"),
        ("gpus,avg_read_mb_s,peak_read_mb_s\n4,100,200\n", ["--ceiling-mb-s", "100"], "'model'"),
        ("model,gpus,avg_read_mb_s,peak_read_mb_s\nssd,4,abc,2\n", ["--ceiling-mb-s", "100"], "'avg_read_mb_s'"),
        ("model,gpus,avg_read_mb_s,peak_read_mb_s\nssd,0,1,2\n", ["--ceiling-mb-s", "100"], "'gpus'"),
        ("model,gpus,avg_read_mb_s,peak_read_mb_s\nssd,4,-1,2\n", ["--ceiling-mb-s", "100"], "'avg_read_mb_s'"),
        ("model,gpus,avg_read_mb_s,peak_read_mb_s\nssd,4,0,0\n", ["--ceiling-mb-s", "100"], "'avg_read_mb_s'"),
        (STUDY, ["--ceiling-mb-s", "0"], "--ceiling-mb-s"),
        (STUDY, ["--ceiling-mb-s", "nan"], "--ceiling-mb-s"),
    ],
)
def test_bad_input_exits_2_naming_the_column_or_flag(tmp_path, text, args, named):
    done = sizing(tmp_path, text, *args, "--json")
    assert done.returncode == 2
    assert named in done.stderr and done.stdout == ""


def test_the_row_with_the_largest_demand_carries_the_counts():
    frame = pd.DataFrame(
        {
            "workload": ["ssd"] * 3,
            "gpus": [1, 2, 4],
            "valid": [True] * 3,
            "bandwidth_valid": [True, True, False],
            "oversubscribed": [False] * 3,
            "inconclusive_reason": ["", "", ""],
            "throughput_img_s": [100.0, 190.0, 300.0],
            "avg_read_mb_s": [10.0, 24.0, 80.0],
            "peak_read_mb_s": [15.0, 30.0, 90.0],
        }
    )
    out = add_sizing(frame, 120.0, 2, "store", 16)
    assert out["per_gpu_read_mb_s"].tolist()[:2] == [10.0, 12.0] and math.isnan(out["per_gpu_read_mb_s"][2])
    assert out["supported_gpus"].tolist() == [pd.NA, 10, pd.NA]
    assert out.at[1, "min_supported_gpus"] == 16
    # the ceiling is the aggregate of 2 nodes at once, and the store binds it (bench.suite.node_probe)
    assert out["probe_nodes"].tolist() == [2, 2, 2] and set(out["storage_bound"]) == {"store"}
    assert out.at[0, "bytes_per_image"] == pytest.approx(10e6 / 100)
    unsized = add_sizing(frame, None, None, None, 16)  # no conclusive probe: demand shown, no count claimed
    assert unsized["supported_gpus"].isna().all() and unsized["per_gpu_read_mb_s"].notna().sum() == 2
    assert unsized["probe_nodes"].isna().all() and set(unsized["storage_bound"]) == {""}
