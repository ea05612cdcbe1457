"""Around the scales (the mapped `train` tasks, `scalewatch.operators`): staging before them, the sweep of
leftover jobs after them, and the reruns that confirm a failing scale's verdict and cause."""

from __future__ import annotations

import inspect
import logging
from datetime import timedelta

from airflow.sdk import Asset, task

from bench.config.models import SweepConfig
from scalewatch.tasks.plan import sweep_config

# confirm_causes' bound (bench.suite.run.confirmation_runs): at most one second run of each scale (a
# suspected regression or a bound miss) and a warm and a synthetic run of each scale (differential; its VARIANTS, kept
# literal here: parsing imports no pandas), one at a time, each waited on for its time limit plus 60 s.
RERUN_WAIT_SLACK_S = 60
DIFFERENTIAL_RERUNS_PER_SCALE = 2
# and, whatever the switches, one re-measure of a scale and of its node ceiling measured under interference
# (bench.analysis.verdict.interference; kept literal here for the same reason)
REMEASURES_PER_SCALE = 2
CONFIRM_MARGIN = timedelta(minutes=10)  # reading the store, launching, collecting each rerun's files
log = logging.getLogger(__name__)
DATASET = Asset("scalewatch://dataset/under-test")  # what stage_dataset updates


@task(outlets=[DATASET])
def stage_dataset(plan: dict) -> dict:
    from bench.suite.run import stage_datasets
    from scalewatch.connections import s3_store_variables

    cfg = sweep_config(plan)
    if cfg.train.synthetic:
        return {}
    on_node = launcher(cfg) if cfg.resolved_stage_on() == "node" else None
    return stage_datasets(cfg, on_node, store_env=s3_store_variables(cfg.data))


@task(trigger_rule="all_done")
def cancel_leftover_runs(plan: dict | None) -> list[str]:
    """After the last scale: no job of this suite may outlive it (see bench.launch.leftovers)."""
    from bench.launch.leftovers import cancel_unfinished
    from bench.suite.plan import run_prefix, suite_dir

    if not plan:  # nothing was launched
        return []
    cfg = sweep_config(plan)
    folder, prefix = suite_dir(cfg.output_dir, plan["suite_run_id"]), run_prefix(plan["suite_run_id"])
    return cancel_unfinished(launcher(cfg, starts_ranks=False), folder, prefix)


def rerun_to_confirm(plan: dict, results: list[dict], context) -> list[dict]:
    """The reruns that check a verdict (a suspected regression's second run, the differential reruns of
    a failing scale), after every scale has ended; small XComs (the summaries are read back from their
    paths)."""
    from bench.suite.run import confirmation_runs
    from scalewatch.paths import results_url

    cfg = sweep_config(plan)
    runs = scale_results(cfg, plan, results)
    reruns = confirmation_runs(cfg, launcher(cfg), plan["suite_run_id"], runs, started(context), results_url())
    return [{**r, "result": {**r["result"], "summary": None}} for r in reruns]


def confirm_causes_timeout(
    workloads: int, gpus: int, time_limit_s: int, confirm_regressions: bool, confirm_causes: bool
) -> timedelta:
    """The most the confirm_causes task may hold a worker slot: every rerun it could launch at its time
    limit plus 60 s, and a margin. Without it a hung wait held the slot (and, max_active_runs=1, next
    week's run) for up to every rerun's time limit and then some, with nothing to stop it."""
    per_scale = REMEASURES_PER_SCALE + int(confirm_regressions) + DIFFERENTIAL_RERUNS_PER_SCALE * int(confirm_causes)
    reruns = workloads * gpus * per_scale
    return timedelta(seconds=reruns * (time_limit_s + RERUN_WAIT_SLACK_S)) + CONFIRM_MARGIN


def timeout_of_form(values: dict) -> timedelta:
    """The parse-time bound, from the DAG's form defaults; a setting the DAG's params leave out (a DAG
    built with no params) takes the suite's default."""
    from bench.config.models import SuiteSettings

    values = SuiteSettings.defaults() | values
    return confirm_causes_timeout(
        len(values["workloads"]),
        len(values["gpus"]),
        int(values["time_limit_s"]),
        bool(values["confirm_regressions"]),
        bool(values["confirm_causes"]),
    )


def timeout_of_sweep(cfg: SweepConfig, matrix: list[dict] | None = None) -> timedelta:
    """The bound of what this run will do (synthetic data has no differential reruns): each scale of
    the plan's matrix (an emulated workload's AU search adds counts to the suite's gpus), else each
    workload at each of the suite's counts."""
    causes = cfg.probe.confirm_causes and not cfg.train.synthetic
    scales = (
        len({(m["workload"], m["gpus"]) for m in matrix})
        if matrix
        else len(cfg.training.workloads) * len(cfg.training.gpus)
    )
    return confirm_causes_timeout(1, scales, cfg.where.time_limit_s, cfg.probe.confirm_regressions, causes)


def bound_to_this_run(context) -> None:
    """pre_execute of confirm_causes: the bound from this run's own plan (its conf may raise the time limit or
    widen the matrix past the DAG's defaults, which set the parse-time bound). The task runner reads
    execution_timeout after this hook, on this task's own copy of the operator."""
    task_ = context["task"]
    arguments = inspect.signature(task_.python_callable).bind_partial(*task_.op_args, **task_.op_kwargs).arguments
    plan = arguments.get("plan")
    if isinstance(plan, dict) and isinstance(plan.get("sweep"), dict):
        task_.execution_timeout = timeout_of_sweep(sweep_config(plan), plan.get("matrix"))
        log.info("confirm_causes: execution_timeout %s from this run's settings", task_.execution_timeout)


# execution_timeout: the DAG sets the parse-time bound (timeout_of_form of its defaults)
@task(trigger_rule="all_done", pre_execute=bound_to_this_run)
def confirm_causes(plan: dict | None, results: list[dict] | None, **context) -> list[dict]:
    """Warm-cache and synthetic reruns of each failing scale and its baseline (one at a time)."""
    return rerun_to_confirm(plan, results or [], context) if plan else []


def launcher(cfg: SweepConfig, starts_ranks: bool = True):
    """The suite's launcher as this task's process builds it (key material resolved here; where it
    `starts_ranks`, the S3 endpoint the ranks and node probes read, where the suite's aws_conn_id names
    one: a task that only cancels jobs never looks the connection up, so it cannot fail on it)."""
    from scalewatch.connections import export_s3_endpoint
    from scalewatch.launchers import from_kwargs, launcher_kwargs

    if starts_ranks:
        export_s3_endpoint(cfg.data)
    return from_kwargs(launcher_kwargs(cfg.where.launcher, cfg.where.conn_id, cfg.where.ssh_config))


def with_summary(result: dict) -> dict:
    """A completed run's result with its summary read back from its run folder (XComs hold only the path),
    as the launcher collected it: no link followed, bounded, validated (bench.launch.base.with_summary)."""
    from bench.launch.base import with_summary as read_back

    return read_back(result)


def scale_results(cfg: SweepConfig, plan: dict, results: list[dict]) -> list[dict]:
    """Each planned scale with its train task's result (a missing one is a FAILED run, never skipped)."""
    from bench.suite.plan import run_spec

    by_run = {(r.get("run_id") or ""): r for r in results if r}
    runs = []
    for item in plan["matrix"]:
        spec = run_spec(cfg, plan["suite_run_id"], item["workload"], item["gpus"], item.get("variant", ""))
        result = by_run.get(spec.run_id) or {
            "state": "FAILED",
            "reason": "training task did not return a result",
            "output_dir": str(spec.output_dir),
        }
        runs.append({**item, "result": with_summary(result)})
    return runs


def started(context) -> str:
    return context["dag_run"].start_date.isoformat() if context.get("dag_run") else ""
