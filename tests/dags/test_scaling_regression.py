"""The weekly DAG: integrity, and full runs via dag.test() with real SMTP and webhook receivers."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from bench.suite.plan import suite_dir, suite_run_identity
from tests.conftest import oversubscribed_ranks
from tests.dags.conftest import ROOT, airflow_env
from tests.infra.receivers import SmtpReceiver, WebhookReceiver

TOKEN = "services/T0SECRET/B0SECRET/xyzSECRETtoken"


def load_dag(airflow_home):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    return bag.get_dag("scaling_regression")


def test_dag_integrity(airflow_home):
    dag = load_dag(airflow_home)
    assert dag.schedule == "0 3 * * 1" and dag.catchup is False
    ids = {t.task_id for t in dag.tasks}
    assert {
        "validate_config",
        "stage_dataset",
        "train",
        "cancel_leftover_runs",
        "confirm_causes",
        "cancel_leftover_reruns",
        "probe_storage",
        "evaluate",
        "alert",
        "verdict",
    } <= ids
    sweep = dag.get_task("cancel_leftover_runs")  # runs however train ended, before anything is evaluated
    assert sweep.trigger_rule == "all_done"
    assert "train" in sweep.upstream_task_ids and "confirm_causes" in sweep.downstream_task_ids
    # the differential reruns come after every scale, each swept in turn, all before fio and evaluation
    reruns = dag.get_task("confirm_causes")
    assert reruns.trigger_rule == "all_done" and "cancel_leftover_reruns" in reruns.downstream_task_ids
    assert "evaluate" in reruns.downstream_task_ids
    assert "probe_storage" in dag.get_task("cancel_leftover_reruns").downstream_task_ids
    probe = dag.get_task("probe_storage")  # never beside training; its failure never stops the evaluation
    assert probe.trigger_rule == "all_done" and "evaluate" in probe.downstream_task_ids
    assert dag.get_task("evaluate").trigger_rule == "all_done"
    assert dag.get_task("stage_dataset").outlets[0].uri.startswith("scalewatch://")
    for name, param in dag.params.items():
        schema = param.schema
        assert schema.get("title") and schema.get("section"), name
    # the launcher is the deployment's (issue 61): the form offers the suite's own, and only it
    assert dag.params.get_param("launcher").schema["enum"] == ["local"]


@pytest.mark.parametrize("dag_file", ["scaling_regression.py", "suites.py"])  # suites.py reads suites/example.yaml
def test_dag_file_parse_is_cheap(airflow_home, dag_file):
    code = (
        "import sys, runpy; runpy.run_path(sys.argv[1]); "
        "heavy = [m for m in ('torch', 'pandas', 'great_expectations', 'nvidia.dali', 'horovod') if m in sys.modules]; "
        "print(heavy)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(ROOT / "dags" / dag_file)],
        env=os.environ | airflow_env(airflow_home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def run_dag(airflow_home, conf: dict, webhook: WebhookReceiver, smtp: SmtpReceiver):
    os.environ["AIRFLOW_CONN_SW_SLACK"] = json.dumps(
        {"conn_type": "http", "host": f"http://127.0.0.1:{webhook.port}", "password": TOKEN}
    )
    os.environ["AIRFLOW_CONN_SW_SMTP"] = json.dumps(
        {
            "conn_type": "smtp",
            "host": "127.0.0.1",
            "port": smtp.port,
            "login": "alerts",
            "extra": {"allow_plaintext_login": True},  # the loopback test relay has no TLS
            "password": "smtpSECRETpw",
        }
    )
    base = {
        "workloads": ["ssd"],
        "steps": 4,
        "min_measure_s": 0,  # measurement rules are tested on their own; these runs exercise the DAG
        "max_step_time_spread": 100,
        # beside the other lanes foreign work on the ranks' cores is the rule; these runs exercise the DAG, not
        # the interference rule (issue 62: over max_foreign_share a scale is INCONCLUSIVE; tests/bench judge it)
        "max_foreign_share": 1.0,
        "dataset_images": 48,
        "probe_seconds": 0.5,  # the probe's figures are judged in tests/bench/data; here it only has to run
    }
    with alerted_suites(airflow_home):  # dag.test parses the DAG folder again: the suite must be there then too
        run = load_alerted_dag().test(run_conf=base | conf)
    return run, {ti.task_id: ti.state for ti in run.get_task_instances() if ti.map_index < 1}


ALERTED = "alerted"
ALERT_TARGETS = {"slack_conn_id": "sw_slack", "smtp_conn_id": "sw_smtp", "email_to": ["oncall@example.com"]}


@contextlib.contextmanager
def alerted_suites(airflow_home):
    """SCALEWATCH_SUITES, while it lasts, a folder holding one suite: the embedded default with alert
    targets, which a suite file sets (a run's conf may not: issue 61). Its DAG runs as the embedded one."""
    from bench.config.defaults import EMBEDDED_DEFAULT

    suites = airflow_home / "alerted-suites"
    suites.mkdir(exist_ok=True)
    suite = {"schedule": None, **EMBEDDED_DEFAULT, **ALERT_TARGETS}
    (suites / f"{ALERTED}.yaml").write_text(json.dumps(suite))  # JSON is YAML
    before = os.environ.get("SCALEWATCH_SUITES")
    os.environ["SCALEWATCH_SUITES"] = str(suites)
    try:
        yield
    finally:
        if before is None:
            del os.environ["SCALEWATCH_SUITES"]
        else:
            os.environ["SCALEWATCH_SUITES"] = before


def load_alerted_dag():
    from airflow.dag_processing.dagbag import DagBag

    from bench.suite_files import dag_id

    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    return bag.get_dag(dag_id(ALERTED))


def test_a_conf_key_the_suite_does_not_know_fails_before_anything_runs(airflow_home):
    with WebhookReceiver() as webhook, SmtpReceiver() as smtp:
        run, states = run_dag(airflow_home, {"gpus": [1, 2], "min_scaling_eficiency": 0.5}, webhook, smtp)
    assert run.state == "failed" and states["validate_config"] == "failed", states
    assert states["stage_dataset"] != "success" and states["train"] != "success", states


@pytest.mark.rates
@pytest.mark.slow
def test_clean_sweep_passes_without_alert(airflow_home):
    with WebhookReceiver() as webhook, SmtpReceiver() as smtp:
        run, states = run_dag(airflow_home, {"gpus": [1, 2], "min_scaling_efficiency": 0.25}, webhook, smtp)
    assert run.state == "success", states
    assert states["cancel_leftover_runs"] == "success"
    assert webhook.posts == [] and smtp.messages == []
    # this run's own report: other tests of this module's Airflow home write theirs beside it
    report = suite_dir(airflow_home / "sw" / "runs", suite_run_identity(run.dag_id, run.run_id)) / "report.html"
    assert "PASSED" in report.read_text()
    # The report as a user opens it: real Chromium, nothing fetched from anywhere, every chart drawn,
    # no table wider than the window.
    from tests.infra.browser import open_file

    seen = open_file(report)
    assert all(u.startswith("file://") for u in seen["requests"]), seen["requests"]
    assert seen["errors"] == [] and seen["overflow_px"] <= 0, seen
    assert seen["charts"] >= 6  # images/s, epoch time, MB/s, breakdown, timelines, probe
    # Great Expectations' Data Docs: styled from the bundled files, nothing from a CDN
    pages = [p for p in (report.parent / "data-docs").rglob("*.html") if "vendor" not in p.parts]
    assert len(pages) >= 3
    for page in pages:
        seen = open_file(page)
        assert all(u.startswith("file://") for u in seen["requests"]), (page, seen["requests"])
        assert any(u.endswith("vendor/bootstrap/bootstrap.min.css") for u in seen["requests"])


@pytest.mark.slow
def test_sweep_that_stops_scaling_alerts_with_figures(airflow_home, monkeypatch):
    # Three ranks per core cannot scale: the suite must say so, loudly. They reach ~0.3 of linear; the bound
    # 0.9 fails them even against a 1-rank baseline slowed by tests in the other lane (scripts/test.sh).
    n = oversubscribed_ranks()
    conf = {"gpus": [1, n], "oversubscribe": True, "dataset_images": 8 * n, "min_scaling_efficiency": 0.9}
    # an oversubscribed scale is judged against linear (bench.analysis.verdict.scaling): its node ceiling,
    # n more ranks at once, would be measured and judge nothing
    conf["ceilings"] = False
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example.com")
    with WebhookReceiver() as webhook, SmtpReceiver() as smtp:
        run, states = run_dag(airflow_home, conf, webhook, smtp)
    assert run.state == "failed"
    assert states["verdict"] == "failed" and states["evaluate"] == "success" and states["alert"] == "success"
    assert len(webhook.posts) == 1 and webhook.posts[0]["path"] == "/" + TOKEN
    text = webhook.posts[0]["json"]["text"]
    assert f"ssd @ {n} GPUs: scaling_efficiency" in text and "bound 0.9" in text and "report.html" in text
    assert f"oversubscribed: {n} ranks on" in text  # the contention it was told to allow is named
    assert "Report: https://airflow.example.com/scalewatch/reports/" in text  # a link a recipient can open
    from urllib.parse import quote

    assert f"Airflow run: https://airflow.example.com/dags/{run.dag_id}/runs/{quote(run.run_id)}" in text
    from bench.store.db import ResultsStore
    from scalewatch import paths

    rows = ResultsStore(paths.results_url()).frame()
    row = rows[(rows["suite_run_id"] == suite_run_identity(run.dag_id, run.run_id)) & (rows["gpus"] == n)].iloc[0]
    assert row["oversubscribed"] and not row["accepted"]
    assert len(smtp.messages) == 1 and smtp.messages[0]["to"] == ["oncall@example.com"]
    assert smtp.logins == ["alerts"]
    assert f"ssd @ {n} GPUs: scaling_efficiency" in smtp.messages[0]["data"]


@pytest.mark.slow
@pytest.mark.rates  # its reruns' efficiencies are rates: beside the other lanes the 1-rank synthetic rerun
# was slowed until the 2-rank one read 1.15 of linear (two fresh-clone runs: `synthetic` removed the drop)
def test_a_failing_scale_is_rerun_warm_and_synthetic_and_its_cause_checked(airflow_home):
    # A bound no 2-rank CPU run meets: against the linear ideal 2 ranks on these 2 cores reach ~0.85 at
    # best, never 1.5 (against the node ceiling, 1.2 could be passed once that ceiling's run is slowed by
    # the other lane). The confirm_causes task reruns both scales warm and synthetic through the launcher,
    # one at a time, and the alert line carries what the reruns showed.
    conf = {"gpus": [1, 2], "ideal": "linear", "min_scaling_efficiency": 1.5, "confirm_causes": True}
    conf["ceilings"] = False  # judged against linear: a node ceiling's run would judge nothing here
    with WebhookReceiver() as webhook, SmtpReceiver() as smtp:
        run, states = run_dag(airflow_home, conf, webhook, smtp)
    assert run.state == "failed" and states["confirm_causes"] == "success", states
    assert states["cancel_leftover_reruns"] == "success"
    out = next(d for d in (airflow_home / "sw" / "runs").iterdir() if (d / "ssd-2-warm").is_dir())
    assert {p.name for p in out.iterdir()} >= {"ssd-1-warm", "ssd-2-warm", "ssd-1-synthetic", "ssd-2-synthetic"}
    frame = pd.read_csv(out / "results.csv")
    assert len(frame) == 2  # the reruns are figures on their scale's row, never rows of their own
    two = frame[frame["gpus"] == 2].iloc[0]
    # 2 ranks on 2 cores reach ~0.85 of linear warm or synthetic: neither rerun wins back half of the
    # shortfall below 1.5 (it would need ~1.15), so neither removes the drop, and the cause is not input-side
    assert two["rerun_removed"] == "neither", two.to_dict()
    assert 0 < two["warm_efficiency"] < 1.15 and 0 < two["synthetic_efficiency"] < 1.15, two.to_dict()
    assert two["bottleneck"] not in ("storage", "input_cpu"), two.to_dict()
    check = str(two["cause_check"])
    assert check == "confirmed" or check.endswith("neither rerun removes the drop"), two.to_dict()
    text = webhook.posts[0]["json"]["text"]
    assert "ssd @ 2 GPUs: scaling_efficiency" in text and "reruns: efficiency" in text
    assert "(neither removes the drop" in text, text


@pytest.mark.slow
def test_failed_scale_is_a_failed_row_and_alerts(airflow_home):
    # 8 ranks over 24 images: each shard is smaller than a batch, so the 8-rank run fails in its ranks.
    with WebhookReceiver() as webhook, SmtpReceiver() as smtp:
        run, states = run_dag(
            airflow_home,
            # no node ceiling: what is judged is the failed scale's row and alert, not a ceiling
            {
                "gpus": [1, 8],
                "oversubscribe": True,
                "dataset_images": 24,
                "min_scaling_efficiency": 0.1,
                "ceilings": False,
            },
            webhook,
            smtp,
        )
    assert run.state == "failed" and states["verdict"] == "failed"
    assert states["cancel_leftover_runs"] == "success"  # the failed scale's job had already ended
    text = webhook.posts[0]["json"]["text"]
    assert "ssd @ 8 GPUs: state = FAILED" in text and "--batch-size 8: larger than this rank" in text
    from bench.store.db import ResultsStore
    from scalewatch import paths

    rows = ResultsStore(paths.results_url()).frame()
    row = rows[(rows["suite_run_id"] == suite_run_identity(run.dag_id, run.run_id)) & (rows["gpus"] == 8)].iloc[0]
    assert row["state"] == "FAILED" and not row["valid"] and not row["accepted"]
    assert pd.isna(row["throughput_img_s"])


@pytest.mark.slow
def test_results_password_stays_out_of_xcoms_fields_logs_rows_and_report(airflow_home, capfd, monkeypatch):
    import sqlite3

    import sqlalchemy as sa

    pg = os.environ.get("SCALEWATCH_TEST_PG_URL")
    if not pg:
        pytest.fail("needs the PostgreSQL that scripts/test.sh starts (SCALEWATCH_TEST_PG_URL)")
    # The test cluster's own password (scripts/postgres.sh makes one per cluster): the point is where it travels.
    url, secret = pg, sa.engine.make_url(pg).password
    assert secret and len(secret) >= 16, "SCALEWATCH_TEST_PG_URL carries no password (scripts/postgres.sh makes one)"
    monkeypatch.setenv("SCALEWATCH_RESULTS_URL", url)
    with WebhookReceiver() as webhook, SmtpReceiver() as smtp:
        run, states = run_dag(airflow_home, {"gpus": [1], "min_scaling_efficiency": 0.0}, webhook, smtp)
    assert run.state == "success", states
    out, err = capfd.readouterr()
    assert secret not in out + err  # task logs of dag.test go to this process's output
    metadata = sqlite3.connect(airflow_home / "airflow.db")
    dump = "\n".join(metadata.iterdump())  # XComs, rendered template fields, task logs kept in the DB
    assert "validate_config" in dump and secret not in dump
    logs = "".join(p.read_text(errors="replace") for p in (airflow_home / "logs").rglob("*") if p.is_file())
    assert secret not in logs
    store = sa.create_engine(url)
    with store.connect() as conn:
        rows = [str(r) for t in ("results", "suite_runs") for r in conn.exec_driver_sql(f"SELECT * FROM {t}")]
    assert any(run.run_id in r for r in rows) and not any(secret in r for r in rows)
    report = suite_dir(airflow_home / "sw" / "runs", suite_run_identity(run.dag_id, run.run_id))
    assert (report / "report.html").exists()
    for path in report.rglob("*"):
        if path.is_file():
            assert secret not in path.read_text(errors="replace"), path
