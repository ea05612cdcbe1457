"""A year of weekly suite runs in a real results store, as the suite would have left them.

Each week stores its rows and runs the change watch, exactly as `bench.suite.record.finish` does, so the
change points on the dashboard are the ones the weekly check really confirmed. One series drops 12%
at week 36; two weeks are not accepted (one failed, one inconclusive); every run has a report folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from bench.analysis.frame import build_frame
from bench.store.db import ResultsStore
from bench.suite.record import watch_changes

WEEKS = 52
DROP_WEEK, DROP = 36, 0.12
CONFIG_KEY = "tiny/dali/bs8/img128/amp0"
CONFIG = {"bounds": {"min_scaling_efficiency": 0.7, "regression_tolerance": 0.1, "history_runs": 8}}


def _rows(suite: str, started: str, cluster: str, thr1: float, thr2: float, accepted: bool, verdict: str):
    rows = [
        {
            "suite_run_id": suite,
            "workload": "ssd",
            "gpus": g,
            "state": "COMPLETED" if verdict != "fail" else "FAILED",
            "valid": verdict != "inconclusive",
            "throughput_img_s": thr,
            "avg_read_mb_s": thr * 0.11,
            "peak_read_mb_s": thr * 0.16,
            "cluster": cluster,
            "started_at": started,
            "launcher": "slurm",
            "reason": "",
            "versions": "{}",
            "schema_version": 4,
            "cache_risk": False,
            "bandwidth_valid": True,
            "drop_caches": "done",
            "config_key": CONFIG_KEY,
        }
        for g, thr in ((1, thr1), (2, thr2))
    ]
    frame = build_frame(rows)
    return frame.assign(
        accepted=accepted,
        passed=verdict == "pass",
        verdict=verdict,
        failed_expectations="[]",
        scaling_efficiency=[1.0, thr2 / (2 * thr1)],
        bandwidth_efficiency=np.nan,
    )


def seed_year(
    store: ResultsStore, reports_root: Path, cluster: str = "history-test", dag_id: str = "scaling_regression"
) -> pd.DataFrame:
    """Write the year; returns the stored results of this cluster."""
    rng = np.random.default_rng(52)
    start = pd.Timestamp("2025-12-01T03:00:00", tz="UTC")
    for week in range(WEEKS):
        suite = f"scheduled__{cluster}-{week:03d}"
        started = (start + pd.Timedelta(weeks=week)).isoformat()
        verdict = "fail" if week == 20 else "inconclusive" if week == 30 else "pass"
        thr1 = float(rng.normal(100.0, 1.5))
        level2 = 190.0 * (1 - DROP if week >= DROP_WEEK else 1.0)
        thr2 = float(rng.normal(level2, level2 * 0.015)) * (0.5 if week == 20 else 1.0)
        frame = _rows(suite, started, cluster, thr1, thr2, verdict == "pass", verdict)
        folder = reports_root / suite.replace(":", "-")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "report.html").write_text(
            f"<!doctype html><title>{suite}</title><h1>scalewatch suite run {suite}</h1>"
        )
        (folder / "suite.json").write_text(json.dumps({"dag_id": dag_id, "run_id": suite, "verdict": verdict}))
        store.upsert(
            frame,
            {
                "suite_run_id": suite,
                "started_at": started,
                "cluster": cluster,
                "passed": verdict == "pass",
                "report_path": str(folder / "report.html"),
                "config": json.dumps(CONFIG),
                "dag_id": dag_id,
            },
        )
        watch_changes(store, frame, suite)
    results = store.frame()
    return results[results["cluster"] == cluster]


WORKLOADS = ("ssd", "deeplabv3plus")
SCALES = (1, 2, 4, 8, 16)


def _checkpoint(rng, has: bool, last: bool) -> dict:
    """A row's checkpoint figures: none off the checkpointed scale; its latest write 40% slower."""
    if not has:
        return {"ckpt_write_mb_s": None, "ckpt_read_mb_s": None}
    write = float(rng.normal(400.0, 4.0)) * (0.6 if last else 1.0)
    return {"ckpt_write_mb_s": write, "ckpt_read_mb_s": float(rng.normal(600.0, 6.0))}


def seed_many(
    store: ResultsStore,
    clusters: int,
    weeks: int,
    configs: int = 2,
    dag_id: str = "scaling_regression",
    end: pd.Timestamp | None = None,
    prefix: str = "load",
    chunk: int = 20_000,
    drop: tuple[str, int] | None = None,
    checkpoints: bool = False,
) -> int:
    """`clusters` x 20 series (2 workloads x 5 scales x `configs` configs) x `weeks` weekly runs, written
        straight into the store's tables in large batches (the load benchmark's 1,000 series x 156 weeks
        takes a minute this way; through `upsert` and the change watch it would take hours). The last week
        ends at `end` (now). `drop`: the (workload, GPUs) whose latest run, in every config, is 30% slower (a
    regression the overview must put first). `checkpoints`: the `drop` scale's runs have checkpoint write and
    read MB/s too, its latest write 40% slower (reads steady). Returns how many results rows it wrote."""
    from bench.store.tables import results_table, suite_runs_table

    rng = np.random.default_rng(156)
    ckpt_rng = np.random.default_rng(40)  # its own draws: the throughputs stay those seeded without it
    end = end if end is not None else pd.Timestamp.now(tz="UTC").floor("D")
    rows, runs, written = [], [], 0

    def flush() -> None:
        nonlocal rows, runs, written
        with store.engine.begin() as conn:
            if runs:
                conn.execute(suite_runs_table.insert(), runs)
            if rows:
                conn.execute(results_table.insert(), rows)
        written += len(rows)
        rows, runs = [], []

    for c in range(clusters):
        cluster = f"{prefix}-{c:03d}"
        for k, week in ((k, week) for k in range(configs) for week in range(weeks)):
            started = (end - pd.Timedelta(weeks=weeks - 1 - week)).isoformat()
            suite = f"scheduled__{cluster}-cfg{k}-{week:03d}"  # one config per suite run (the store's key)
            runs.append(
                {
                    "suite_run_id": suite,
                    "started_at": started,
                    "cluster": cluster,
                    "passed": True,
                    "config": json.dumps(CONFIG),
                    "dag_id": dag_id,
                }
            )
            for w, workload in enumerate(WORKLOADS):
                base = 100.0 * (1 + w)
                for g in SCALES:
                    thr = float(rng.normal(base * g * 0.9, base * g * 0.015))
                    if drop == (workload, g) and week == weeks - 1:
                        thr *= 0.7
                    rows.append(
                        {
                            "dag_id": dag_id,
                            "suite_run_id": suite,
                            "workload": workload,
                            "gpus": g,
                            "cluster": cluster,
                            "config_key": f"cfg{k}",
                            "started_at": started,
                            "accepted": True,
                            "verdict": "pass",
                            "throughput_img_s": thr,
                            "throughput_ci_low": thr * 0.98,
                            "throughput_ci_high": thr * 1.02,
                            "scaling_efficiency": thr / (base * g),
                        }
                        | (_checkpoint(ckpt_rng, drop == (workload, g), week == weeks - 1) if checkpoints else {})
                    )
            if len(rows) >= chunk:
                flush()
    flush()
    return written


def seed_checkpoints(store: ResultsStore, cluster: str, workload: str, gpus: int) -> int:
    """Checkpoint write and read MB/s on every stored run of (cluster, workload, GPUs), in every config:
    writes about 400 MB/s, the latest 40% slower (under any floor the noise allows), reads a steady 600.
    Set on rows already seeded, so that a test can add them after a test that downgrades the store past
    the checkpoint columns (whose guard, rightly, refuses to drop stored figures). Returns the rows set."""
    import sqlalchemy as sa

    from bench.store.tables import results_table as t

    rng = np.random.default_rng(40)
    of_scale = (t.c.cluster == cluster, t.c.workload == workload, t.c.gpus == gpus)
    with store.engine.begin() as conn:
        rows = conn.execute(sa.select(t.c.suite_run_id, t.c.config_key).where(*of_scale).order_by(t.c.started_at))
        rows = rows.all()
        latest = {config: run for run, config in rows}
        for run, config in rows:
            write = float(rng.normal(400.0, 4.0)) * (0.6 if latest[config] == run else 1.0)
            figures = {"ckpt_write_mb_s": write, "ckpt_read_mb_s": float(rng.normal(600.0, 6.0))}
            conn.execute(t.update().where(*of_scale, t.c.suite_run_id == run).values(**figures))
    return len(rows)
