"""The weekly service as deployed, with a one-minute cron: the scheduler of a running Airflow (its metadata on
PostgreSQL) creates the suite's run itself; the run reaches a verdict, stores its rows as `scheduled` and
alerts; a tick while it is active starts no second run (max_active_runs); a tick the scheduler missed while
it was down is followed by one run of the newest tick, not a backlog (catchup off).

One flow on the package's running Airflow (tests/airflow/conftest.py), so that its start-up is paid once:
the default pool is emptied (a real Airflow setting: no task may start) to hold the first run active across
a tick and across the scheduler's downtime, then opened again. What it guards: with `max_active_runs=2` the
tick made a second run beside the held one; with `catchup=True` the run after the restart was the backlog's
first tick (2026-01-05T00:01, the minute after the DAG's start date), not the newest.
"""

from __future__ import annotations

import contextlib
import email
import email.policy
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import yaml

from bench.suite.plan import suite_run_identity
from bench.suite_files import dag_id
from tests.airflow.conftest import wait_until
from tests.conftest import oversubscribed_ranks

pytestmark = pytest.mark.slow

SUITE = "tick"
DAG = dag_id(SUITE)
CLUSTER = "scheduled-test"  # a history of its own


def suite_text() -> str:
    """A suite whose every run fails for a cause it names (three ranks a core cannot scale): its alert
    is certain whatever else the machine runs."""
    n = oversubscribed_ranks()
    suite = {
        "description": "Fires every minute (tests/airflow/test_scheduled_run.py).",
        "schedule": "* * * * *",
        "cluster": CLUSTER,
        "workloads": ["ssd"],
        "gpus": [1, n],
        "oversubscribe": True,
        "dataset_images": 16 * n,
        "steps": 3,
        "min_scaling_efficiency": 0.9,
        # an oversubscribed scale is judged against linear (bench.analysis.verdict.scaling): its node ceiling,
        # n more ranks at once, would be measured and judge nothing
        "ceilings": False,
        "regression_tolerance": 1.0,
        "min_measure_s": 0,
        "max_step_time_spread": 100,
        "max_foreign_share": 1.0,  # the other lanes' work on the ranks' cores: not what is under test here
        "probe_seconds": 0.5,
        "confirm_causes": False,
        "slack_conn_id": "sw_slack",
        "smtp_conn_id": "sw_smtp",
        "email_to": ["weekly@example.com"],
    }
    return yaml.safe_dump(suite, sort_keys=False)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def next_tick(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0) + timedelta(minutes=1)


def runs(af) -> list[dict]:
    response = af.get(f"/api/v2/dags/{DAG}/dagRuns?order_by=run_after")
    assert response.status_code == 200, response.text
    return response.json()["dag_runs"]


def heartbeat(af) -> datetime | None:
    beat = httpx.get(f"{af.url}/api/v2/monitor/health", timeout=30).json()["scheduler"]["latest_scheduler_heartbeat"]
    return at(beat) if beat else None


def scheduler_looked_after(af, moment: datetime) -> None:
    """Until the running scheduler has heartbeat well after `moment`: its loop (which creates due runs
    every pass) has run since. Waits on the scheduler's own record, not on a fixed sleep."""
    af.wait_for(lambda: (beat := heartbeat(af)) is not None and beat > moment + timedelta(seconds=10), 180)


def wait_past(moment: datetime) -> None:
    wait_until(lambda: datetime.now(UTC) > moment + timedelta(seconds=2), 180)


def default_pool_slots(af, slots: int) -> None:
    response = httpx.patch(
        f"{af.url}/api/v2/pools/default_pool",
        params={"update_mask": "slots"},
        headers=af.headers(),
        json={"slots": slots},
        timeout=30,
    )
    assert response.status_code == 200, response.text


def test_the_scheduler_runs_the_suite_alone_alerts_stores_it_as_scheduled_and_skips_missed_ticks(
    running_airflow, receivers
):
    af = running_airflow
    webhook, smtp = receivers
    suite_file = af.suites / f"{SUITE}.yaml"
    default_pool_slots(af, 0)  # the first run is created but none of its tasks may start
    try:
        suite_file.write_text(suite_text())
        af.wait_for(lambda: af.get(f"/api/v2/dags/{DAG}").status_code == 200, 180)
        assert af.get(f"/api/v2/dags/{DAG}").json()["is_paused"] is False

        # 1. the scheduler creates the run itself, at the cron's tick
        first = af.wait_for(lambda: runs(af)[0] if runs(af) else None, 240)
        assert first["run_type"] == "scheduled", first
        created = at(first["run_after"])

        # 2. a tick while that run is active (held: no task may start) starts no second run
        overlap_tick = next_tick(max(created, datetime.now(UTC)))
        wait_past(overlap_tick)
        scheduler_looked_after(af, overlap_tick)
        assert [r["dag_run_id"] for r in runs(af)] == [first["dag_run_id"]]
        assert runs(af)[0]["state"] in ("queued", "running")

        # 3. the scheduler is down across a tick; the first run goes on once it is back
        af.stop_component("scheduler")
        missed_tick = next_tick(datetime.now(UTC))
        default_pool_slots(af, 128)
        wait_past(missed_tick)
        af.start_component("scheduler", "scheduler")
        restarted = datetime.now(UTC)
        assert af.wait_for(lambda: runs(af)[0]["state"] if runs(af)[0]["state"] in ("success", "failed") else None, 600)

        # the verdict, its alert and its rows, stored as a scheduled run's
        assert runs(af)[0]["state"] == "failed"  # a failing scale fails the run
        suite_run = suite_run_identity(DAG, first["dag_run_id"])
        texts = [p["json"]["text"] for p in webhook.posts if suite_run in p["json"].get("text", "")]
        assert texts and any(f"ssd @ {oversubscribed_ranks()} GPUs: scaling_efficiency" in t for t in texts), texts
        mails = [email.message_from_string(m["data"], policy=email.policy.default) for m in smtp.messages]
        assert any("weekly@example.com" in m["To"] and suite_run in str(m["Subject"]) for m in mails), mails
        from bench.store.db import ResultsStore

        rows = ResultsStore(f"sqlite:///{af.home}/sw/results.db").frame()
        mine = rows[(rows["dag_id"] == DAG) & (rows["suite_run_id"] == suite_run)]
        assert sorted(mine["gpus"]) == [1, oversubscribed_ranks()]
        assert set(mine["run_type"]) == {"scheduled"} and "fail" in set(mine["verdict"]), mine[["verdict"]]
        page = af.get(f"/scalewatch/reports/history?cluster={CLUSTER}&workload=ssd")
        assert page.status_code == 200 and 'class="run-type">scheduled<' in page.text, page.text[-3000:]

        # 4. one run follows, of the newest tick: the ticks missed are not run as a backlog
        second = af.wait_for(lambda: runs(af)[1] if len(runs(af)) > 1 else None, 240)
        assert second["run_type"] == "scheduled"
        assert at(second["run_after"]) >= restarted.replace(second=0, microsecond=0) > created + timedelta(minutes=1)
        assert at(second["run_after"]) > missed_tick - timedelta(minutes=1)
        # never two at once: the second starts only after the first ended (waited for, so it is checked)
        ended = at(runs(af)[0]["end_date"])
        started = af.wait_for(lambda: runs(af)[1]["start_date"], 120)
        assert at(started) >= ended, (started, ended)
    finally:
        with contextlib.suppress(Exception):
            httpx.patch(
                f"{af.url}/api/v2/dags/{DAG}", headers=af.headers(), json={"is_paused": True}, timeout=30
            ).raise_for_status()
            for run in runs(af):
                if run["state"] not in ("success", "failed"):
                    httpx.patch(
                        f"{af.url}/api/v2/dags/{DAG}/dagRuns/{run['dag_run_id']}",
                        headers=af.headers(),
                        json={"state": "failed"},
                        timeout=30,
                    )
        suite_file.unlink(missing_ok=True)
        default_pool_slots(af, 128)
        if "scheduler" not in af.procs:
            af.start_component("scheduler", "scheduler")
