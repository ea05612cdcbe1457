"""Evaluate, store and report: every scale and rerun judged once, written to the store and the report."""

from __future__ import annotations

from airflow.sdk import task

from scalewatch.tasks.plan import sweep_config
from scalewatch.tasks.scales import scale_results, started, with_summary


@task(trigger_rule="all_done")
def evaluate(plan: dict | None, results: list[dict] | None, reruns: list[dict] | None, **context) -> dict:
    from airflow.sdk.exceptions import AirflowFailException

    if not plan:  # the settings did not validate: nothing ran, nothing to judge or store
        raise AirflowFailException("no plan: the run's settings did not validate (see validate_config)")
    return evaluate_and_report(plan, results or [], reruns or [], context)


def evaluate_and_report(plan: dict, results: list[dict], reruns: list[dict], context) -> dict:
    from bench.suite.record import finish
    from scalewatch.paths import results_url

    cfg = sweep_config(plan)
    runs = scale_results(cfg, plan, results) + [{**r, "result": with_summary(r["result"])} for r in reruns if r]
    dag_run = context.get("dag_run")
    dag_id = dag_run.dag_id if dag_run else None
    return finish(cfg, plan["suite_run_id"], runs, started(context), results_url(), dag_id, run_type_of(dag_run))


def run_type_of(dag_run) -> str | None:
    """Airflow's run type as its plain value ("scheduled", "manual", ...): the SDK's DagRun holds the enum."""
    run_type = getattr(dag_run, "run_type", None)
    return None if run_type is None else str(getattr(run_type, "value", run_type))
