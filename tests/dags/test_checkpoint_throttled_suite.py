"""A suite with `checkpoint` set, through the DAG (dag.test()), its store's writes held by a real cgroup-v1
blkio write throttle (issue 51: checkpoints in a suite had never run under a throttle, nor through the DAG).

Both scales write through the same limit T: 1 rank's 16 MiB and 2 ranks' 32 MiB each leave at T, so the
2-rank scale writes T / 2 a GPU against the 1-rank T, an efficiency of ~0.5, under the default bound: the
checkpoint write efficiency fails, the alert names it, and each scale's write figure is T within 10%."""

from __future__ import annotations

import html
import os

import pandas as pd
import pytest

from bench.config.models import SuiteSettings
from bench.suite.plan import suite_dir, suite_run_identity
from tests.infra.faults import blkio_throttle, store_device
from tests.infra.receivers import SmtpReceiver, WebhookReceiver, alert_connections
from tests.infra.suite_files import ALERTED, SMALL_SCALES, suite_dag

pytestmark = [pytest.mark.rates, pytest.mark.slow]

SUITE_NAME = "checkpoint_throttled"
TOKEN = "services/T0/B0/checkpointtoken"
RATE = 8_000_000  # bytes/s of writes to the store, whichever rank writes them
WRITE_EFFICIENCY = "ExpectCheckpointWriteEfficiencyAtLeastBound"


def test_a_throttled_stores_checkpoint_writes_fail_the_efficiency_and_alert_at_the_throttles_figure(
    airflow_home, tmp_path, monkeypatch
):
    bound = SuiteSettings().bounds.min_checkpoint_efficiency
    assert bound > 0.6  # ~0.5 fails it
    with (
        store_device(tmp_path / "store.img", tmp_path / "store", 256) as store,
        WebhookReceiver() as webhook,
        SmtpReceiver() as smtp,
    ):
        for name, value in alert_connections(webhook.port, smtp.port, TOKEN).items():
            monkeypatch.setenv(name, value)
        settings = {"description": "Checkpoints on a store whose writes are held.", "schedule": None}
        settings |= SMALL_SCALES | {"dataset_path": str(store / "data"), "probe_storage": False, "dataset_images": 48}
        settings |= {"checkpoint": {"bytes_per_rank": "16MiB", "writes": 1, "reads": 1}}
        dag = suite_dag(tmp_path, monkeypatch, SUITE_NAME, settings | ALERTED)
        # this process and the ranks it starts write to the store at the throttle (its device only)
        with blkio_throttle(store, RATE, "write", pids=[os.getpid()]):
            run = dag.test()
    states = {ti.task_id: ti.state for ti in run.get_task_instances() if ti.map_index < 1}
    assert run.state == "failed" and states["evaluate"] == "success" and states["alert"] == "success", states
    out = suite_dir(airflow_home / "sw" / "runs", suite_run_identity(dag.dag_id, run.run_id))
    frame = pd.read_csv(out / "results.csv").set_index("gpus")
    assert sorted(frame.index) == [1, 2] and set(frame["state"]) == {"COMPLETED"}, frame
    for gpus in (1, 2):  # the figure: what the throttle allows, at each scale
        assert frame.loc[gpus, "ckpt_write_mb_s"] == pytest.approx(RATE / 1e6, rel=0.10), frame.loc[gpus].to_dict()
    assert frame.loc[2, "ckpt_write_efficiency"] == pytest.approx(0.5, abs=0.1), frame.loc[2].to_dict()
    assert frame.loc[2, "verdict"] == "fail", frame.loc[2].to_dict()
    assert len(webhook.posts) == 1 and len(smtp.messages) == 1, (webhook.posts, smtp.messages)
    for text in (html.unescape(webhook.posts[0]["json"]["text"]), smtp.messages[0]["text"]):  # as people read them
        assert "ssd @ 2 GPUs: ckpt_write_efficiency" in text and WRITE_EFFICIENCY in text, text
        assert f"bound {bound}" in text, text
