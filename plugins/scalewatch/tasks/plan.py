"""The edge: a run's Params validated by the first task into the plan every other task reads."""

from __future__ import annotations

from airflow.sdk import task

from bench.config import SweepConfig


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
        settings = settings_from_params(dict(context["params"]) | conf)
        cfg = settings.sweep_config(paths.home(), paths.output_dir())
    except ConfigError as error:
        raise AirflowFailException(f"invalid params: {error}") from None
    return {
        "sweep": cfg.model_dump(mode="json"),
        "matrix": run_matrix(cfg),
        # the suite's identity holds its DAG: two suites on one schedule share Airflow's run_id
        "suite_run_id": suite_run_identity(context["dag"].dag_id, context["run_id"]),
    }


@task
def matrix(plan: dict) -> list[dict]:
    """The scales to train, one mapped `train` task each."""
    return plan["matrix"]


def sweep_config(plan: dict) -> SweepConfig:
    """The config `validate_config` checked, typed again for bench's functions (which take a SweepConfig)."""
    return SweepConfig.model_validate(plan["sweep"])
