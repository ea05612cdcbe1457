"""Bandwidth linearity failing on measured data, through the DAG (dag.test()), and its recovery delivered
(issue 51 1(a): the bandwidth expectation had failed only on synthetic frames, and a recovery had never
reached a receiver).

A suite of one emulated workload (bench.workloads.emulate: each rank's accelerator asks for D bytes/s,
whatever the CPU does) on a store of its own. Run 1: a real cgroup-v1 blkio read throttle holds the
store at T = 1.2 D: 1 rank is fed (it reads D), 2 ranks want 2 D and get T, so the 2-rank scale's
bandwidth efficiency is T / 2 D = 0.6, under the default 0.7; the cause is `storage` and the alert
(webhook and SMTP) names bandwidth and the scale. Run 2, the throttle lifted: the scale passes and one
"recovered" note goes to each receiver. Run 3: nothing is sent. One Airflow home and one store for all
three; no confirming reruns, a small dataset and short scales keep it cheap (the duration is printed)."""

from __future__ import annotations

import html
import os
import time

import pandas as pd
import pytest
import yaml

from bench.analysis.verdict.expectations import BANDWIDTH_EFFICIENCY_AT_LEAST_BOUND
from bench.config.models import SuiteSettings
from bench.suite.plan import suite_dir, suite_run_identity
from tests.infra.faults import blkio_read_throttle, store_device
from tests.infra.receivers import SmtpReceiver, WebhookReceiver, alert_connections
from tests.infra.suite_files import ALERTED, suite_dag

pytestmark = [pytest.mark.rates, pytest.mark.slow]

SUITE_NAME = "bandwidth_throttled"
WORKLOAD = "held"
TOKEN = "services/T0/B0/bandwidthtoken"
BATCH, RECORD, SECONDS = 4, 64 << 10, 0.05  # an accelerator reading 5.24 MB/s (D) per rank
DEMAND = BATCH * RECORD / SECONDS
THROTTLE = int(1.2 * DEMAND)  # 1 rank fed, 2 ranks held: 2 D wanted, T allowed
ALLOWED = THROTTLE / (2 * DEMAND)  # the 2-rank scale's bandwidth efficiency under the throttle: 0.6


def _frame(airflow_home, dag, run) -> pd.DataFrame:
    out = suite_dir(airflow_home / "sw" / "runs", suite_run_identity(dag.dag_id, run.run_id))
    return pd.read_csv(out / "results.csv").set_index("gpus")


def _states(run) -> dict[str, str]:
    return {ti.task_id: ti.state for ti in run.get_task_instances() if ti.map_index < 1}


def _delivered(failing_run: str) -> int:
    """How many alert targets the store records as having got the recovery of the failing run's bandwidth."""
    from bench.store.db import ResultsStore
    from scalewatch import paths

    store = ResultsStore(paths.results_url())
    try:
        rows = store.frame()
        row = rows[(rows["suite_run_id"] == failing_run) & (rows["gpus"] == 2)].iloc[0]
        key = (row["cluster"], WORKLOAD, 2, row["config_key"], BANDWIDTH_EFFICIENCY_AT_LEAST_BOUND)
        key += (str(row["started_at"]), "recovered")
        return len(store.delivered([key]).get(key, set()))
    finally:
        store.engine.dispose()


def _texts(webhook: WebhookReceiver, smtp: SmtpReceiver, since: int) -> list[str]:
    """What people read of each message since the `since`-th of each receiver."""
    return [html.unescape(p["json"]["text"]) for p in webhook.posts[since:]] + [
        m["text"] for m in smtp.messages[since:]
    ]


def test_a_held_scale_fails_bandwidth_at_the_throttles_figure_and_its_recovery_is_sent_once(
    airflow_home, tmp_path, monkeypatch
):
    began = time.monotonic()
    bound = SuiteSettings().bounds.min_bandwidth_efficiency
    assert bound > ALLOWED * 1.1  # 10% above what the throttle allows still fails the default bound
    workload = tmp_path / f"{WORKLOAD}.yaml"
    workload.write_text(
        yaml.safe_dump(
            {
                "dataset": {"format": "raw", "files": 1024, "record_bytes": {"mean": RECORD}},
                "reader": {"threads": 1, "batch": BATCH, "prefetch": 4},
                "compute": {"accelerator": {"seconds_per_batch": SECONDS}},
            }
        )
    )
    with (
        store_device(tmp_path / "store.img", tmp_path / "store", 256) as store,
        WebhookReceiver() as webhook,
        SmtpReceiver() as smtp,
    ):
        for name, value in alert_connections(webhook.port, smtp.port, TOKEN).items():
            monkeypatch.setenv(name, value)
        settings = {"description": "Bandwidth on a store whose reads are held.", "schedule": None}
        settings |= {"dataset_path": str(store / "data"), "workloads": [str(workload)], "gpus": [1, 2]}
        # epoch 1 reads for 6 s or more at each scale (a rate needs 5 s); the default bandwidth bound
        settings |= {"steps": 10, "min_measure_s": 6, "warmup_steps": 2, "ceilings": False, "probe_storage": False}
        # this suite judges bandwidth: images/s follows the held reads down to ~0.6 of linear too, a scaling
        # failure other suites judge; no confirming reruns (the cause is named from the run's own figures)
        settings |= {"min_scaling_efficiency": 0.3, "confirm_causes": False, "confirm_regressions": False}
        dag = suite_dag(tmp_path, monkeypatch, SUITE_NAME, settings | ALERTED)

        # Run 1: this process and the ranks it starts read the store at the throttle (its device only).
        with blkio_read_throttle(store, THROTTLE, pids=[os.getpid()]):
            held = dag.test()
        states = _states(held)
        assert held.state == "failed" and states["evaluate"] == "success" and states["alert"] == "success", states
        frame = _frame(airflow_home, dag, held)
        assert sorted(frame.index) == [1, 2] and set(frame["state"]) == {"COMPLETED"}, frame
        assert frame["bandwidth_valid"].all(), frame["bandwidth_note"].to_dict()  # cold reads, long enough
        one, two = frame.loc[1].to_dict(), frame.loc[2].to_dict()
        # the figures: 1 rank reads its demand, 2 ranks what the throttle allows, the efficiency T / 2 D
        assert one["avg_read_mb_s"] == pytest.approx(DEMAND / 1e6, rel=0.10), one
        assert two["avg_read_mb_s"] == pytest.approx(THROTTLE / 1e6, rel=0.10), two
        assert two["bandwidth_efficiency"] == pytest.approx(ALLOWED, rel=0.10), two
        assert one["verdict"] == "pass" and two["verdict"] == "fail", (one, two)
        assert two["failed_expectations"] == f'["{BANDWIDTH_EFFICIENCY_AT_LEAST_BOUND}"]', two
        assert two["bottleneck"] == "storage", two
        assert len(webhook.posts) == 1 and len(smtp.messages) == 1, (webhook.posts, smtp.messages)
        for text in _texts(webhook, smtp, 0):  # as people read them
            assert f"{WORKLOAD} @ 2 GPUs: bandwidth_efficiency = " in text, text
            assert f"(bound {bound}; {BANDWIDTH_EFFICIENCY_AT_LEAST_BOUND})" in text, text
            assert "bottleneck: storage" in text, text

        # Run 2, the throttle lifted: the scale passes, and one "recovered" note reaches each receiver.
        freed = dag.test()
        assert freed.state == "success", _states(freed)
        two = _frame(airflow_home, dag, freed).loc[2].to_dict()
        assert two["verdict"] == "pass" and two["bandwidth_efficiency"] >= bound, two
        assert len(webhook.posts) == 2 and len(smtp.messages) == 2, (webhook.posts, smtp.messages)
        for text in _texts(webhook, smtp, 1):
            assert text.count("recovered") == 1, text
            assert f"{WORKLOAD} @ 2 GPUs, bandwidth_efficiency: recovered" in text, text
            assert f"passes {BANDWIDTH_EFFICIENCY_AT_LEAST_BOUND} again (bound {bound})" in text, text

        # Run 3: nothing new, nothing sent (the recovery was delivered once, and recorded).
        again = dag.test()
        assert again.state == "success", _states(again)
        assert len(webhook.posts) == 2 and len(smtp.messages) == 2, _texts(webhook, smtp, 2)
    # the recovery's delivery is in the store, for both targets: a rerun of run 2's alert task sends it nowhere
    assert _delivered(suite_run_identity(dag.dag_id, held.run_id)) == 2
    print(f"\nbandwidth throttled suite, three runs: {time.monotonic() - began:.0f} s")
