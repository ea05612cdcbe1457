"""The training operator's task log shows each rank log's bounded tail, never a file a link points at.

Issue 37, item 3: a `logs/rank1.log -> the worker's config` printed the worker's database URL, with
its password, into the task log. The operator runs here as the worker runs it after a deferral,
collecting a real output folder (local launcher) holding real links and FIFOs.
"""

from __future__ import annotations

import json

import pytest
import structlog.testing

from tests.bench.launch.hostile_outputs import PLANTED, handle_for, memory_bound, plant, run_folder, worker_secret


def complete(handle: dict) -> tuple[dict, str]:
    """execute_complete as after a deferral: (the XCom it returns, everything it wrote to the task log)."""
    from scalewatch.operators import TrainScaleOperator

    op = TrainScaleOperator(task_id="train", sweep={}, run={}, suite_run_id="s1")
    with structlog.testing.capture_logs() as logs, memory_bound():
        out = op.execute_complete(
            None, event={"state": "FAILED", "reason": "slurm FAILED"}, handle=handle, launcher={"kind": "local"}
        )
    return out, "\n".join(str(entry.get("event")) for entry in logs)


@pytest.mark.timeout(60)
def test_the_task_log_shows_regular_logs_tails_and_nothing_through_a_link_or_fifo(tmp_path):
    secret = worker_secret(tmp_path)
    out = run_folder(tmp_path / "run", ranks=2)
    for rank, planted in enumerate(PLANTED, start=2):
        plant(out / "logs" / f"rank{rank}.log", planted, secret)
    plant(out / "logs" / "rank1.log", "secret", secret)
    plant(out / "ranks" / "rank1.json", "secret", secret)
    result, task_log = complete(handle_for(out, ranks=2, backend="local"))
    assert "S3CRET" not in task_log and "S3CRET" not in json.dumps(result)
    assert "rank 0 step 49" in task_log and "rank 0 step 29" not in task_log  # the last 20 lines
    assert result["log_paths"] == [str(out / "logs" / "rank0.log")]
