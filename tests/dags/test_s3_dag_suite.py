"""A suite whose data lives in a bucket, through the user's door (issue 64 items 1, 7, 8 (a), (b)): dag.test() of
a suite file naming `dataset_path: s3://...` and `aws_conn_id`, against a real Ceph RGW: once with nothing
holding it (the run passes, the bytes cross-checked against the server's count), once with the OSD's device
held by a blkio read throttle at T = 1.2 D (D: one emulated accelerator's demand) and its writes at 16 MiB/s.

The worker has no AWS variables at all: it stages with the Airflow connection's keys, and the ranks and
the node probe get only its endpoint (their credentials are their node's own file). 1 rank is fed, 2 ranks
want 2 D and get T: the 2-rank scale fails bandwidth with cause `storage`, the probe's S3 GET ceiling is
the throttle within 10%, the bytes are counted from the GETs, each scale's checkpoints to the bucket are
written at the write limit and restored at the read limit within 10%, and the alert and the report name
the store as `S3 (endpoint, bucket)`."""

from __future__ import annotations

import html
import json
import os

import pandas as pd
import pytest

from bench.analysis.verdict.expectations import BANDWIDTH_EFFICIENCY_AT_LEAST_BOUND
from bench.store.db import ResultsStore
from bench.suite.plan import suite_dir, suite_run_identity
from tests.infra.ceph_rgw import osd_throttle
from tests.infra.receivers import SmtpReceiver, WebhookReceiver, alert_connections
from tests.infra.suite_files import ALERTED, records_workload, suite_dag

pytestmark = [pytest.mark.rates, pytest.mark.slow]

SUITE_NAME = "s3_throttled"
TOKEN = "services/T0/B0/s3token"
BATCH, RECORD, SECONDS = 4, 64 << 10, 0.05  # an accelerator reading 5.24 MB/s (D) per rank
DEMAND = BATCH * RECORD / SECONDS
THROTTLE = int(1.2 * DEMAND)  # 1 rank fed, 2 ranks held
ALLOWED = THROTTLE / (2 * DEMAND)  # the 2-rank scale's bandwidth efficiency under the throttle: 0.6
WRITE_LIMIT = 16 << 20  # the OSD's writes: every scale's checkpoints together


def _aws_connection(rgw) -> str:
    """The Amazon provider's `aws` connection, as AIRFLOW_CONN_* JSON: keys as login and password."""
    env = rgw.env()
    extra = {"endpoint_url": env["AWS_ENDPOINT_URL"], "region_name": "us-east-1"}
    doc = {"conn_type": "aws", "login": env["AWS_ACCESS_KEY_ID"], "password": env["AWS_SECRET_ACCESS_KEY"]}
    return json.dumps(doc | {"extra": extra})


def _as_the_worker(rgw, tmp_path, monkeypatch) -> None:
    """The worker has no AWS variables (the connection is its only way in); the local launcher's node is
    this machine, its credentials file in a HOME of its own."""
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    # dag.test() runs the tasks in this process: what they export for their ranks is undone after the test
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "")
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")
    monkeypatch.setenv("HOME", str(rgw.node_home(tmp_path / "node-home")))
    monkeypatch.setenv("AIRFLOW_CONN_SW_S3", _aws_connection(rgw))


def _records_suite(tmp_path, bucket: str, name: str, description: str) -> dict:
    """The suite file both runs share: one emulated workload (`name`.yaml: D per rank) in the bucket, read
    at 1 and 2 ranks through the `sw_s3` connection, epoch 1 reading 6 s or more at each scale (a rate needs
    5 s), no confirming reruns, and the ranks' cores not judged for foreign work (the RGW serving the reads
    and the other lanes' work run there; issue 62 has its own tests)."""
    workload = records_workload(
        tmp_path / f"{name}.yaml", files=1024, record_bytes=RECORD, batch=BATCH, seconds_per_batch=SECONDS
    )
    settings = {"description": description, "schedule": None}
    settings |= {"dataset_path": f"s3://{bucket}/weekly", "aws_conn_id": "sw_s3"}
    settings |= {"workloads": [str(workload)], "gpus": [1, 2]}
    settings |= {"steps": 10, "min_measure_s": 6, "warmup_steps": 2, "ceilings": False}
    return settings | {"confirm_causes": False, "confirm_regressions": False, "max_foreign_share": 1.0}


def _received(out) -> int:
    """Every byte the run's ranks' GETs received: each scale's (and any re-measure's)."""
    summaries = [json.loads(summary.read_text()) for summary in out.glob("*/metrics/summary.json")]
    assert summaries and all(summary["storage"]["bytes_source"] == "s3" for summary in summaries)
    return sum(summary["storage"]["s3_received_bytes"] for summary in summaries)


def test_a_bucket_nothing_holds_passes_through_the_dag_and_the_server_counts_the_same_bytes(
    airflow_home, rgw, bucket, tmp_path, monkeypatch
):
    """Item 8 (a): the same suite file with no throttle on the OSD: the run succeeds, both scales pass
    reading over S3, no alert is sent, and every byte the ranks' GETs received is what the server says it
    sent for GETs (RGW's usage log; the manifests the ranks read besides: within 2%)."""
    _as_the_worker(rgw, tmp_path, monkeypatch)
    with WebhookReceiver() as webhook, SmtpReceiver() as smtp:
        for name, value in alert_connections(webhook.port, smtp.port, TOKEN).items():
            monkeypatch.setenv(name, value)
        settings = _records_suite(tmp_path, bucket, "fed", "Records in a bucket nothing holds.")
        # no probe: the server's count is the ranks' alone (the probe's own: tests/bench/s3/test_s3_probe.py)
        settings |= {"probe_storage": False}
        dag = suite_dag(tmp_path, monkeypatch, "s3_fed", settings | ALERTED)
        before = rgw.usage_bytes_sent()
        run = dag.test()
    states = {ti.task_id: ti.state for ti in run.get_task_instances() if ti.map_index < 1}
    out = suite_dir(airflow_home / "sw" / "runs", suite_run_identity(dag.dag_id, run.run_id))
    frame = pd.read_csv(out / "results.csv").set_index("gpus")
    why = frame[["verdict", "inconclusive_reason", "failed_expectations"]].to_dict("index")
    assert run.state == "success" and states["evaluate"] == "success", (states, why)
    assert sorted(frame.index) == [1, 2] and set(frame["verdict"]) == {"pass"}, why
    assert (frame["bytes_source"] == "s3").all() and frame["bandwidth_valid"].all(), frame.to_dict("records")
    for gpus in (1, 2):  # each scale read what its accelerators asked for
        assert frame.loc[gpus, "avg_read_mb_s"] == pytest.approx(gpus * DEMAND / 1e6, rel=0.10), why
    assert webhook.posts == [] and smtp.messages == []
    received = _received(out)
    sent = rgw.usage_bytes_sent_settled(before + received) - before
    assert sent == pytest.approx(received, rel=0.02), (sent, received)


def test_a_bucket_held_at_the_osd_fails_bandwidth_with_cause_storage_through_the_dag(
    airflow_home, rgw, bucket, tmp_path, monkeypatch
):
    _as_the_worker(rgw, tmp_path, monkeypatch)
    with WebhookReceiver() as webhook, SmtpReceiver() as smtp:
        for name, value in alert_connections(webhook.port, smtp.port, TOKEN).items():
            monkeypatch.setenv(name, value)
        settings = _records_suite(tmp_path, bucket, "held", "Records in a bucket whose OSD is held.")
        # the probe after the scales; this suite judges bandwidth and its cause
        settings |= {"probe_storage": True, "probe_seconds": 1.0, "probe_max_jobs": 4, "min_scaling_efficiency": 0.3}
        # checkpoints to the bucket after each scale's measured steps (item 8 (c)): written at the write limit
        settings |= {"checkpoint": {"bytes_per_rank": "16MiB", "writes": 1, "reads": 1}}
        dag = suite_dag(tmp_path, monkeypatch, SUITE_NAME, settings | ALERTED)
        with osd_throttle(rgw, THROTTLE, "read"), osd_throttle(rgw, WRITE_LIMIT, "write"):
            run = dag.test()
    states = {ti.task_id: ti.state for ti in run.get_task_instances() if ti.map_index < 1}
    assert run.state == "failed" and states["evaluate"] == "success" and states["alert"] == "success", states
    assert states["stage_dataset"] == "success" and states["probe_storage"] == "success", states
    out = suite_dir(airflow_home / "sw" / "runs", suite_run_identity(dag.dag_id, run.run_id))
    frame = pd.read_csv(out / "results.csv").set_index("gpus")
    assert sorted(frame.index) == [1, 2] and set(frame["state"]) == {"COMPLETED"}, frame
    assert (frame["bytes_source"] == "s3").all() and frame["bandwidth_valid"].all(), frame.to_dict("records")
    one, two = frame.loc[1].to_dict(), frame.loc[2].to_dict()
    # 1 rank reads its demand, 2 ranks what the throttle allows; the 2-rank scale fails bandwidth on storage
    assert one["avg_read_mb_s"] == pytest.approx(DEMAND / 1e6, rel=0.10), one
    assert two["avg_read_mb_s"] == pytest.approx(THROTTLE / 1e6, rel=0.10), two
    assert two["bandwidth_efficiency"] == pytest.approx(ALLOWED, rel=0.10), two
    why = {k: (one.get(k), two.get(k)) for k in ("verdict", "inconclusive_reason", "failed_expectations")}
    assert one["verdict"] == "pass" and two["verdict"] == "fail", why
    assert BANDWIDTH_EFFICIENCY_AT_LEAST_BOUND in two["failed_expectations"], two
    assert two["bottleneck"] == "storage", two
    # checkpoints: each scale wrote its shards at the write limit and restored them at the read limit
    for gpus in (1, 2):
        row = frame.loc[gpus].to_dict()
        assert row["ckpt_write_mb_s"] == pytest.approx(WRITE_LIMIT / 1e6, rel=0.10), row
        assert row["ckpt_read_mb_s"] == pytest.approx(THROTTLE / 1e6, rel=0.10), row
    # the probe read the bucket over S3 from the node: its ceiling is the throttle
    probe = json.loads((out / "probe.json").read_text())
    assert probe["method"] == "s3 ranged GET" and probe["conclusive"], probe
    assert probe["paths"] == [f"s3://{bucket}/weekly/records-held"] and probe["extra"]["client"].startswith("boto3")
    assert probe["ceiling_mb_s"] == pytest.approx(THROTTLE / 1e6, rel=0.10), probe["levels"]
    # where people read it, the store is named by endpoint and bucket (never a key)
    named = f"S3 ({rgw.endpoint}, {bucket})"
    report = html.unescape((out / "report.html").read_text())
    assert "S3 GET ceiling" in report and "parallel GET streams" in report and "fio" not in report  # what read
    assert f"storage under test {named}" in report.replace("<b>", "").replace("</b>", ""), named
    assert len(webhook.posts) == 1 and len(smtp.messages) == 1, (webhook.posts, smtp.messages)
    secret = rgw.env()["AWS_SECRET_ACCESS_KEY"]
    for text in (html.unescape(webhook.posts[0]["json"]["text"]), smtp.messages[0]["text"]):
        assert f"storage under test: {named}" in text and "held @ 2 GPUs: bandwidth_efficiency = " in text, text
        assert "bottleneck: storage" in text and secret not in text, text
    leaked = [p for p in out.rglob("*") if p.is_file() and secret in p.read_text(errors="replace")]
    assert not leaked, leaked
    # and the overview's cluster line, from the run's kept environment (issue 64 item 7)
    from scalewatch import paths
    from scalewatch.web.overview import Scope, lines_for, page_context

    store = ResultsStore(paths.results_url())
    # (the lane's other DAG suites share this cluster and store: each distinct store is named once)
    (cluster,) = page_context(lines_for(store, Scope(store.dag_ids())), [], False)["rollup"]
    assert named in cluster["storage"].split("; "), cluster
