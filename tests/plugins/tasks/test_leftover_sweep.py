"""The DAG's sweep after the last scale (cancel_leftover_runs) finds a scale's leftover by the run id the
plan gave it: the sweep trusts a handle only with its folder's planned run id (issue 61 item 3), so the
task must pass the suite's run prefix, and that prefix must be the one bench.suite.plan.run_spec uses.

A real local run, left running, under an Airflow-style run id (':' and '+' in it).
scalewatch imports Airflow: imported inside the test, after the DAG tests' fixture has set AIRFLOW_HOME."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.config.models import SweepConfig, TrainConfig

pytestmark = pytest.mark.slow

SUITE_RUN_ID = "scheduled__2026-01-05T03:00:00+00:00"


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> Path:
    """Records for one idle rank (bench.data.records): real reads, then a timed wait per batch."""
    from bench.data.records import RecordsSpec, generate_records

    folder = tmp_path_factory.mktemp("records")
    generate_records(RecordsSpec("raw", 8, 2, 20_000, 2_000, seed=3), folder)
    return folder


def test_the_sweep_after_the_last_scale_cancels_a_leftover_of_the_plan(tmp_path, records):
    from bench.launch.base import RunState
    from bench.launch.leftovers import submit_recorded
    from bench.launch.registry import build_launcher
    from bench.suite.plan import run_spec
    from scalewatch.tasks.plan import plan_sweep
    from scalewatch.tasks.scales import cancel_leftover_runs
    from tests.bench.launch.conftest import idle
    from tests.infra.faults import train_pids, wait_for

    data = str(tmp_path / "data")
    cfg = SweepConfig(
        dataset_path=data, output_dir=str(tmp_path / "runs"), train=TrainConfig(workload="ssd", data=data, steps=6)
    )
    planned = run_spec(cfg, SUITE_RUN_ID, "ssd", 1)  # its run id and folder; an idle rank in place of ssd's
    left = planned.model_copy(update={"train": TrainConfig(**idle(records), batch_size=4, sample_interval_s=0.2)})
    launcher = build_launcher("local")
    handle = submit_recorded(launcher, left)
    try:
        wait_for(lambda: train_pids(left.output_dir), 60)
        swept = cancel_leftover_runs.function({"sweep": plan_sweep(cfg), "suite_run_id": SUITE_RUN_ID})
        assert swept == [planned.run_id]
        assert launcher.poll(handle)[0] == RunState.CANCELLED
    finally:
        launcher.cancel(handle)
    wait_for(lambda: not train_pids(left.output_dir), 60)
