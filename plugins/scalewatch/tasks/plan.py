"""The edge: a run's Params validated once, by the first task, into the plan every other task reads.

The plan is one XCom (`validate_config`'s, with `sweep`, `matrix` and `suite_run_id` as its keys): `sweep`
is the typed `SweepConfig` as JSON (`plan_sweep`: the values that differ from the defaults). Each later
task, a process of its own, validates it once with the same model (`sweep_config`), and that gives the
config the edge checked: the model's validators give the same result run twice (the test holds every
kind of field to it), so no second decoder of the dump is kept beside the model.
"""

from __future__ import annotations

from airflow.sdk import task

from bench.config.models import SweepConfig


@task
def validate_config(**context) -> dict:
    """The run's Params as the typed settings, before anything is staged or launched: a conf key
    the suite does not know (a typo, a stale key) fails here, naming it and the closest names."""
    from airflow.sdk.exceptions import AirflowFailException

    from bench.errors import ConfigError
    from bench.suite.plan import run_matrix, suite_run_identity
    from bench.workloads.spec import check_refs
    from scalewatch import paths
    from scalewatch.params import form_values, run_config

    dag_run = context.get("dag_run")
    conf = dict(getattr(dag_run, "conf", None) or {})
    try:
        # the suite's values (the DAG's defaults), not the run's Params: those already hold the conf, and a
        # deployment-only setting the conf changed (or a bound, which keeps the run out of history) would
        # look like the suite's own
        cfg = run_config(form_values(context["dag"]), conf, paths.home(), paths.output_dir())
        check_refs(cfg.training.workloads)  # each workload file's content, before anything runs
    except ConfigError as error:
        raise AirflowFailException(f"invalid params: {error}") from None
    return {
        "sweep": plan_sweep(cfg),
        "matrix": run_matrix(cfg),
        # the suite's identity holds its DAG: two suites on one schedule share Airflow's run_id
        "suite_run_id": suite_run_identity(context["dag"].dag_id, context["run_id"]),
    }


@task
def matrix(plan: dict) -> list[dict]:
    """The scales to train, one mapped `train` task each."""
    return plan["matrix"]


def plan_sweep(cfg: SweepConfig) -> dict:
    """The config as the plan carries it: its JSON, every value that differs from the model's default
    (the model fills in the rest, the same defaults on either side). A field left at its default is left
    out so that validating the dump gives the config back: TrainConfig's amp/precision rule reads which
    fields were given, and a full dump gives precision (fp32) beside amp."""
    return cfg.model_dump(mode="json", exclude_defaults=True)


def sweep_config(plan: dict) -> SweepConfig:
    """The config `validate_config` checked, validated again by the same model in this task's process
    (each task is one): what a task works on is what the edge checked, and an XCom changed on its way
    is refused naming the field, as the edge would have refused it."""
    from bench.config.models import SETTING_GROUPS
    from bench.config.types import parse

    sweep = from_before_groups(plan["sweep"])
    return parse(SweepConfig, sweep, prefix="plan.sweep.", groups=tuple(SETTING_GROUPS))


def from_before_groups(sweep: dict) -> dict:
    """A plan written before the run's config held the setting groups (a run in flight across the upgrade,
    or an old run's task cleared and run again) as today's: its flat names are routed to their groups as
    a user's are; three keys changed name or form, and are given theirs (the thresholds are the `bounds`
    group, the declared cache is the setting as written, a host is `host[:slots]`). Anything else is left
    for the model to take or refuse."""
    if not isinstance(sweep, dict):
        return sweep
    sweep = dict(sweep)
    if "thresholds" in sweep and "bounds" not in sweep:
        sweep["bounds"] = sweep.pop("thresholds")
    if "storage_cache_bytes" in sweep and "storage_cache" not in sweep:
        held = sweep.pop("storage_cache_bytes")
        sweep["storage_cache"] = f"{held}B" if isinstance(held, int) else held
    hosts = sweep.get("hosts")
    if isinstance(hosts, list):
        sweep["hosts"] = [f"{h.get('host')}:{h.get('slots', 1)}" if isinstance(h, dict) else h for h in hosts]
    return sweep
