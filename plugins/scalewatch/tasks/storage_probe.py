"""fio's read ceiling of the staged dataset, after every scale and rerun has ended (never beside training)."""

from __future__ import annotations

from airflow.sdk import task

from scalewatch.tasks.plan import sweep_config


@task(trigger_rule="all_done")
def probe_storage(plan: dict | None) -> dict:
    """fio's read ceiling of the staged dataset from the compute nodes (1, 2, 4, ... at once, through the
    suite's launcher), after every scale has ended (never beside training)."""
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from bench.errors import BenchError
    from bench.suite.run import probe_storage
    from scalewatch.tasks.scales import launcher

    if not plan:
        raise AirflowSkipException("no plan: nothing was staged")
    cfg = sweep_config(plan)
    if not cfg.probe.probe_storage or cfg.train.synthetic:
        raise AirflowSkipException("storage probe off (probe_storage false or synthetic data)")
    try:
        return probe_storage(cfg, plan["suite_run_id"], launcher(cfg))
    except BenchError as error:  # this task fails; the suite is evaluated without a ceiling
        raise AirflowFailException(f"storage probe: {error}") from None
