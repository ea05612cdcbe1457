"""The whole suite without Airflow (`bench sweep`): the same steps as the DAG's tasks, in one process."""

from __future__ import annotations

from datetime import UTC, datetime

from bench.config.models import SweepConfig
from bench.suite.plan import new_suite_run_id, run_matrix
from bench.suite.record import finish
from bench.suite.run import confirmation_runs, probe_storage, run_one, stage_datasets


def sweep(
    cfg: SweepConfig,
    store_url: str,
    suite_run_id: str | None = None,
    log=print,
    launcher=None,
    node_env: dict[str, str] | None = None,
) -> dict:
    """The whole suite without Airflow: what the README's first command runs. `launcher`: one built with
    ssh options of the caller's (default: the suite's, with the user's ssh config); `node_env`: what
    staging and the probe get on the nodes (sshd passes none of ours)."""
    from bench.launch.registry import suite_launcher

    suite_run_id = suite_run_id or new_suite_run_id()
    started = datetime.now(UTC).isoformat()
    log(f"suite run {suite_run_id}: staging datasets under {cfg.data.dataset_path} on the {cfg.resolved_stage_on()}")
    launcher = launcher or suite_launcher(cfg)
    if not cfg.train.synthetic:
        stage_datasets(cfg, launcher, node_env)
    runs = []
    for item in run_matrix(cfg):
        what = " as independent copies (node ceiling)" if item.get("variant") else ""
        log(f"  {item['workload']} on {item['gpus']} rank(s){what} via {cfg.where.launcher} ...")
        result = run_one(cfg, launcher, suite_run_id, item["workload"], item["gpus"], item.get("variant", ""))
        log(f"    {result.state} {result.reason}".rstrip())
        runs.append({**item, "result": result.as_dict()})
    runs += confirmation_runs(cfg, launcher, suite_run_id, runs, started, store_url, log)
    if cfg.probe.probe_storage and not cfg.train.synthetic:
        from bench.errors import BenchError

        try:
            probed = probe_storage(cfg, suite_run_id, launcher, node_env)
            curve = ", ".join(f"{a['nodes']} node(s) {a['mb_s']:.1f}" for a in probed["aggregate"])
            log(f"  storage probe: one node {probed['per_node_mb_s']:.1f} MB/s; {curve} MB/s; bound {probed['bound']}")
            for slow in probed["slow_nodes"]:
                peers = slow["peers_median_mb_s"]
                log(f"  slow node {slow['host']}: {slow['mb_s']:.2f} MB/s, its peers' median {peers:.2f} MB/s")
        except BenchError as error:  # the suite is still evaluated; no ceiling, nothing stored for it
            log(f"  storage probe failed: {error}")
    return {"suite_run_id": suite_run_id, **finish(cfg, suite_run_id, runs, started, store_url)}
