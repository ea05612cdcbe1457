"""An emulated workload through the DAG (issue 51: until this, only `bench sweep` ran one): a suite file whose
workload emulates an accelerator reading D bytes/s, its dataset on a store of its own whose reads a real
cgroup-v1 blkio throttle holds at T = 1.4 D. dag.test() of the suite: 1 rank is fed, 2 are not, so AU
fails at 2; the alert and the report carry the AU failure and accelerators_at_au = floor(T / D) = 1."""

from __future__ import annotations

import html
import json
import math
import os
import re

import pandas as pd
import pytest

from bench.suite.plan import suite_dir, suite_run_identity
from tests.infra.faults import blkio_read_throttle, store_device
from tests.infra.receivers import SmtpReceiver, WebhookReceiver, alert_connections
from tests.infra.suite_files import ALERTED, records_workload, suite_dag

pytestmark = [pytest.mark.rates, pytest.mark.slow]

SUITE_NAME = "emulated"
TOKEN = "services/T0/B0/emulatedtoken"
# As tests/bench/workloads/test_accelerators_at_au.py: 5.24 MB/s an accelerator, held at 1.4 of it, min_au 0.8.
BATCH, RECORD, SECONDS = 4, 64 << 10, 0.05
DEMAND = BATCH * RECORD / SECONDS
THROTTLE = int(1.4 * DEMAND)
MIN_AU = 0.8


def test_an_emulated_workload_through_the_dag_alerts_and_reports_au_and_accelerators_at_au(
    airflow_home, tmp_path, monkeypatch
):
    workload = records_workload(
        tmp_path / "throttled.yaml",
        files=1536,
        record_bytes=RECORD,
        batch=BATCH,
        seconds_per_batch=SECONDS,
        min_au=MIN_AU,
    )
    with (
        store_device(tmp_path / "store.img", tmp_path / "store", 256) as store,
        WebhookReceiver() as webhook,
        SmtpReceiver() as smtp,
    ):
        for name, value in alert_connections(webhook.port, smtp.port, TOKEN).items():
            monkeypatch.setenv(name, value)
        settings = {"description": "An emulated accelerator on a throttled store.", "schedule": None}
        settings |= {"dataset_path": str(store / "data"), "workloads": [str(workload)], "gpus": [1, 2]}
        settings |= {"steps": 30, "min_measure_s": 3, "warmup_steps": 2, "ceilings": False, "probe_storage": False}
        # the suite's AU bound (the workload file's min_au sizes accelerators_at_au; the suite's judges rows)
        settings |= {"confirm_causes": False, "confirm_regressions": False, "min_au": MIN_AU}
        dag = suite_dag(tmp_path, monkeypatch, SUITE_NAME, settings | ALERTED)
        # this process and the ranks it starts read the store at the throttle (its device only)
        with blkio_read_throttle(store, THROTTLE, pids=[os.getpid()]):
            run = dag.test()
    states = {ti.task_id: ti.state for ti in run.get_task_instances() if ti.map_index < 1}
    assert run.state == "failed" and states["evaluate"] == "success" and states["alert"] == "success", states
    out = suite_dir(airflow_home / "sw" / "runs", suite_run_identity(dag.dag_id, run.run_id))
    frame = pd.read_csv(out / "results.csv").set_index("gpus")
    # the figures: 1 rank fed (AU >= min_au), 2 ranks at ~T / 2D = 0.7, within 10% of what the throttle allows
    assert frame.loc[1, "au"] >= MIN_AU and frame.loc[1, "verdict"] == "pass", frame.loc[1].to_dict()
    assert frame.loc[2, "au"] < MIN_AU and frame.loc[2, "verdict"] == "fail", frame.loc[2].to_dict()
    assert frame.loc[2, "au"] == pytest.approx(THROTTLE / (2 * DEMAND), rel=0.10), frame.loc[2].to_dict()
    expected = math.floor(THROTTLE / DEMAND)
    (measured,) = json.loads((out / "suite.json").read_text())["accelerators_at_au"]["throttled"]
    assert measured["accelerators"] == expected == 1 and measured["au_fell_at"] == 2, measured
    # the alert, to both receivers: the AU failure at 2 and the headline figure
    assert len(webhook.posts) == 1 and len(smtp.messages) == 1, (webhook.posts, smtp.messages)
    for text in (html.unescape(webhook.posts[0]["json"]["text"]), smtp.messages[0]["text"]):  # as people read them
        assert re.search(r"throttled @ 2 GPUs: au = 0\.\d+ \(bound 0\.8", text), text
        assert "throttled: accelerators_at_au = 1 custom at AU >= 0.8 (measured; AU fell under 0.8 at 2" in text, text
    # the report: the AU column and the accelerators-at-AU table with the measured count
    report = (out / "report.html").read_text()
    assert "Accelerators the storage feeds at AU" in report
    assert re.search(
        r"<td class=\"text\">throttled</td><td class=\"text\">custom</td><td>0\.8</td><td><b>1</b>", report
    )
