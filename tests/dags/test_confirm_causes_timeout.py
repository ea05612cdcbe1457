"""confirm_causes holds a worker slot for a bounded time: every rerun it could launch at its time limit plus
60 s, and a margin; from the suite's settings when the DAG is parsed, from the run's own when it starts."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd

from bench.analysis.verdict.differential import VARIANTS, rerun_plan
from tests.dags.test_scaling_regression import load_dag

MARGIN_S = 600
NO_CONFIRMING = {"confirm_causes": False, "confirm_regressions": False}


def _build(values: dict):
    from scalewatch.dag_factory import build
    from scalewatch.params import params

    return build("confirm_timeout_test", None, params(values))


def test_the_task_is_bounded_by_the_suites_settings(airflow_home):
    dag = _build({"workloads": ["ssd"], "gpus": [1, 2, 4], "time_limit_s": 600})
    # 1 workload x 3 scales x (a re-measure of the scale and of its ceiling after interference, a second run,
    # warm, synthetic) reruns, each 600 s + 60 s, and the margin
    assert dag.get_task("confirm_causes").execution_timeout == timedelta(seconds=15 * 660 + MARGIN_S)
    off = _build({"workloads": ["ssd"], "gpus": [1, 2, 4], "time_limit_s": 600} | NO_CONFIRMING)
    # the re-measures after interference are not switched off: they decide whether a figure is the node's
    assert off.get_task("confirm_causes").execution_timeout == timedelta(seconds=6 * 660 + MARGIN_S)
    shipped = load_dag(airflow_home).get_task("confirm_causes").execution_timeout
    assert shipped is not None and shipped < timedelta(days=1)


def test_a_runs_own_settings_bound_it_when_it_starts(airflow_home):
    """A conf that raises the time limit past the suite's default gets the bound of what it will run."""
    from scalewatch import paths
    from scalewatch.params import settings_from_params

    dag = _build({"workloads": ["ssd"], "gpus": [1, 2], "time_limit_s": 600})
    task = dag.get_task("confirm_causes")
    conf = {"workloads": ["ssd"], "gpus": [1, 2], "time_limit_s": 7200, "confirm_regressions": False}
    sweep = settings_from_params(conf).sweep_config(paths.home(), paths.output_dir())
    task.op_args = [{"sweep": sweep.model_dump(mode="json"), "suite_run_id": "t.manual"}, []]  # as rendered
    task._pre_execute_hook({"task": task})  # what the task runner calls before it reads execution_timeout
    # re-measures (scale and ceiling), warm and synthetic
    assert task.execution_timeout == timedelta(seconds=1 * 2 * (2 + 2) * 7260 + MARGIN_S)


def test_the_bound_counts_every_rerun_the_task_can_launch(airflow_home):
    """Every scale below its bound: the differential plan is at most len(VARIANTS) reruns per scale."""
    from scalewatch.tasks.scales import DIFFERENTIAL_RERUNS_PER_SCALE

    gpus = [1, 2, 4, 8]
    frame = pd.DataFrame(
        [
            {"workload": w, "gpus": g, "baseline_gpus": 1, "state": "COMPLETED", "valid": True}
            | {"scaling_efficiency": 0.1, "oversubscribed": False}
            for w in ("ssd", "deeplabv3plus")
            for g in gpus
        ]
    )
    plan = rerun_plan(frame, lambda _gpus: 0.9)
    assert len(VARIANTS) == DIFFERENTIAL_RERUNS_PER_SCALE
    assert len(plan) == DIFFERENTIAL_RERUNS_PER_SCALE * 2 * len(gpus)
