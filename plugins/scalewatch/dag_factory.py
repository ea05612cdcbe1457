"""The suite's DAG, built once per suite: the embedded default and every suite file share this shape.

Thin on purpose: parsing imports only the Airflow SDK and the form; all work happens in `bench`.
Weekly scaling regression: stage -> train at each scale -> rerun a failing scale warm and synthetic
(its cause) -> probe the storage (fio) -> evaluate (GX) -> store -> report -> alert.
"""

from __future__ import annotations

import inspect
import logging
from datetime import datetime, timedelta

from airflow.sdk import DAG, Asset, dag, task

from scalewatch.notifiers import ALERT_TASK_TIMEOUT
from scalewatch.operators import TrainScaleOperator

DATASET = Asset("scalewatch://dataset/under-test")
START = datetime(2026, 1, 5)
# confirm_causes' bound (bench.suite.run.confirmation_runs): at most one second run of each scale (a
# suspected regression) and a warm and a synthetic run of each scale (differential; its VARIANTS, kept
# literal here: parsing imports no pandas), one at a time, each waited on for its time limit plus 60 s.
RERUN_WAIT_SLACK_S = 60
DIFFERENTIAL_RERUNS_PER_SCALE = 2
CONFIRM_MARGIN = timedelta(minutes=10)  # reading the store, launching, collecting each rerun's files
log = logging.getLogger(__name__)


def confirm_causes_timeout(
    workloads: int, gpus: int, time_limit_s: int, confirm_regressions: bool, confirm_causes: bool
) -> timedelta:
    """The most the confirm_causes task may hold a worker slot: every rerun it could launch at its time
    limit plus 60 s, and a margin. Without it a hung wait held the slot (and, max_active_runs=1, next
    week's run) for up to every rerun's time limit and then some, with nothing to stop it."""
    per_scale = int(confirm_regressions) + DIFFERENTIAL_RERUNS_PER_SCALE * int(confirm_causes)
    reruns = workloads * gpus * per_scale
    return timedelta(seconds=reruns * (time_limit_s + RERUN_WAIT_SLACK_S)) + CONFIRM_MARGIN


def _timeout_of_settings(values: dict) -> timedelta:
    """The bound from settings as the form or a plan holds them (workloads and gpus lists); a setting the
    DAG's params leave out (a DAG built with no params) takes the suite's default."""
    from bench.config import SuiteSettings

    values = SuiteSettings.defaults() | values
    return confirm_causes_timeout(
        len(values["workloads"]),
        len(values["gpus"]),
        int(values["time_limit_s"]),
        bool(values["confirm_regressions"]),
        bool(values["confirm_causes"]) and not values.get("train", {}).get("synthetic", False),
    )


def _bound_to_this_run(context) -> None:
    """pre_execute of confirm_causes: the bound from this run's own plan (its conf may raise the time limit or
    widen the matrix past the DAG's defaults, which set the parse-time bound). The task runner reads
    execution_timeout after this hook, on this task's own copy of the operator."""
    task = context["task"]
    arguments = inspect.signature(task.python_callable).bind_partial(*task.op_args, **task.op_kwargs).arguments
    plan = arguments.get("plan")
    if isinstance(plan, dict) and isinstance(plan.get("sweep"), dict):
        task.execution_timeout = _timeout_of_settings(plan["sweep"])
        log.info("confirm_causes: execution_timeout %s from this run's settings", task.execution_timeout)


def build(dag_id: str, schedule: str | None, params: dict, description: str = "") -> DAG:
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
        @task
        def validate_config(**context) -> dict:
            """The run's Params as the typed settings, before anything is staged or launched: a conf key
            the suite does not know (a typo, a stale key) fails here, naming it and the closest names."""
            from airflow.sdk.exceptions import AirflowFailException

            from bench.errors import ConfigError
            from bench.suite.plan import run_matrix, suite_run_identity
            from scalewatch import paths
            from scalewatch.params import settings_from_params

            dag_run = context.get("dag_run")
            conf = dict(getattr(dag_run, "conf", None) or {})
            try:
                settings = settings_from_params(dict(context["params"]), conf)
                cfg = settings.sweep_config(paths.home(), paths.output_dir())
            except ConfigError as error:
                raise AirflowFailException(f"invalid params: {error}") from None
            return {
                "sweep": cfg.model_dump(mode="json"),
                "matrix": run_matrix(cfg),
                # the suite's identity holds its DAG: two suites on one schedule share Airflow's run_id
                "suite_run_id": suite_run_identity(context["dag"].dag_id, context["run_id"]),
            }

        @task(outlets=[DATASET])
        def stage_dataset(plan: dict) -> dict:
            from bench.config import SweepConfig
            from bench.suite.run import stage_datasets

            cfg = SweepConfig.model_validate(plan["sweep"])
            return {} if cfg.train.synthetic else stage_datasets(cfg)

        @task
        def matrix(plan: dict) -> list[dict]:
            return plan["matrix"]

        @task(trigger_rule="all_done")
        def cancel_leftover_runs(plan: dict | None) -> list[str]:
            from scalewatch.suite import cancel_leftover_runs

            return cancel_leftover_runs(plan) if plan else []  # no plan: nothing was launched

        @task(
            trigger_rule="all_done",
            execution_timeout=_timeout_of_settings(defaults),
            pre_execute=_bound_to_this_run,
        )
        def confirm_causes(plan: dict | None, results: list[dict] | None, **context) -> list[dict]:
            """Warm-cache and synthetic reruns of each failing scale and its baseline (one at a time)."""
            from scalewatch.suite import confirm_causes

            return confirm_causes(plan, results or [], context) if plan else []

        @task(trigger_rule="all_done")
        def probe_storage(plan: dict | None) -> dict:
            """fio's read ceiling of the staged dataset, after every scale has ended (never beside training)."""
            from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

            from bench.config import SweepConfig
            from bench.errors import BenchError
            from bench.suite.run import probe_storage

            if not plan:
                raise AirflowSkipException("no plan: nothing was staged")
            cfg = SweepConfig.model_validate(plan["sweep"])
            if not cfg.probe_storage or cfg.train.synthetic:
                raise AirflowSkipException("storage probe off (probe_storage false or synthetic data)")
            try:
                return probe_storage(cfg, plan["suite_run_id"])
            except BenchError as error:  # this task fails; the suite is evaluated without a ceiling
                raise AirflowFailException(f"storage probe: {error}") from None

        @task(trigger_rule="all_done")
        def evaluate(plan: dict | None, results: list[dict] | None, reruns: list[dict] | None, **context) -> dict:
            from airflow.sdk.exceptions import AirflowFailException

            from scalewatch.suite import evaluate_and_report

            if not plan:  # the settings did not validate: nothing ran, nothing to judge or store
                raise AirflowFailException("no plan: the run's settings did not validate (see validate_config)")
            return evaluate_and_report(plan, results or [], reruns or [], context)

        @task(trigger_rule="all_done", execution_timeout=ALERT_TASK_TIMEOUT)  # > every delivery deadline
        def alert(plan: dict, outcome: dict | None, **context) -> list[str]:
            from scalewatch.suite import send_alerts

            return send_alerts(plan, outcome, context)

        @task(trigger_rule="all_done")
        def verdict(outcome: dict | None) -> None:
            from airflow.sdk.exceptions import AirflowFailException

            if not outcome:
                raise AirflowFailException("no evaluation: an upstream step failed (see alert)")
            if not outcome["passed"]:
                lines = [
                    f"{f['workload']}@{f['gpus']} {f['metric']}={f['value']} bound {f['bound']}"
                    for f in outcome["failures"]
                ] + [
                    f"{i['workload']}@{i['gpus']} inconclusive: {i['reason']}" for i in outcome.get("inconclusive", [])
                ]
                what = "failed" if outcome["failures"] else "inconclusive"
                raise AirflowFailException(
                    f"scaling check {what}: " + "; ".join(lines) + f" report {outcome['report']}"
                )

        plan = validate_config()
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
        # A train task marked failed before its trigger ran leaves its job alive: nothing is evaluated
        # (or left on the cluster) until every run of this suite has ended.
        leftovers = cancel_leftover_runs(plan)
        runs >> leftovers
        reruns = confirm_causes(plan, runs.output)
        leftovers >> reruns
        # A rerun task killed mid-run leaves its job too: swept again before fio measures the storage.
        rerun_leftovers = cancel_leftover_runs.override(task_id="cancel_leftover_reruns")(plan)
        reruns >> rerun_leftovers
        probed = probe_storage(plan)
        rerun_leftovers >> probed
        outcome = evaluate(plan, runs.output, reruns)
        probed >> outcome
        alert(plan, outcome)
        verdict(outcome)

    return scaling_regression()


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
