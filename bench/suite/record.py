"""Recording a judged suite run: results CSV, the store, change points, then the report, written once
with everything it shows (the change points need the store to hold this run first).

A run's rows and its files are there together or not at all. Its rows, probe, environment and change
points are stored in one transaction; inside it the report, suite.json and results.csv are written
under temporary names and then swapped in (the previous attempt's files kept aside), and only then is
the transaction committed. Anything that fails before the commit (the report cannot be drawn, a file
cannot be written, the commit itself) rolls the rows back and puts the previous files back. Only a
process killed in the instant between the swap and the commit leaves new files over old rows, and
recording the run again repairs it: the rows are keyed (a rerun overwrites, never duplicates), and
the change notices are read back from the store (`changes.run_notices`), so a rerun lists the same
ones and the alert task sends each only where it is still missing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from bench.analysis.frame import to_spreadsheet_csv
from bench.analysis.verdict.interference import settled
from bench.config.models import SweepConfig
from bench.env.fingerprint import storage_under_test
from bench.safe_fs import write_file
from bench.suite.plan import read_probe, suite_dir

if TYPE_CHECKING:
    from bench.analysis.verdict.evaluate import Evaluation
    from bench.store.db import ResultsStore

# The files of a recorded run, swapped in this order: suite.json last (the web pages serve a run folder
# only through it).
RUN_FILES = ("results.csv", "report.html", "suite.json")
STAGED, PREVIOUS = ".{}.staged", ".{}.previous"  # names the web pages never serve (check_path)


def finish(
    cfg: SweepConfig,
    suite_run_id: str,
    runs: list[dict],
    started: str,
    store_url: str,
    dag_id: str | None = None,
    run_type: str | None = None,
) -> dict:
    """Judge the suite run, then record it: once for `bench sweep` and the DAG's evaluate task alike.
    `run_type`: Airflow's (scheduled, manual, ...); None (`bench sweep`) is stored as manual."""
    from bench.analysis.verdict.evaluate import evaluate
    from bench.store.db import ResultsStore

    store = ResultsStore(store_url)
    out = suite_dir(cfg.output_dir, suite_run_id)
    ev = evaluate(cfg, suite_run_id, runs, started, store, out / "data-docs", read_probe(out))
    return record(cfg, suite_run_id, ev, runs, started, store, dag_id, run_type)


class RunFiles:
    """A run folder's files replaced as a set: staged under temporary names, swapped in with the old ones
    kept aside, then either kept (`settle`) or taken back (`restore`)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.swapped: list[tuple[str, bool]] = []  # (name, whether an old file was kept aside)

    def staged(self, name: str) -> Path:
        return self.folder / STAGED.format(name)

    def swap_in(self) -> None:
        for name in RUN_FILES:
            target, previous = self.folder / name, self.folder / PREVIOUS.format(name)
            had = target.is_file()
            if had:
                os.replace(target, previous)
            self.swapped.append((name, had))
            os.replace(self.staged(name), target)

    def settle(self) -> None:
        """The store committed: the old files go."""
        for name, had in self.swapped:
            if had:
                with contextlib.suppress(FileNotFoundError):
                    (self.folder / PREVIOUS.format(name)).unlink()

    def restore(self) -> None:
        """Nothing was committed: the previous files come back, the staged ones go."""
        for name, had in reversed(self.swapped):
            target = self.folder / name
            if had:
                os.replace(self.folder / PREVIOUS.format(name), target)
            else:
                with contextlib.suppress(FileNotFoundError):
                    target.unlink()
        for name in RUN_FILES:
            with contextlib.suppress(FileNotFoundError):
                self.staged(name).unlink()


def record(
    cfg: SweepConfig,
    suite_run_id: str,
    ev: Evaluation,
    runs: list[dict],
    started: str,
    store: ResultsStore,
    dag_id: str | None = None,
    run_type: str | None = None,
) -> dict:
    """The store (one transaction) and results.csv, suite.json and the report (swapped in before it
    commits): all of them or none; the outcome. Its `changes`: the change points and recoveries of the
    weekly history, and each expectation the series failed in its last judged run and passes now
    (bench.analysis.verdict.recovery), all sent once per alert target."""
    from bench.analysis.verdict.recovery import verdict_recoveries
    from bench.report.html import write_report

    ev = history_view(cfg, ev)
    out = suite_dir(cfg.output_dir, suite_run_id)
    out.mkdir(parents=True, exist_ok=True)
    # The history the report draws is the one this run was judged against: read before the run is stored.
    history, probes = store.frame(), store.probes(cfg.where.cluster)
    report = out / "report.html"
    storage = storage_under_test(runs, cfg.data.dataset_path)  # the report's and the alert's line
    files = RunFiles(out)
    try:
        with store.transaction():
            store_run(cfg, suite_run_id, ev, runs, started, store, dag_id, report, run_type, storage)
            watch_changes(store, ev.frame, suite_run_id)  # needs this run and its environment stored
            changes = run_changes(store, ev.frame, suite_run_id)
            # and each expectation a series failed last time and passes now: one "recovered" note each
            changes += verdict_recoveries(history, ev.frame, suite_run_id)
            # text cells quoted where a spreadsheet would run them (a host name or reason starting "=")
            write_file(files.staged("results.csv"), to_spreadsheet_csv(ev.frame))
            # Which DAG's read permission guards this run's web pages (none for a run made outside Airflow).
            write_file(
                files.staged("suite.json"),
                json.dumps(
                    {
                        "dag_id": dag_id,
                        "run_id": suite_run_id,
                        "verdict": ev.verdict,
                        "started_at": started,
                        "accelerators_at_au": ev.accelerators_at_au,
                    }
                ),
            )
            # the reruns are figures on their scale's row; a re-measured scale is shown as it was judged
            shown = [r for r in settled(runs) if not r.get("variant")]
            write_report(files.staged("report.html"), suite_run_id, ev, shown, history, cfg, probes, changes, storage)
            files.swap_in()
    except BaseException:
        files.restore()
        raise
    files.settle()
    from bench.analysis.history.interference import interference_node_lines
    from bench.analysis.verdict.evaluate import inconclusive_figures

    named = {str(h) for h in ev.frame.get("slow_node", pd.Series(dtype=object)) if h}
    named |= {str(s["host"]) for s in ((ev.probe or {}).get("slow_nodes") or [])}
    nodes = this_run_node_lines(ev) + slow_node_lines(store, cfg.where.cluster, named)
    return {
        "passed": ev.passed,
        "verdict": ev.verdict,
        "inconclusive": ev.inconclusive,
        "failures": ev.failures,
        "warnings": ev.warnings,
        "inconclusive_figures": inconclusive_figures(ev.warnings),
        "report": str(report),
        "data_docs": ev.data_docs,
        "results_csv": str(out / "results.csv"),
        "changes": changes,
        "slow_nodes": nodes,
        "interfering_nodes": interference_node_lines(store, cfg.where.cluster),
        "accelerators_at_au": ev.accelerators_at_au,
        "storage": storage,
    }


def history_view(cfg: SweepConfig, ev: Evaluation) -> Evaluation:
    """`ev` as the shared history takes it: where a run's conf judged it by bounds other than its suite's
    (cfg.conf_bounds), its verdict stands but none of its rows and not its probe are accepted, so its
    bounds never decide what every later run of the series is judged against. The one place a run's rows
    enter history: everything after this (the store, change points, the report) reads `accepted` from it."""
    if cfg.enters_history:
        return ev
    probe = None if ev.probe is None else {**ev.probe, "accepted": False}
    return dataclasses.replace(ev, frame=ev.frame.assign(accepted=False), probe=probe)


def store_run(
    cfg: SweepConfig,
    suite_run_id: str,
    ev: Evaluation,
    runs: list[dict],
    started: str,
    store: ResultsStore,
    dag_id: str | None,
    report: Path,
    run_type: str | None = None,
    storage: str | None = None,
) -> None:
    """The run's rows, its suite_runs row, its storage probe and its environment: each keyed by the run,
    so recording it again overwrites, never adds. `storage`: the storage under test as the report and the
    alert name it, kept with the environment (its field `storage`) for the overview's cluster lines."""
    suite = {
        "suite_run_id": suite_run_id,
        "started_at": started,
        "cluster": cfg.where.cluster,
        "passed": ev.passed,
        "report_path": str(report),
        "config": cfg.model_dump_json(),
        "dag_id": dag_id,
        "run_type": run_type,  # the results rows' (the store keeps it on each row, not on suite_runs)
    }
    store.upsert(ev.frame, suite)
    if ev.probe is not None:
        store.upsert_probe(
            {k: ev.probe[k] for k in ("ceiling_mb_s", "conclusive", "reason", "method", "block_size", "sample_bytes")}
            | {
                "suite_run_id": suite_run_id,
                "cluster": cfg.where.cluster,
                "probed_at": ev.probe["probed_at"],
                "paths": ev.probe["paths"],
                "levels": ev.probe["levels"],
                "accepted": ev.probe["accepted"],
            }
        )
    fingerprint = run_environment(runs)
    if fingerprint:
        store.upsert_environment(dag_id, suite_run_id, fingerprint | ({"storage": storage} if storage else {}))


def this_run_node_lines(ev: Evaluation) -> list[str]:
    """The nodes this run named (bench.analysis.verdict.nodes), marked as one run: the single-run rule
    and the across-runs history agree, so a node at a third of its peer's speed shows at once, not after
    three of five runs. One line per host: its scales and the probe's figure where the probe named it."""
    where: dict[str, list[str]] = {}
    for r in ev.frame.to_dict("records"):
        if r.get("slow_node"):
            where.setdefault(str(r["slow_node"]), []).append(f"{r['workload']} @ {int(r['gpus'])} GPUs")
    probed = {str(s["host"]): s for s in ((ev.probe or {}).get("slow_nodes") or [])}
    lines = []
    for host in dict.fromkeys([*where, *probed]):
        parts = [f"stood out at {', '.join(where[host])}"] if host in where else []
        if host in probed:
            s = probed[host]
            peers = s["peers_median_mb_s"]
            parts.append(f"read {s['mb_s']:.2f} MB/s in the storage probe, its peers' median {peers:.2f}")
        lines.append(f"{host} {'; '.join(parts)} (one run)")
    return lines


def slow_node_lines(store, cluster: str, named: set[str] | None = None) -> list[str]:
    """Nodes of this cluster slowest in several of its recent multi-node runs (this one included), or
    named by its newest run; not those this run's own lines name already (`named`)."""
    from bench.analysis.history.node_health import slow_nodes

    frame = store.frame()
    return [n["line"] for n in slow_nodes(frame[frame["cluster"] == cluster]) if n["host"] not in (named or set())]


def _series(store, cluster: str, workload: str, gpus: int, config_key: str, notes: pd.DataFrame) -> pd.DataFrame:
    """A series' accepted runs from its newest annotated change on: what its change points are found in."""
    from bench.analysis.history.annotations import baseline_since, rebaselined

    since = baseline_since(notes, cluster, workload, gpus, config_key)
    return rebaselined(store.accepted_series(cluster, workload, gpus, config_key), since)


def _known(known: pd.DataFrame, cluster: str, workload: str, gpus: int, config_key: str, metric: str) -> pd.DataFrame:
    return known[
        (known["cluster"] == cluster)
        & (known["workload"] == workload)
        & (known["gpus"] == gpus)
        & (known["config_key"] == config_key)
        & (known["metric"] == metric)
    ]


def _notice(store, series: pd.DataFrame, n) -> dict:
    """A notice as the outcome carries it: its line, and for a change what differs in the environment
    across it; plain Python values (the outcome travels as an XCom: numpy integers do not serialise)."""
    notice = {"kind": n.kind, "line": n.line(), **n.row}
    changed = environment_change(store, series, n.row) if n.kind == "change" else ""
    if changed:
        notice |= {"environment_change": changed, "line": f"{notice['line']}; what changed: {changed}"}
    plain = {k: None if isinstance(v, float) and v != v else v for k, v in notice.items()}  # NaN: a NULL column
    return json.loads(json.dumps(plain, default=lambda v: None if pd.isna(v) else v.item()))


def _series_metrics(store, frame: pd.DataFrame):
    """(series history, metric, its stored change points) for every watched metric of every series in
    `frame`; the stored change points and annotations are read once, before the first."""
    from bench.analysis.history.changes import WATCHED, series_keys

    known = store.change_alerts()
    notes = store.annotations()
    for cluster, workload, gpus, config_key in series_keys(frame):
        series = _series(store, cluster, workload, gpus, config_key, notes)
        for metric in WATCHED:
            yield series, metric, _known(known, cluster, workload, gpus, config_key, metric)


def watch_changes(store, frame: pd.DataFrame, suite_run_id: str) -> list[dict]:
    """Change points this run confirmed in each of its series' history (from the series' newest annotated
    change on), stored once (news as pending); the notices this call found new, each with what differs
    in the environment across it. `run_changes` lists a run's notices again from the store."""
    from bench.analysis.history.changes import watch_series

    notices = []
    for series, metric, mine in _series_metrics(store, frame):
        rows, found = watch_series(series, metric, mine, suite_run_id)
        for row in rows:
            store.upsert_change(row)
        notices += [_notice(store, series, n) for n in found]
    from bench.analysis.history.cluster_watch import watch_clusters

    watch_clusters(store, frame, suite_run_id)  # issue 63: after the series' own, which it folds where it covers them
    return notices


def run_changes(store, frame: pd.DataFrame, suite_run_id: str) -> list[dict]:
    """Every notice of this run, read back from the stored change points of its series: the change points
    it confirmed and the recoveries it saw, the same however often the run is recorded (`watch_changes`
    first). What the report shows and the alert task sends (each only to the targets still lacking it)."""
    from bench.analysis.history.changes import run_notices
    from bench.analysis.history.cluster_watch import cluster_notices

    notices = []
    for series, _metric, mine in _series_metrics(store, frame):
        notices += [_notice(store, series, n) for n in run_notices(mine, suite_run_id)]
    return notices + cluster_notices(store, frame, suite_run_id)  # issue 63: one per shared drop


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
    from bench.env.fingerprint import environment_nodes, run_fingerprint

    nodes: dict[str, dict] = {}
    for node in environment_nodes(runs):
        nodes.setdefault(str(node.get("host")), node)
    return run_fingerprint(nodes.values()) if nodes else {}
