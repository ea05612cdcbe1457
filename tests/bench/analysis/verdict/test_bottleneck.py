"""Why a scale dropped, on real runs with real, induced bottlenecks: each names its cause (and a clean
run names none). Storage: a cgroup-v1 blkio throttle; straggler: one rank's slot under a cgroup-v1 CPU
quota; input CPU: one loader thread decoding large images; contention: an oversubscribed run."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from bench.analysis.verdict.differential import FIGURES, LABELS
from bench.data.generate import GenerateSpec, generate
from tests.infra.faults import cpu_quota, train_pids
from tests.infra.knee_check import Knee, run_knee, sweep

pytestmark = [pytest.mark.slow, pytest.mark.rates]


def config(data: Path, **over) -> dict:
    """A `bench sweep --config` file: suite settings, by the names a suite file uses."""
    return {
        "workloads": ["ssd"],
        "gpus": [1, 2],
        "dataset_path": str(data),
        "steps": 20,
        "min_measure_s": 3.0,
        "warmup_steps": 2,
        "batch_size": 8,
        "image_size": 128,
        "probe_max_jobs": 2,
        "probe_seconds": 1.0,
        "confirm_causes": False,  # the differential reruns are exercised in the knee below (and the network test)
        "min_scaling_efficiency": 0.7,
        "min_bandwidth_efficiency": 0.0,
        **over,
    }


def row(frame: pd.DataFrame, gpus: int) -> pd.Series:
    return frame[frame["gpus"] == gpus].iloc[0]


def test_a_clean_run_names_no_cause_and_carries_its_breakdown(tmp_path):
    outcome, frame = sweep(tmp_path, "clean", config(tmp_path / "data", min_scaling_efficiency=0.3))
    assert outcome["verdict"] == "PASSED", (outcome["failures"], outcome["inconclusive"])
    assert frame["bottleneck"].fillna("").eq("").all()
    for col in ("data_wait_share", "compute_share", "comm_share", "au", "straggler_gap"):
        assert frame[col].between(0, 1).all(), col
    assert (frame["compute_share"] > 0.5).all()  # a clean CPU rank computes most of its step
    assert frame["slowest_host"].fillna("").eq("").all()  # nobody more than 10% below the median


@pytest.fixture
def quarter_core():
    with cpu_quota(0.25, "straggler") as group:
        yield group


def test_a_rank_under_a_cpu_quota_is_named_as_the_straggler(tmp_path, quarter_core):
    """The slow slot stays slow: rank 1 of the scale's own runs (its first and the second run a bound miss
    gets: issue 62 fails a scale only where both miss) is moved under the quota as soon as it starts."""
    home = tmp_path / "home"
    runs = home / "scalewatch-home" / "runs" / "strag"
    scale_runs = [runs / "ssd-2", runs / "ssd-2-repeat"]
    done = threading.Event()
    moved: set[int] = set()

    def throttle_rank_1():
        while not done.is_set():
            for pid in {p for d in scale_runs for p in train_pids(d, 1, exact=True)} - moved:
                with contextlib.suppress(OSError):  # it may have exited since
                    (quarter_core / "cgroup.procs").write_text(str(pid))
                moved.add(pid)
            time.sleep(0.1)

    mover = threading.Thread(target=throttle_rank_1, daemon=True)
    mover.start()
    try:
        outcome, frame = sweep(home, "strag", config(tmp_path / "data", min_measure_s=6.0))
    finally:
        done.set()
        mover.join(5)
    assert len(moved) >= 2, moved  # rank 1 of the scale's run and of its second run ran under the quota
    r = row(frame, 2)
    assert r["verdict"] == "fail" and r["bottleneck"] == "straggler", r.to_dict()
    assert int(r["slowest_rank"]) == 1 and r["slowest_host"] == "localhost"
    assert r["straggler_gap"] > 0.3
    failing = [f for f in outcome["failures"] if f["gpus"] == 2]
    assert failing and failing[0]["bottleneck"] == "straggler" and "rank 1 on localhost" in failing[0]["evidence"]


def test_an_oversubscribed_scale_is_contention(tmp_path):
    cores = len(os.sched_getaffinity(0))
    cfg = config(tmp_path / "data", gpus=[1, 2 * cores], oversubscribe=True)
    _, frame = sweep(tmp_path / "home", "over", cfg)
    r = row(frame, 2 * cores)
    assert r["verdict"] == "fail" and r["bottleneck"] == "contention", r.to_dict()
    assert "oversubscribed" in r["bottleneck_evidence"]


def test_one_loader_thread_on_large_images_is_input_cpu_bound(tmp_path):
    generate(GenerateSpec("coco", tmp_path / "src" / "coco", images=96, min_side=1400, max_side=1600, seed=8))
    cfg = config(
        tmp_path / "data",
        gpus=[1],
        stage_from=str(tmp_path / "src"),
        min_au=0.9,
        loader="torch",
        min_measure_s=4.0,
    )
    outcome, frame = sweep(tmp_path / "home", "input", cfg)
    r = row(frame, 1)
    assert r["au"] < 0.9 and r["verdict"] == "fail", r.to_dict()
    assert r["bottleneck"] == "input_cpu", r.to_dict()
    assert any(f["expectation"] == "ExpectAcceleratorUtilisationAtLeast" for f in outcome["failures"])


def test_storage_becomes_the_limit_where_the_projection_says(tmp_path):
    """Issue 14's knee (tests/infra/knee_check.py), once: a blkio throttle between what 1 and 2 ranks
    read. The projection says 1 GPU, the 2-rank run fails and its cause is the store; unthrottled it is not.
    How close the 2-rank images/s come to what the throttle allows, and how often the cause is named
    storage, are benchmark section 10's figures over repeats (docs/benchmarks.md, 10)."""
    k = run_knee(tmp_path)
    free, knee, rate = k.free, k.knee, k.rate
    assert Knee.row(free, 2)["bottleneck"] != "storage"
    two = Knee.row(knee, 2)
    # What is deterministic here is asserted here; the figures that move with this 2-core box's load are
    # benchmark section 10's: the 2-rank images/s against what the throttle allows (CI once read 17% over
    # it: blkio lets a burst through and a warm page or two is served from cache) and the cause (on 2 shared
    # cores a throttled disk's waits also show as contention, communication or, in the synthetic rerun,
    # input_cpu: CI saw each once; straggler once too, in the rates phase alone: one rank's reads stalling longer
    # than the other's). The storage bytes cannot beat the throttle.
    assert two["verdict"] == "fail" and two["scaling_efficiency"] < 0.7, two.to_dict()
    assert two["bandwidth_valid"] and two["bytes_source"] == "cachestat", two.to_dict()
    assert two["avg_read_mb_s"] <= 1.10 * rate / 1e6, (two["avg_read_mb_s"], rate / 1e6)
    assert two["throughput_img_s"] < Knee.row(free, 2)["throughput_img_s"]
    assert two["bottleneck"] in ("storage", "contention", "communication", "input_cpu", "straggler"), two.to_dict()
    # What can fail whichever cause the load left: the named cause follows the differential reruns. Storage
    # exactly where the warm-cache rerun removed the drop (knee_check's headroom is sized for that), and
    # never where it did not; the check says what the reruns did to the rules' cause.
    assert (two["bottleneck"] == "storage") == (two["rerun_removed"] == "warm"), two.to_dict()
    assert two["rerun_removed"] in ("warm", "synthetic", "neither") and two["cause_check"], two.to_dict()
    # The warm-cache rerun takes the throttle out: it always scales better than the throttled run.
    shown = {k: two[k] for k in ("scaling_efficiency", *FIGURES, *LABELS, "bottleneck", "bottleneck_evidence")}
    assert two["warm_efficiency"] > two["scaling_efficiency"], shown
    # the probe saw the throttle too: within 10% under it, and up to 50% over, since blkio lets a burst through
    # at the start of each short probe level (a fresh clone's run read 5.70 MB/s against a 4.90 MB/s throttle:
    # 16% over, with 4 points left under the old 20%). Unthrottled this disk reads ~1,500 MB/s, ~300x the
    # throttle, so a probe that missed the throttle still fails; the knee it sizes is asserted below
    probed = two["storage_ceiling_mb_s"]
    assert 0.9 * rate / 1e6 <= probed <= 1.5 * rate / 1e6, (probed, rate / 1e6)
    sized = knee[knee["supported_gpus"].notna()]
    assert len(sized) == 1 and int(sized["supported_gpus"].iloc[0]) == 1  # the projection's knee: 1 GPU
    assert any(f["gpus"] == 2 and f.get("bottleneck") for f in k.outcome["failures"])
    # The node ceiling's copies read the page cache, not the throttled store (CI once saw them throttled
    # too: the ceiling then hid the store, and under the independent ideal the knee passed). So the
    # ceiling runs well above the throttled scale, and the store binds its expected throughput.
    assert two["independent_img_s"] > 1.2 * two["throughput_img_s"], two.to_dict()
    assert two["expected_bound_by"] == "storage", two.to_dict()


def test_a_foreign_busy_loop_on_one_slots_core_makes_the_scale_inconclusive_naming_it(tmp_path):
    """Issue 26's noisy neighbour: a process that is not the run's spins on the core rank 1 owns. The 2-rank
    scale is measured again after the last one, the loop is still there, and it is INCONCLUSIVE naming the
    process, its pid and the core (issue 62: never FAILED or PASSED on a figure measured beside it), not 'step
    times too unstable'."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs two cores: rank 1's slot must be a core of its own")
    spin = "import time\nt = time.time()\nwhile time.time() - t < 600: pass\n"
    started = subprocess.run(
        ["sh", "-c", f"taskset -c {cores[1]} {sys.executable} -c '{spin}' >/dev/null 2>&1 & echo $!"],
        capture_output=True,
        text=True,
        check=True,
    )
    pid = int(started.stdout)
    try:
        cfg = config(tmp_path / "data", max_step_time_spread=100.0, max_foreign_share=0.25)
        outcome, frame = sweep(tmp_path / "home", "noisy", cfg)
    finally:
        os.kill(pid, 9)
    two = row(frame, 2)
    assert two["verdict"] == "inconclusive" and outcome["verdict"] == "INCONCLUSIVE", two.to_dict()
    reason = two["inconclusive_reason"]
    assert reason.startswith("interference:") and f"pid {pid}" in reason and f"core {cores[1]}" in reason, reason
    assert two["foreign_cpu_share"] > 0.25 and not outcome["failures"], outcome["failures"]
    assert reason.endswith("still there when measured again after the last scale"), reason
    # rank 0's core was not the spinner's: what it saw at one rank is the box's own background, less than that
    assert row(frame, 1)["foreign_cpu_share"] < two["foreign_cpu_share"]
