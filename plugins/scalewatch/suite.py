"""Task bodies for evaluate/store/report and alert: bench does the work, this passes small XComs."""

from __future__ import annotations

import json
from pathlib import Path

from bench.config import SweepConfig


def _summary(result: dict) -> dict:
    if result.get("state") == "COMPLETED" and result.get("summary") is None and result.get("summary_path"):
        result = {**result, "summary": json.loads(Path(result["summary_path"]).read_text())}
    return result


def _launcher(cfg: SweepConfig):
    """The suite's launcher as this task's process builds it (key material resolved here)."""
    from scalewatch.launchers import from_kwargs, launcher_kwargs

    return from_kwargs(launcher_kwargs(cfg.launcher, cfg.conn_id, cfg.hosts))


def cancel_leftover_runs(plan: dict) -> list[str]:
    """After the last scale: no job of this suite may outlive it (see bench.launch.leftovers)."""
    from bench.launch.leftovers import cancel_unfinished
    from bench.suite.plan import suite_dir

    cfg = SweepConfig.model_validate(plan["sweep"])
    return cancel_unfinished(_launcher(cfg), suite_dir(cfg.output_dir, plan["suite_run_id"]))


def _runs(cfg: SweepConfig, plan: dict, results: list[dict]) -> list[dict]:
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
        runs.append({**item, "result": _summary(result)})
    return runs


def _started(context) -> str:
    return context["dag_run"].start_date.isoformat() if context.get("dag_run") else ""


def confirm_causes(plan: dict, results: list[dict], context) -> list[dict]:
    """The reruns that check a verdict (a suspected regression's second run, the differential reruns of
    a failing scale), after every scale has ended; small XComs (the summaries are read back from their
    paths)."""
    from bench.suite.run import confirmation_runs
    from scalewatch.paths import results_url

    cfg = SweepConfig.model_validate(plan["sweep"])
    runs = _runs(cfg, plan, results)
    reruns = confirmation_runs(cfg, _launcher(cfg), plan["suite_run_id"], runs, _started(context), results_url())
    return [{**r, "result": {**r["result"], "summary": None}} for r in reruns]


def evaluate_and_report(plan: dict, results: list[dict], reruns: list[dict], context) -> dict:
    from bench.suite.record import finish
    from scalewatch.paths import results_url

    cfg = SweepConfig.model_validate(plan["sweep"])
    runs = _runs(cfg, plan, results) + [{**r, "result": _summary(r["result"])} for r in reruns if r]
    dag_id = context["dag_run"].dag_id if context.get("dag_run") else None
    return finish(cfg, plan["suite_run_id"], runs, _started(context), results_url(), dag_id)


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


def send_alerts(plan: dict | None, outcome: dict | None, context) -> list[str]:
    from scalewatch.notifiers.message import alert_text, change_text, link_lines
    from scalewatch.notifiers.registry import send

    if plan is None:
        return []
    cfg = SweepConfig.model_validate(plan["sweep"])
    suite_run_id = plan["suite_run_id"]
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
    report_url, run_url = links(cfg, suite_run_id, context)
    sent = []
    nodes = (outcome or {}).get("slow_nodes") or []
    if failures or inconclusive:
        text = alert_text(suite_run_id, failures, report, report_url, run_url, inconclusive, nodes)
        verdict = "FAILED" if failures else "INCONCLUSIVE"
        sent += send(cfg.alerts, f"scalewatch: scaling check {verdict} ({suite_run_id})", text, context)
    if nodes and not (failures or inconclusive):  # a failing node is news in a passing week too
        text = "\n".join(
            [f"scalewatch: slow node(s) on cluster {cfg.cluster} (suite run {suite_run_id})"]
            + [f"• {line}" for line in nodes]
            + link_lines(report, report_url, run_url)
        )
        sent += send(cfg.alerts, f"scalewatch: slow node(s) on {cfg.cluster} ({suite_run_id})", text, context)
    changes = (outcome or {}).get("changes") or []
    if changes:  # sent whatever the verdict: a change point inside the tolerance is still news, once
        text = change_text(suite_run_id, changes, report, report_url, run_url)
        sent += send(
            cfg.alerts, f"scalewatch: {len(changes)} change(s) in the weekly history ({suite_run_id})", text, context
        )
    return sent
