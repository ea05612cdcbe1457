"""Benchmark section 6: DAG parse time, trigger to first step, detect/evaluate/store timings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from runner import (
    ROOT,
    Context,
    main_for,
    median,
)

NUMBER = 6
TITLE = "orchestration"


def dag_parse_s() -> float:
    code = (
        "import time, os; from airflow.dag_processing.dagbag import DagBag; "
        f"t = time.perf_counter(); b = DagBag(dag_folder={str(ROOT / 'dags' / 'scaling_regression.py')!r}); "
        "assert not b.import_errors, b.import_errors; print(time.perf_counter() - t)"
    )
    env = os.environ | {"PYTHONPATH": f"{ROOT / 'plugins'}:{ROOT}"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def trigger_to_first_step_s(home: Path) -> float:
    env = os.environ | {"SCALEWATCH_HOME": str(home), "AIRFLOW_HOME": str(home / "airflow")}
    subprocess.run(
        ["bash", "-c", "source scripts/env.sh && mkdir -p $AIRFLOW_HOME && airflow db migrate"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        check=True,
    )
    conf = json.dumps({"workloads": ["ssd"], "gpus": [1], "steps": 3, "dataset_images": 32})
    start = time.time()
    subprocess.run(
        ["bash", "-c", f"source scripts/env.sh && python scripts/run_dag_once.py '{conf}'"],
        cwd=ROOT,
        env=env,
        capture_output=True,
    )
    samples = [
        json.loads(line) for f in (home / "runs").rglob("samples-rank*.jsonl") for line in f.read_text().splitlines()
    ]
    first = min(s["t"] for s in samples if s.get("phase") == "train")
    return first - start


def history_timings(tmp: Path) -> dict:
    from bench.analysis.frame import build_frame
    from bench.analysis.history.detect import change_points
    from bench.analysis.verdict.expectations import prepare, validate
    from bench.analysis.verdict.scaling import derive
    from bench.config.models import Thresholds
    from bench.store.db import ResultsStore

    rng = np.random.default_rng(0)
    weeks = pd.date_range("2016-12-05", periods=520, freq="W-MON", tz="UTC")
    models = [f"model{i:02d}" for i in range(20)]
    scales = [4, 16, 24, 32, 64]
    rows = []
    for m in models:
        for g in scales:
            level = 100.0 * g * rng.uniform(0.8, 1.0)
            series = rng.normal(level, level * 0.02, len(weeks))
            series[300:] *= 0.9 if (models.index(m) + g) % 7 == 0 else 1.0
            rows += [
                {"timestamp": t, "model": m, "gpus": g, "throughput_img_s": v}
                for t, v in zip(weeks, series, strict=True)
            ]
    history = pd.DataFrame(rows)
    t = time.perf_counter()
    cps = change_points(history, "throughput_img_s")
    detect_s = time.perf_counter() - t
    latest = history[history["timestamp"] == weeks[-1]].rename(columns={"model": "workload"})
    frame = latest.assign(
        state="COMPLETED",
        valid=True,
        reason="",
        epoch_time_s=np.nan,
        avg_read_mb_s=np.nan,
        peak_read_mb_s=np.nan,
        gpu_util=np.nan,
        bandwidth_valid=True,
    )
    t = time.perf_counter()
    validate(prepare(derive(frame), Thresholds()), Thresholds())
    evaluate_s = time.perf_counter() - t
    store = ResultsStore(f"sqlite:///{tmp}/history.db")
    stored = build_frame(
        [
            {
                "suite_run_id": f"w{ts:%Y%m%d}",
                "workload": r.model,
                "gpus": r.gpus,
                "state": "COMPLETED",
                "valid": True,
                "throughput_img_s": r.throughput_img_s,
                "cluster": "c",
                "config_key": "k",
                "started_at": ts.isoformat(),
                "launcher": "slurm",
                "reason": "",
                "versions": "{}",
                "schema_version": 1,
                "cache_risk": False,
                "bandwidth_valid": True,
                "drop_caches": "done",
            }
            for r, ts in zip(history.itertuples(), history["timestamp"], strict=True)
        ]
    ).assign(accepted=True)
    t = time.perf_counter()
    store.upsert(stored)
    upsert_s = time.perf_counter() - t
    current = latest.rename(columns={}).assign(cluster="c", config_key="k")
    t = time.perf_counter()
    store.history_median(current.reset_index(drop=True), 8, "now")
    history_s = time.perf_counter() - t
    return {
        "series": 100,
        "weeks": 520,
        "change_points": len(cps),
        "detect_s": detect_s,
        "evaluate_s": evaluate_s,
        "store_upsert_52k_s": upsert_s,
        "history_median_100_s": history_s,
    }


def orchestration(tmp: Path, r: int, add) -> None:
    add("6 orchestr.", "DAG file parse time (DagBag, s)", f"{median(dag_parse_s, max(r, 5)):.3f}")
    add("6 orchestr.", "trigger -> first training step (dag.test, s)", f"{trigger_to_first_step_s(tmp / 'home'):.1f}")
    h = history_timings(tmp)
    add(
        "6 orchestr.",
        "detect: 100 series x 520 weeks, E-Divisive + noise rules (s)",
        f"{h['detect_s']:.2f}",
        f"({h['change_points']} change points; 14 steps planted)",
    )
    add("6 orchestr.", "evaluate: GX suite over 100 configurations (s)", f"{h['evaluate_s']:.2f}")
    add("6 orchestr.", "store: upsert 52,000 history rows (SQLite, s)", f"{h['store_upsert_52k_s']:.2f}")
    add("6 orchestr.", "store: history medians for 100 rows (s)", f"{h['history_median_100_s']:.2f}")


def run(ctx: Context) -> None:
    orchestration(ctx.tmp, ctx.repeats, ctx.add)


if __name__ == "__main__":
    sys.exit(main_for(NUMBER))
