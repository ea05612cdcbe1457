"""README command 1's report to a person: progress, a table, the verdict, within its line budget; as shipped
(no conf), judged PASSED on the quiet machine of the `rates` phase (issue 51)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.dags.conftest import ROOT, airflow_env

# The as-shipped run is `rates` (it asserts PASSED: benchmark section 8's 20 of 20 were on an idle box); it
# carries the report's checks too, so README command 1 runs once in the suite, not twice.
pytestmark = pytest.mark.slow

LINE_BUDGET = 60


def _run_once(home: Path) -> tuple[Path, subprocess.CompletedProcess]:
    """scripts/run-once.sh's steps after install on a fresh Airflow home: `airflow db migrate`, then the DAG."""
    env = os.environ | airflow_env(home)
    airflow = str(Path(sys.executable).with_name("airflow"))
    migrated = subprocess.run([airflow, "db", "migrate"], env=env, capture_output=True, text=True, timeout=300)
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    script = [sys.executable, str(ROOT / "scripts" / "run_dag_once.py"), "{}"]
    return home, subprocess.run(script, env=env, capture_output=True, text=True, timeout=1500)


def _results(home: Path) -> pd.DataFrame:
    frames = [pd.read_csv(csv) for csv in (home / "sw" / "runs").glob("*/results.csv")]
    return pd.concat(frames) if frames else pd.DataFrame(columns=["verdict", "inconclusive_reason"])


def _held_only_by_foreign_processes(home: Path) -> bool:
    """Every row not passed is INCONCLUSIVE for interference by a foreign process the suite named on its
    cores (issue 62: never FAILED on such a figure)."""
    held = _results(home)[lambda f: f["verdict"] != "pass"]
    reasons = held["inconclusive_reason"].fillna("").astype(str)
    return (
        not held.empty and (held["verdict"] == "inconclusive").all() and reasons.str.startswith("interference:").all()
    )


@contextlib.contextmanager
def busy_loop(core: int, name: str):
    """A noisy neighbour as a co-scheduled job or a runaway agent is: a busy loop pinned to one core,
    named `name` (its comm, as /proc shows it)."""
    code = f"import ctypes; ctypes.CDLL(None).prctl(15, {name.encode()!r}, 0, 0, 0)\nwhile True: pass"
    loop = subprocess.Popen(["taskset", "-c", str(core), sys.executable, "-c", code])
    try:
        yield loop
    finally:
        loop.kill()
        loop.wait()


@pytest.mark.rates
def test_readme_command_1_as_shipped_passes_both_workloads_on_their_figures(tmp_path):
    """README command 1 as shipped (scripts/run-once.sh with no conf: after install and `airflow db migrate`
    it runs `run_dag_once.py '{}'`, as here, on a fresh Airflow home): the embedded default, both workloads
    at every default scale, judged PASSED on a quiet machine (the `rates` phase; benchmark section 8: 20 of
    20 default sweeps passed), each row passing on figures it measured, not for want of them."""
    from bench.config.models import SuiteSettings

    home, done = _run_once(tmp_path / "airflow")
    if done.returncode == 3 and _held_only_by_foreign_processes(home):
        # the suite named another process on the ranks' cores (a machine not as quiet as the phase means
        # it to be): run again, as a person would once it is quiet; the second run is judged as the first
        home, done = _run_once(tmp_path / "airflow-again")
    lines = done.stdout.splitlines()
    assert "verdict: PASSED" in lines and done.returncode == 0, done.stdout + done.stderr[-3000:]
    default = SuiteSettings()
    (csv,) = (home / "sw" / "runs").glob("*/results.csv")
    frame = pd.read_csv(csv)
    # the DAG's embedded default (its first run here: ssd and retinanet-b200, not SuiteSettings' own list)
    workloads = sorted(set(frame["workload"]))
    scales = sorted((w, g) for w in workloads for g in default.training.gpus)
    assert len(workloads) == 2 and sorted(zip(frame["workload"], frame["gpus"], strict=True)) == scales, frame
    assert (frame["verdict"] == "pass").all() and frame["valid"].all(), frame.to_dict("records")
    scaled = frame[frame["gpus"] > frame["baseline_gpus"]]
    assert len(scaled) and (scaled["scaling_efficiency"] >= default.bounds.min_scaling_efficiency).all(), (
        scaled.to_dict("records")
    )
    # epoch 1 read from storage on every row: the bandwidth expectation judged a measured figure
    assert frame["bandwidth_valid"].all() and (frame["bytes_source"] == "cachestat").all(), frame.to_dict("records")
    assert (frame["avg_read_mb_s"] > 0).all()
    # both workloads are compute-bound here: each reads as fast as it computes, and epoch 1's read rate is
    # taken over the steps the throughput is measured on (their images/s at the epoch's mean image size),
    # so bandwidth efficiency is scaling efficiency within a few % (issue 62 item 3; in five runs here ssd at 2
    # ranks 0.983-1.013 of it, retinanet-b200 1.006-1.020: its throughput also spans epoch 2, whose
    # page-cache steps run 1.6% slower than epoch 1's cold ones on this 2-core machine, while the read rate
    # is epoch 1's; the counter's whole-epoch rate had given 0.951-0.973, the steps' own bytes 0.976-0.990)
    # CI runs on 2026-12-07 gave ssd at 2 ranks 0.965 and 0.948 (scaling efficiency 0.77 and 0.79, slow runs
    # of this box): the bound is 8%, past every run seen here. It guards a window gross enough to matter
    # (issue 62's 0.13 gap), not the whole-epoch rate's 3-5%: that the compute-bound rows are not failed on
    # bandwidth is the verdict's own check above (every row `pass`).
    ratio = scaled["bandwidth_efficiency"] / scaled["scaling_efficiency"]
    assert ((ratio - 1).abs() <= 0.08).all(), scaled[["workload", "scaling_efficiency", "bandwidth_efficiency"]]
    # what a person reads: progress, a table of passing rows with their bandwidth checked, the verdict,
    # within the line budget; Airflow's own output in the log file it names
    assert 0 < len(lines) <= LINE_BUDGET, done.stdout
    assert done.stderr.strip() == "", done.stderr[-2000:]
    for step in ("validate_config: success", "stage_dataset: success", "evaluate: success"):
        assert step in done.stdout, done.stdout
    for w, g in scales:
        assert f"train {w} @ {g} rank(s): COMPLETED" in done.stdout, done.stdout
    assert "images/s [95% CI]" in done.stdout and "efficiency [95% CI]" in done.stdout
    for w in workloads:
        rows = [line for line in lines if line.startswith(f"{w} ")]
        assert len(rows) == len(default.training.gpus), done.stdout
        assert all(" pass" in r and " fail" not in r and "(cachestat)" in r for r in rows), done.stdout
    assert "bandwidth not checked" not in done.stdout, done.stdout
    log = next(line for line in lines if line.startswith("log: ")).split(": ", 1)[1]
    assert "scaling_regression" in Path(log).read_text()  # the full Airflow logs are where it says
    report = next(line for line in lines if line.startswith("report: ")).split(": ", 1)[1]
    assert os.path.exists(report)


@pytest.mark.rates
def test_readme_command_1_beside_a_busy_loop_on_a_ranks_core_is_inconclusive_naming_it(tmp_path):
    """Issue 62's false PASS, for real: README command 1 as shipped while a busy loop holds core 1 (the
    second rank's, and the node ceiling's second copy's). Before, two ranks ran slower than one and the
    scale PASSED against a ceiling that fell with it. Now the scale is measured again after the last one,
    the loop is still there, and the run says INCONCLUSIVE (exit 3) naming the process: no row FAILED or
    PASSED on a figure measured beside it, nothing of it entered history."""
    with busy_loop(1, "sw-neighbour") as loop:
        home, done = _run_once(tmp_path / "airflow")
    assert done.returncode == 3 and "verdict: INCONCLUSIVE" in done.stdout.splitlines(), done.stdout[-3000:]
    frame = _results(home)
    two = frame[frame["gpus"] == 2]
    assert len(two) == 2 and (two["verdict"] == "inconclusive").all(), two.to_dict("records")
    for reason in two["inconclusive_reason"]:
        assert reason.startswith("interference:") and f"sw-neighbour (pid {loop.pid})" in reason, reason
    assert "fail" not in set(frame["verdict"]) and not frame["accepted"][frame["gpus"] == 2].any(), frame
    assert (frame["remeasured"][frame["gpus"] == 2]).all(), frame.to_dict("records")  # measured twice
    assert "sw-neighbour" in done.stdout, done.stdout[-3000:]  # the person reading it is told who


@pytest.mark.parametrize("conf,names", [({"gpu": [1, 2]}, ("'gpu'", "'gpus'")), ({"backnd": "ddp"}, ("'backnd'",))])
def test_run_once_refuses_a_conf_key_it_does_not_know(airflow_home, conf, names):
    """A typo or a stale key never runs the default scales as if it had been understood."""
    runs = airflow_home / "sw" / "runs"
    before = set(runs.iterdir()) if runs.exists() else set()
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "run_dag_once.py"), json.dumps(conf)],
        env=os.environ | airflow_env(airflow_home),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    last = (done.stdout + done.stderr).strip().splitlines()[-1]
    assert all(n in last for n in names), last
    assert (set(runs.iterdir()) if runs.exists() else set()) == before  # nothing staged or launched
