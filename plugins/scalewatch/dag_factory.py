"""The suite's DAG, built once per suite: the embedded default and every suite file share this shape.

Thin on purpose: this module only wires the tasks of `scalewatch.tasks`; parsing imports only the Airflow
SDK and the form; all work happens in `bench`.
Weekly scaling regression: stage -> train at each scale -> rerun a failing scale warm and synthetic
(its cause) -> probe the storage (fio) -> evaluate (GX) -> store -> report -> alert.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, dag

from scalewatch.operators import TrainScaleOperator
from scalewatch.tasks.alert import alert
from scalewatch.tasks.plan import matrix, validate_config
from scalewatch.tasks.record import evaluate
from scalewatch.tasks.scales import cancel_leftover_runs, confirm_causes, stage_dataset, timeout_of_form
from scalewatch.tasks.storage_probe import probe_storage
from scalewatch.tasks.verdict import verdict

START = datetime(2026, 1, 5)


def build(dag_id: str, schedule: str | None, params: dict, description: str = "") -> DAG:
    """The suite's DAG: its form (`params`) and the parse-time bound of confirm_causes from the form's defaults."""
    defaults = {name: getattr(param, "value", param) for name, param in params.items()}

    @dag(
        dag_id=dag_id,
        schedule=schedule,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        params=params,
        tags=["scalewatch"],
        doc_md=(description + "\n\n" if description else "") + (__doc__ or ""),
    )
    def scaling_regression():
        plan = validate_config()
        runs = train_every_scale(plan)
        reruns = confirm_every_scale(plan, runs, timeout_of_form(defaults))
        probed = probe_after(reruns, plan)
        outcome = evaluate(plan, runs.output, reruns)
        probed >> outcome
        alert(plan, outcome)
        verdict(outcome)

    return scaling_regression()


def train_every_scale(plan):
    """Stage, then one mapped `train` task per scale of the plan's matrix."""
    staged = stage_dataset(plan)
    runs = TrainScaleOperator.partial(
        task_id="train",
        sweep=plan["sweep"],
        suite_run_id=plan["suite_run_id"],
        retries=0,
        # One scale at a time, deferred waits included: scales that share cores, network or storage
        # measure each other, not the infrastructure (concurrent 1- and 6-rank runs looked linear).
        max_active_tis_per_dag=1,
    ).expand(run=matrix(plan))
    staged >> runs
    return runs


def confirm_every_scale(plan, runs, timeout: timedelta):
    """The confirming reruns, after every scale's job has ended; their XCom (the reruns' results)."""
    # A train task marked failed before its trigger ran leaves its job alive: nothing is evaluated
    # (or left on the cluster) until every run of this suite has ended.
    leftovers = cancel_leftover_runs(plan)
    runs >> leftovers
    reruns = confirm_causes.override(execution_timeout=timeout)(plan, runs.output)
    leftovers >> reruns
    return reruns


def probe_after(reruns, plan):
    """fio, once the reruns' jobs are swept too: never beside training."""
    # A rerun task killed mid-run leaves its job too: swept again before fio measures the storage.
    rerun_leftovers = cancel_leftover_runs.override(task_id="cancel_leftover_reruns")(plan)
    reruns >> rerun_leftovers
    probed = probe_storage(plan)
    rerun_leftovers >> probed
    return probed


class InvalidSuiteDag(DAG):
    """Stands for a suite file that failed validation: Airflow's DagBag calls validate() on each DAG
    of a file separately, so this one becomes an import error naming the suite file and field while
    the other suites' DAGs of the same loader file still load."""

    def __init__(self, dag_id: str, error: str) -> None:
        super().__init__(dag_id=dag_id, schedule=None, start_date=START, tags=["scalewatch"])
        self._suite_error = error

    def validate(self) -> None:
        from bench.errors import ConfigError

        raise ConfigError(self._suite_error)
