"""Running a suite: staging the datasets, each scale, the differential reruns of a failing scale, and
fio's storage probe. Failures become FAILED results (never exceptions past a scale)."""

from __future__ import annotations

from datetime import UTC, datetime

from bench.config.models import SweepConfig
from bench.launch.base import RunResult, fetch_and_collect, launch_failed, wait
from bench.suite.plan import PROBE_FILE, images_over_s3, run_spec, suite_dir


def stage_datasets(
    cfg: SweepConfig, launcher=None, env: dict[str, str] | None = None, store_env: dict[str, str] | None = None
) -> dict:
    """Generate (or stage from `stage_from`) each workload's dataset; manifest-checked. `stage_on: node`
    runs all of it on a compute node through the launcher (bench.suite.stage_node), so the worker need
    not mount the store; `env` as for probe_storage. `store_env`: a bucket's endpoint and keys as the
    standard AWS variables (a DAG's aws_conn_id); None: this process's own."""
    from bench.workloads.spec import check_refs

    check_refs(cfg.training.workloads)  # every workload file valid before any dataset is written
    if cfg.resolved_stage_on() == "node":
        from bench.suite.stage_node import stage_on_node

        return stage_on_node(cfg, launcher, env)
    from bench.suite.staging import StagingSpec, stage_here

    return stage_here(StagingSpec.of(cfg), store_env)


def probe_storage(cfg: SweepConfig, suite_run_id: str, launcher=None, env: dict[str, str] | None = None) -> dict:
    """fio's ceiling of the staged datasets read from the compute nodes, one and then 2, 4, ... at once
    (bench.suite.node_probe), written beside the run's results; raises ProbeError or DatasetError naming the
    node (the task fails; the suite is evaluated without a ceiling, history untouched). `env`: what the
    nodes' probe processes get (sshd passes none of ours), as a RunSpec's env."""
    from bench.launch.registry import suite_launcher
    from bench.suite.node_probe import probe_nodes, suite_nodes, write_probe

    launcher = launcher or suite_launcher(cfg)
    result = probe_nodes(cfg, suite_nodes(cfg, launcher, env))
    result["probed_at"] = datetime.now(UTC).isoformat()
    write_probe(suite_dir(cfg.output_dir, suite_run_id), result, PROBE_FILE)
    keys = ("ceiling_mb_s", "per_node_mb_s", "aggregate", "bound", "slow_nodes", "conclusive", "reason", "method")
    return {k: result[k] for k in keys}


def run_one(cfg: SweepConfig, launcher, suite_run_id: str, workload: str, gpus: int, variant: str = "") -> RunResult:
    """Submit, wait (cancelling on timeout), collect: a failure becomes a FAILED result, not an exception."""
    from bench.errors import BenchError
    from bench.launch.leftovers import submit_recorded

    spec = run_spec(cfg, suite_run_id, workload, gpus, variant)
    try:
        handle = submit_recorded(launcher, spec)
    except BenchError as error:
        return launch_failed(spec, launcher.name, error)
    state, reason = wait(launcher, handle, cfg.where.time_limit_s + 60)
    return fetch_and_collect(launcher, handle, state, reason)


def confirmation_runs(
    cfg: SweepConfig, launcher, suite_run_id: str, runs: list[dict], started_at: str, store_url: str, log=print
) -> list[dict]:
    """The reruns that check a verdict before it is given, one at a time after every scale has ended:
    each scale or node ceiling measured under interference once more (bench.analysis.verdict.interference),
    each suspected regression's and each bound miss's second run, then the differential reruns of each
    scale below its bound. Scales measured under interference are not confirmed or diagnosed on that
    figure: their re-measure is what is judged. [] when nothing needs one or nothing was measured."""
    from bench.analysis.verdict.differential import rerun_plan
    from bench.analysis.verdict.evaluate import scale_frame
    from bench.analysis.verdict.interference import remeasure_plan, share_bound
    from bench.errors import ResultsInputError

    plan = [("measured under interference", i) for i in remeasure_plan(runs, share_bound(cfg.bounds))]
    differential = cfg.probe.confirm_causes and not cfg.train.synthetic
    from bench.store.db import ResultsStore

    store = ResultsStore(store_url) if store_url else None  # the ceiling is checked against its history too
    try:
        frame = judgeable(cfg, scale_frame(cfg, suite_run_id, runs, started_at, store=store))
    except ResultsInputError:
        frame = None
    if frame is not None:
        plan += [("a second run before a verdict", i) for i in second_runs(cfg, frame, store_url, suite_run_id)]
    if frame is not None and differential:  # the warm-cache and synthetic reruns (verdict.differential)
        separable = frame[[not images_over_s3(cfg, str(w)) for w in frame["workload"]]]
        plan += [("confirming the cause", i) for i in rerun_plan(separable, cfg.bounds.scaling_bound)]
    return [_rerun(cfg, launcher, suite_run_id, item, why, log) for why, item in plan]


def judgeable(cfg: SweepConfig, frame):
    """The scales whose own measurement holds (no interference, contention, short window): only these
    are confirmed or diagnosed by reruns."""
    from bench.analysis.verdict.rules import measurement_problems

    return frame[measurement_problems(frame, cfg.bounds).eq("")]


def second_runs(cfg: SweepConfig, frame, store_url: str, suite_run_id: str) -> list[dict]:
    """One second run of each scale under its regression floor or below its scaling bound (a bound miss
    is FAILED only when both runs miss it); [] when confirm_regressions is off."""
    from bench.analysis.verdict.differential import scales_to_confirm
    from bench.results.schema import REPEAT

    if not cfg.probe.confirm_regressions or frame.empty:
        return []
    items = regression_repeats(cfg, frame, store_url, suite_run_id)
    for workload, gpus, _ in scales_to_confirm(frame, cfg.bounds.scaling_bound):
        item = {"workload": workload, "gpus": gpus, "variant": REPEAT}
        if item not in items:
            items.append(item)
    return items


def regression_repeats(cfg: SweepConfig, frame, store_url: str, suite_run_id: str) -> list[dict]:
    """A second run of each scale whose images/s (or a checkpoint MB/s) fell under its series' regression
    floor (the check then takes the better of the two: bench.analysis.history.regression); [] when
    confirm_regressions is off."""
    from bench.analysis.verdict.evaluate import suspected_regressions
    from bench.results.schema import REPEAT
    from bench.store.db import ResultsStore

    if not cfg.probe.confirm_regressions:
        return []
    suspects = suspected_regressions(cfg, frame, ResultsStore(store_url), suite_run_id)
    return [{"workload": w, "gpus": g, "variant": REPEAT} for w, g in suspects]


def _rerun(cfg: SweepConfig, launcher, suite_run_id: str, item: dict, why: str, log) -> dict:
    log(f"  {why}: {item['workload']} on {item['gpus']} rank(s), {item['variant']} ...")
    result = run_one(cfg, launcher, suite_run_id, item["workload"], item["gpus"], item["variant"])
    log(f"    {result.state} {result.reason}".rstrip())
    return {**item, "result": result.as_dict()}
