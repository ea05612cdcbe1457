import signal
import time

import pytest

from bench.config import RunSpec, TrainConfig
from bench.launch.base import RunState, collect, wait
from bench.launch.registry import build_launcher
from tests.infra.faults import any_pids, kill_rank_when_training, train_pids, wait_for

pytestmark = pytest.mark.slow


def spec(tmp_path, datasets, **over) -> RunSpec:
    train = TrainConfig(
        workload="ssd", data=datasets["coco"], steps=over.pop("steps", 4), batch_size=4, sample_interval_s=0.2
    )
    return RunSpec(run_id=over.pop("run_id", "loc"), train=train, ranks=2, output_dir=tmp_path / "run", **over)


def test_two_local_ranks_complete(tmp_path, datasets):
    launcher = build_launcher("local")
    handle = launcher.submit(spec(tmp_path, datasets))
    state, reason = wait(launcher, handle, 180, 0.3)
    result = collect(handle, state, reason, 2)
    assert result.ok, result.reason
    assert result.exit_codes == {0: 0, 1: 0}
    assert result.summary["ranks"] == 2


def test_killed_rank_fails_run_names_rank_and_stops_others(tmp_path, datasets):
    launcher = build_launcher("local")
    s = spec(tmp_path, datasets, steps=5000, run_id="kill")
    handle = launcher.submit(s)
    kill_rank_when_training(s.output_dir, rank=1)
    state, reason = wait(launcher, handle, 120, 0.3)
    result = collect(handle, state, reason, 2)
    assert result.state == RunState.FAILED
    assert "rank 1 on localhost" in result.reason
    assert result.exit_codes[1] == -signal.SIGKILL
    assert result.summary is None and not (s.output_dir / "metrics" / "summary.json").exists()
    assert train_pids(s.output_dir) == []  # no orphans
    assert any_pids(b"bench.launch.rank\x00--tag\x00kill") == []


def test_cancel_and_timeout(tmp_path, datasets):
    launcher = build_launcher("local")
    s = spec(tmp_path, datasets, steps=5000, run_id="cancel")
    handle = launcher.submit(s)
    wait_for(lambda: train_pids(s.output_dir), 60)
    launcher.cancel(handle)
    state, reason = launcher.poll(handle)
    assert state == RunState.CANCELLED
    assert train_pids(s.output_dir) == []
    t = spec(tmp_path / "t", datasets, steps=5000, run_id="timeout", time_limit_s=10)
    handle = launcher.submit(t)
    start = time.monotonic()
    state, reason = wait(launcher, handle, 120, 0.3)
    assert state == RunState.TIMEOUT and "time limit" in reason
    assert time.monotonic() - start < 60
    assert collect(handle, state, reason, 2).summary is None
