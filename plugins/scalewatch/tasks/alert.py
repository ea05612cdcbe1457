"""The alert task: the verdict (or a passing week's slow nodes) and the change notices, to every target."""

from __future__ import annotations

from pathlib import Path

from airflow.sdk import task

from bench.config.models import SweepConfig
from scalewatch.notifiers import ALERT_TASK_TIMEOUT
from scalewatch.tasks.plan import sweep_config


@task(trigger_rule="all_done", execution_timeout=ALERT_TASK_TIMEOUT)  # > every delivery deadline
def alert(plan: dict, outcome: dict | None, **context) -> list[str]:
    return send_alerts(plan, outcome, context)


def links(cfg: SweepConfig, suite_run_id: str, context) -> tuple[str | None, str | None]:
    """The report and the DAG run as URLs a recipient can open, through the web server's public base URL."""
    from urllib.parse import quote

    from airflow.configuration import conf

    from bench.suite.plan import suite_dir

    base = (conf.get("api", "base_url", fallback="") or "").rstrip("/")
    if not base:
        return None, None
    report = f"{base}/scalewatch/reports/{quote(suite_dir(cfg.output_dir, suite_run_id).name)}/report.html"
    dag_run = context.get("dag_run")
    run = f"{base}/dags/{quote(dag_run.dag_id)}/runs/{quote(dag_run.run_id)}" if dag_run else None
    return report, run


def _messages(cfg: SweepConfig, suite_run_id: str, outcome: dict | None, links_: tuple) -> list[tuple[str, str]]:
    """(subject, text) of the verdict alert, or of the slow nodes in a passing week; none for a plain pass."""
    from scalewatch.notifiers.message import alert_text, node_news

    inconclusive: list[dict] = []
    if outcome is None:
        failures = [
            {
                "workload": "*",
                "gpus": "*",
                "metric": "pipeline",
                "value": "failed",
                "bound": "completed",
                "expectation": "an upstream task failed before evaluation",
            }
        ]
        report = None
    else:
        failures, report = outcome["failures"], outcome["report"]
        inconclusive = outcome.get("inconclusive", [])
    report_url, run_url = links_
    nodes = (outcome or {}).get("slow_nodes") or []
    interfering = (outcome or {}).get("interfering_nodes") or []  # bench.analysis.history.interference
    if failures or inconclusive:
        at_au = (outcome or {}).get("accelerators_at_au") or {}
        figures = (outcome or {}).get("inconclusive_figures") or []
        text = alert_text(
            suite_run_id,
            failures,
            report,
            report_url,
            run_url,
            inconclusive,
            nodes,
            at_au,
            figures,
            interfering,
            (outcome or {}).get("storage"),
        )
        verdict = "FAILED" if failures else "INCONCLUSIVE"
        return [(f"scalewatch: scaling check {verdict} ({suite_run_id})", text)]
    # a failing node is news in a passing week too
    return node_news(cfg.where.cluster, suite_run_id, nodes, interfering, (report, report_url, run_url))


def _store_errors() -> tuple[type[Exception], ...]:
    """What the results store raises when it cannot be opened or written (unreachable, not at a schema
    this code reads, a full disk)."""
    from sqlalchemy.exc import SQLAlchemyError

    from bench.errors import ConfigError

    return (ConfigError, SQLAlchemyError, OSError)


class ChangeLedger:
    """Which alert target got which change notice, in the results store (`change_deliveries`): a target is
    sent only the notices it lacks, and each delivery is recorded as soon as it succeeded. Notices that
    name no stored change point are sent every time (nothing to record them under)."""

    def __init__(self, changes: list[dict], everyone: list[str]) -> None:
        from bench.analysis.history.changes import notice_key

        self.changes, self.everyone = changes, everyone
        self.keys = [k for k in (notice_key(c) for c in changes) if k is not None]
        self.store = None
        self.delivered: dict[tuple, set[str]] = {}
        if self.keys:
            from bench.store.db import ResultsStore
            from scalewatch.paths import results_url

            self.store = ResultsStore(results_url())
            self.delivered = self.store.delivered(self.keys)

    def due(self, target: str) -> list[dict]:
        from bench.analysis.history.changes import due
        from bench.store.tables import ALL_TARGETS

        return due(self.changes, target, self.delivered, ALL_TARGETS)

    def mark(self, target: str, notices: list[dict], suite_run_id: str) -> None:
        from bench.analysis.history.changes import notice_key

        kept = [n for n in notices if notice_key(n) is not None]
        if self.store is not None and kept:
            self.store.mark_delivered(kept, target, suite_run_id, self.everyone)
        for n in kept:
            self.delivered.setdefault(notice_key(n), set()).add(target)

    def close(self) -> None:
        if self.store is not None:
            self.store.engine.dispose()


def send_alerts(plan: dict | None, outcome: dict | None, context) -> list[str]:
    """The verdict (or the slow nodes of a passing week) and the change notices, to every alert target on
    its own: one target's failure never stops another's delivery, nor the change notices after the
    verdict. Each delivery is recorded as it succeeds (messages in the run folder, change notices in the
    store), so a retry sends a target only what it still lacks; the failures are raised together at the
    end, failing the task so that Airflow retries it."""
    from bench.suite.plan import suite_dir
    from scalewatch.notifiers.message import change_text
    from scalewatch.notifiers.registry import Deliveries, targets
    from scalewatch.notifiers.sent import SentLog

    if plan is None:
        return []
    cfg = sweep_config(plan)
    suite_run_id = plan["suite_run_id"]
    report_url, run_url = links(cfg, suite_run_id, context)
    messages = _messages(cfg, suite_run_id, outcome, (report_url, run_url))
    changes = (outcome or {}).get("changes") or []
    report = (outcome or {}).get("report")
    everyone = targets(cfg.alerts)
    store_errors = _store_errors()
    deliveries, sent_log = Deliveries(), SentLog(suite_dir(Path(cfg.output_dir), suite_run_id))
    ledger = None
    if changes and everyone:
        try:
            ledger = ChangeLedger(changes, [t.name for t in everyone])
        except store_errors as error:  # the change notices wait for the retry; the verdict goes now
            deliveries.fail("change notices (results store)", error)
    try:
        for target in everyone:
            for subject, text in messages:
                if not sent_log.has(target.name, subject, text) and deliveries.attempt(target, subject, text, context):
                    sent_log.add(target.name, subject, text)
            due = ledger.due(target.name) if ledger is not None else []
            if not due:
                continue
            subject = f"scalewatch: {len(due)} change(s) in the weekly history ({suite_run_id})"
            text = change_text(suite_run_id, due, report, report_url, run_url)
            if deliveries.attempt(target, subject, text, context):
                try:
                    ledger.mark(target.name, due, suite_run_id)
                except store_errors as error:  # delivered, not recorded: a retry sends it to this target again
                    deliveries.fail(f"recording the change notices sent via {target.kind}", error)
    finally:
        if ledger is not None:
            ledger.close()
    deliveries.raise_failures()
    return deliveries.sent
