"""Leftover runs of a suite are cancelled, and only those: real local runs, real processes."""

import json
import subprocess

import pytest

from bench.config import RunSpec, TrainConfig
from bench.launch.base import RunState, wait
from bench.launch.leftovers import HANDLE_FILE, cancel_unfinished, record_handle, submit_recorded
from bench.launch.registry import build_launcher
from tests.infra.faults import train_pids, wait_for

pytestmark = pytest.mark.slow


def spec(suite, datasets, run_id: str, steps: int) -> RunSpec:
    train = TrainConfig(workload="ssd", data=datasets["coco"], steps=steps, batch_size=4, sample_interval_s=0.2)
    return RunSpec(run_id=run_id, train=train, ranks=2, output_dir=suite / run_id)


def test_a_live_run_of_the_suite_is_cancelled_before_the_next_scale_starts(tmp_path, datasets):
    launcher = build_launcher("local")
    suite = tmp_path / "suite"
    left = spec(suite, datasets, "left-1", steps=100_000)
    left_handle = submit_recorded(launcher, left)
    assert json.loads((left.output_dir / HANDLE_FILE).read_text()) == left_handle
    wait_for(lambda: train_pids(left.output_dir), 60)

    following = spec(suite, datasets, "next-2", steps=4)
    handle = submit_recorded(launcher, following)
    assert train_pids(left.output_dir) == []  # gone before the next scale was submitted
    assert launcher.poll(left_handle)[0] == RunState.CANCELLED
    assert wait(launcher, handle, 180, 0.3)[0] == RunState.COMPLETED
    assert cancel_unfinished(launcher, suite) == []  # finished and cancelled runs are left alone


def test_a_reused_pid_or_an_unreadable_handle_is_never_acted_on(tmp_path):
    launcher = build_launcher("local")
    suite = tmp_path / "suite"
    stranger = subprocess.Popen(["sleep", "300"])
    try:
        handle = {
            "backend": "local",
            "run_id": "gone-1",
            "output_dir": str(suite / "gone-1"),
            "job_id": str(stranger.pid),  # the supervisor's pid, now someone else's
            "ranks": 1,
            "submitted": 0.0,
        }
        record_handle(handle)
        (suite / "torn-2").mkdir()
        (suite / "torn-2" / HANDLE_FILE).write_text('{"backend": "lo')
        assert launcher.poll(handle)[0] == RunState.FAILED
        assert cancel_unfinished(launcher, suite) == []
        assert stranger.poll() is None  # still running: not signalled
    finally:
        stranger.kill()
        stranger.wait()
