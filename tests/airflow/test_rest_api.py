"""Drive a real running Airflow over /api/v2: auth required, typed conf validated, runs complete."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow

SMALL = {
    "workloads": ["ssd"],
    "gpus": [1, 2],
    "steps": 3,
    "dataset_images": 32,
    "min_scaling_efficiency": 0.2,
}


def test_anonymous_access_refused(running_airflow):
    assert httpx.get(f"{running_airflow.url}/api/v2/dags", timeout=30).status_code == 401
    bad = httpx.get(f"{running_airflow.url}/api/v2/dags", headers={"Authorization": "Bearer forged"}, timeout=30)
    assert bad.status_code in (401, 403)


@pytest.mark.parametrize(
    "conf,needle",
    [
        ({"gpus": [0]}, "minimum"),
        ({"gpus": "four"}, "array"),
        ({"launcher": "kubernetes"}, "kubernetes"),
        ({"workloads": ["resnet"]}, "resnet"),
        ({"steps": -1}, "minimum"),
        ({"hosts": ["a;touch /tmp/scalewatch-pwned"]}, "pattern"),
        ({"dataset_path": "/tmp/$(touch /tmp/scalewatch-pwned)"}, "pattern"),
        ({"partition": "p`id`"}, "pattern"),
    ],
)
def test_invalid_conf_refused_with_reason(running_airflow, conf, needle):
    response = running_airflow.trigger(conf)
    assert response.status_code == 400, response.text
    assert needle in response.text
    assert not Path("/tmp/scalewatch-pwned").exists()


def test_triggered_run_succeeds_and_report_is_served(running_airflow):
    response = running_airflow.trigger(SMALL)
    assert response.status_code == 200, response.text
    run_id = response.json()["dag_run_id"]
    assert running_airflow.wait_run(run_id) == "success", running_airflow.home / "scheduler.log"
    tis = running_airflow.get(f"/api/v2/dags/scaling_regression/dagRuns/{run_id}/taskInstances").json()
    states = {(t["task_id"], t["map_index"]): t["state"] for t in tis["task_instances"]}
    assert states[("train", 0)] == states[("train", 1)] == "success"
    log = running_airflow.get(
        f"/api/v2/dags/scaling_regression/dagRuns/{run_id}/taskInstances/train/logs/1?map_index=1"
    )
    assert log.status_code == 200 and "finished COMPLETED" in log.text
    index = httpx.get(f"{running_airflow.url}/scalewatch/reports/", timeout=30)
    assert index.status_code == 200 and "report.html" in index.text
