"""README command 1's report to a person: progress, a table, the verdict, within its line budget."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.dags.conftest import ROOT, airflow_env

# Not `rates`: load beside it only lengthens epoch 1 (its 5 s bandwidth window) and lowers its read rate
# under the probe's ceiling, so what it asserts holds on a busy machine too (scripts/test.sh's lanes).
pytestmark = pytest.mark.slow

LINE_BUDGET = 60


def test_run_once_prints_progress_a_table_and_the_verdict_within_budget(airflow_home):
    # The default's dataset, window and eviction (ssd only, for time): every bandwidth row is checked.
    conf = {"workloads": ["ssd"], "gpus": [1, 2]}
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "run_dag_once.py"), json.dumps(conf)],
        env=os.environ | airflow_env(airflow_home),
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = done.stdout.splitlines()
    assert done.returncode in (0, 1, 3), done.stdout + done.stderr[-3000:]
    assert 0 < len(lines) <= LINE_BUDGET, done.stdout
    assert done.stderr.strip() == "", done.stderr[-2000:]  # Airflow's own output went to the log file
    text = done.stdout
    for step in ("validate_config: success", "stage_dataset: success", "evaluate: success"):
        assert step in text, text
    assert "train ssd @ 1 rank(s): COMPLETED" in text and "train ssd @ 2 rank(s): COMPLETED" in text
    assert "images/s [95% CI]" in text and "efficiency [95% CI]" in text
    table = [line for line in lines if line.startswith("ssd ")]
    assert len(table) == 2 and all(("pass" in r) or ("fail" in r) or ("inconclusive" in r) for r in table)
    # Epoch 1 read from storage (evicted, dataset-only bytes, 5 s or more): a bandwidth verdict per row.
    assert all("(cachestat)" in r for r in table) and "bandwidth not checked" not in text, text
    verdict = next(line for line in lines if line.startswith("verdict: "))
    assert verdict.split(": ")[1] in ("PASSED", "FAILED", "INCONCLUSIVE")
    log = next(line for line in lines if line.startswith("log: ")).split(": ", 1)[1]
    assert "scaling_regression" in Path(log).read_text()  # the full Airflow logs are where it says
    report = next(line for line in lines if line.startswith("report: ")).split(": ", 1)[1]
    assert os.path.exists(report)


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
