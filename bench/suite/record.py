"""Recording a judged suite run: results CSV, the store, change points, then the report, written once
with everything it shows (the change points need the store to hold this run first)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pandas as pd

from bench.config import SweepConfig
from bench.suite.plan import read_probe, suite_dir

if TYPE_CHECKING:
    from bench.analysis.verdict.evaluate import Evaluation
    from bench.store.db import ResultsStore


def finish(
    cfg: SweepConfig, suite_run_id: str, runs: list[dict], started: str, store_url: str, dag_id: str | None = None
) -> dict:
    """Judge the suite run, then record it: once for `bench sweep` and the DAG's evaluate task alike."""
    from bench.analysis.verdict.evaluate import evaluate
    from bench.store.db import ResultsStore

    store = ResultsStore(store_url)
    out = suite_dir(cfg.output_dir, suite_run_id)
    ev = evaluate(cfg, suite_run_id, runs, started, store, out / "data-docs", read_probe(out))
    return record(cfg, suite_run_id, ev, runs, started, store, dag_id)


def record(
    cfg: SweepConfig,
    suite_run_id: str,
    ev: Evaluation,
    runs: list[dict],
    started: str,
    store: ResultsStore,
    dag_id: str | None = None,
) -> dict:
    """results.csv and suite.json -> the store -> change points -> the report (written once); the outcome."""
    from bench.report.html import write_report

    out = suite_dir(cfg.output_dir, suite_run_id)
    ev.frame.to_csv(out / "results.csv", index=False)
    # Which DAG's read permission guards this run's web pages (none for a run made outside Airflow).
    (out / "suite.json").write_text(
        json.dumps({"dag_id": dag_id, "run_id": suite_run_id, "verdict": ev.verdict, "started_at": started})
    )
    # The history the report draws is the one this run was judged against: read before the run is stored.
    history, probes = store.frame(), store.probes(cfg.cluster)
    report = out / "report.html"
    suite = {
        "suite_run_id": suite_run_id,
        "started_at": started,
        "cluster": cfg.cluster,
        "passed": ev.passed,
        "report_path": str(report),
        "config": cfg.model_dump_json(),
        "dag_id": dag_id,
    }
    store.upsert(ev.frame, suite)
    if ev.probe is not None:
        store.upsert_probe(
            {k: ev.probe[k] for k in ("ceiling_mb_s", "conclusive", "reason", "method", "block_size", "sample_bytes")}
            | {
                "suite_run_id": suite_run_id,
                "cluster": cfg.cluster,
                "probed_at": ev.probe["probed_at"],
                "paths": ev.probe["paths"],
                "levels": ev.probe["levels"],
                "accepted": ev.probe["accepted"],
            }
        )
    fingerprint = run_environment(runs)
    if fingerprint:
        store.upsert_environment(dag_id, suite_run_id, fingerprint)
    changes = watch_changes(store, ev.frame, suite_run_id)  # needs this run and its environment stored
    runs = [r for r in runs if not r.get("variant")]  # the reruns are figures on their scale's row
    write_report(report, suite_run_id, ev, runs, history, cfg, probes, changes)
    nodes = slow_node_lines(store, cfg.cluster)
    return {
        "passed": ev.passed,
        "verdict": ev.verdict,
        "inconclusive": ev.inconclusive,
        "failures": ev.failures,
        "warnings": ev.warnings,
        "report": str(report),
        "data_docs": ev.data_docs,
        "results_csv": str(out / "results.csv"),
        "changes": changes,
        "slow_nodes": nodes,
    }


def slow_node_lines(store, cluster: str) -> list[str]:
    """Nodes of this cluster slowest in several of its recent multi-node runs (this one included)."""
    from bench.analysis.history.node_health import slow_nodes

    frame = store.frame()
    return [n["line"] for n in slow_nodes(frame[frame["cluster"] == cluster])]


def watch_changes(store, frame: pd.DataFrame, suite_run_id: str) -> list[dict]:
    """Change points this run confirmed in each of its series' history (from the series' newest annotated
    change on), stored once; the notices to send, each with what differs in the environment across it."""
    from bench.analysis.history.annotations import baseline_since, rebaselined
    from bench.analysis.history.changes import WATCHED, series_keys, watch_series

    known = store.change_alerts()
    notes = store.annotations()
    notices = []
    for cluster, workload, gpus, config_key in series_keys(frame):
        since = baseline_since(notes, cluster, workload, gpus, config_key)
        series = rebaselined(store.accepted_series(cluster, workload, gpus, config_key), since)
        for metric in WATCHED:
            mine = known[
                (known["cluster"] == cluster)
                & (known["workload"] == workload)
                & (known["gpus"] == gpus)
                & (known["config_key"] == config_key)
                & (known["metric"] == metric)
            ]
            rows, found = watch_series(series, metric, mine, suite_run_id)
            for row in rows:
                store.upsert_change(row)
            for n in found:
                notice = {"kind": n.kind, "line": n.line(), **n.row}
                changed = environment_change(store, series, n.row) if n.kind == "change" else ""
                if changed:
                    notice |= {"environment_change": changed, "line": f"{notice['line']}; what changed: {changed}"}
                # plain Python values: the outcome travels as an XCom (numpy integers do not serialise)
                notices.append(json.loads(json.dumps(notice, default=lambda v: v.item())))
    return notices


def environment_change(store, series: pd.DataFrame, row: dict) -> str:
    """What differs in the environment between the last run before a change point and the run it happened in
    ("nccl 2.21.5 -> 2.23.4 from the run of 2026-11-16"); empty when nothing recorded differs."""
    from bench.env.fingerprint import across_change, describe, run_before

    ids = series["suite_run_id"].astype(str).tolist()
    after = str(row.get("changed_in") or "")
    before = run_before(ids, after)
    envs = store.environments([before, after]) if before else {}
    return describe(across_change(ids, after, envs), str(row.get("changed_at", ""))[:10])


def run_environment(runs: list[dict]) -> dict[str, str]:
    """The suite run's fingerprint from every scale's nodes (a node seen at several scales once)."""
    from bench.env.fingerprint import run_fingerprint

    nodes: dict[str, dict] = {}
    for r in runs:
        summary = (r.get("result") or {}).get("summary") or {}
        for node in summary.get("environment") or []:
            nodes.setdefault(str(node.get("host")), node)
    return run_fingerprint(nodes.values()) if nodes else {}
