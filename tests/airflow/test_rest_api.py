"""Drive a real running Airflow over /api/v2: auth required, typed conf validated, runs complete (through
component restarts; what a clean run leaves, its task logs and report, is checked on the UI form's run in
test_ui.py, one run for both)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from bench.config.defaults import EMBEDDED_DEFAULT
from bench.suite.plan import suite_run_identity
from bench.suite_files import dag_id
from tests.airflow.conftest import SECRET_TOKEN, SMTP_PASSWORD, wait_until
from tests.conftest import oversubscribed_ranks

pytestmark = pytest.mark.slow

SMALL = {
    "workloads": ["ssd"],
    "gpus": [1, 2],
    "steps": 3,
    "dataset_images": 32,
    # These tests exercise the API and the pipeline, not scaling (tests/dags and tests/bench do):
    # bounds that cannot fail keep them independent of how loaded the machine is.
    "min_scaling_efficiency": 0.0,
    "regression_tolerance": 1.0,
    "min_measure_s": 0,
    "max_step_time_spread": 100,
    # nor of the other lanes' work on the ranks' cores (issue 62: over it a scale is INCONCLUSIVE, not failed)
    "max_foreign_share": 1.0,
    "probe_seconds": 0.5,  # the probe only has to run here; tests/bench/data judges its figures
}
EMBEDDED = "scaling_regression"
# The suites triggered beside the embedded default: alert targets and the launcher are a suite file's, never a
# run's conf (issue 61). Each is the embedded default's values with its own.
SUITES = {
    "rest-alerted": {"slack_conn_id": "sw_slack", "smtp_conn_id": "sw_smtp", "email_to": ["oncall@example.com"]},
    "rest-slurm": {"launcher": "slurm"},
}


@pytest.fixture(scope="module")
def suite_dags(running_airflow) -> dict[str, str]:
    """The SUITES as suite files of the running Airflow, until this module's tests are done: their DAG ids."""
    af = running_airflow
    files = [af.suites / f"{name}.yaml" for name in SUITES]
    try:
        for path, settings in zip(files, SUITES.values(), strict=True):
            path.write_text(json.dumps({"schedule": None, **EMBEDDED_DEFAULT, **settings}))  # JSON is YAML
        for name in SUITES:
            af.wait_for(lambda name=name: af.get(f"/api/v2/dags/{dag_id(name)}").status_code == 200, 180)
        yield {name: dag_id(name) for name in SUITES}
    finally:
        for path in files:
            path.unlink(missing_ok=True)


def trigger(af, dag: str, conf: dict) -> httpx.Response:
    return af.post(f"/api/v2/dags/{dag}/dagRuns", {"logical_date": None, "conf": conf})


def wait_run(af, dag: str, run_id: str, timeout: float = 400) -> str:
    def finished():
        state = af.get(f"/api/v2/dags/{dag}/dagRuns/{run_id}").json()["state"]
        return state if state in ("success", "failed") else None

    return af.wait_for(finished, timeout)


def test_anonymous_access_refused(running_airflow):
    assert httpx.get(f"{running_airflow.url}/api/v2/dags", timeout=30).status_code == 401
    bad = httpx.get(f"{running_airflow.url}/api/v2/dags", headers={"Authorization": "Bearer forged"}, timeout=30)
    assert bad.status_code in (401, 403)


@pytest.mark.parametrize(
    "conf,needle",
    [
        ({"gpus": [0]}, "minimum"),
        ({"gpus": "four"}, "array"),
        # deployment-only since issue 61: the suite's value alone
        ({"launcher": "kubernetes"}, "set_only_in"),
        ({"workloads": ["resnet"]}, "resnet"),
        ({"steps": -1}, "minimum"),
        ({"hosts": ["a;touch /tmp/scalewatch-pwned"]}, "set_only_in"),
        # deployment-only (issue 48): the form allows the suite's value alone, and says where it is set
        ({"dataset_path": "/tmp/$(touch /tmp/scalewatch-pwned)"}, "set_only_in"),
        ({"ssh_config": "/tmp/x"}, "set_only_in"),
        ({"partition": "p`id`"}, "pattern"),
    ],
)
def test_invalid_conf_refused_with_reason(running_airflow, conf, needle):
    response = running_airflow.trigger(conf)
    assert response.status_code == 400, response.text
    assert needle in response.text
    assert not Path("/tmp/scalewatch-pwned").exists()


def test_a_conf_key_the_suite_does_not_know_fails_the_first_task_naming_it(running_airflow):
    response = running_airflow.trigger(SMALL | {"gpu": [1, 2]})
    assert response.status_code == 200, response.text  # Airflow lets unknown conf keys through
    run_id = response.json()["dag_run_id"]
    assert running_airflow.wait_run(run_id) == "failed"
    path = f"/api/v2/dags/scaling_regression/dagRuns/{run_id}/taskInstances"
    states = {t["task_id"]: t["state"] for t in running_airflow.get(path).json()["task_instances"]}
    assert states["validate_config"] == "failed" and states.get("stage_dataset") != "success", states
    log = running_airflow.get(f"{path}/validate_config/logs/1")
    assert "unknown setting 'gpu'; did you mean 'gpus'?" in log.text, log.text[-2000:]
    assert not any((running_airflow.home / "sw" / "runs").glob(f"*{run_id.replace(':', '-')}*/*/state.json"))


def test_failing_run_alerts_and_secrets_stay_out_of_logs(running_airflow, receivers, suite_dags):
    webhook, smtp = receivers
    dag = suite_dags["rest-alerted"]  # its suite file names the alert targets
    n = oversubscribed_ranks()
    conf = SMALL | {
        "gpus": [1, n],
        "oversubscribe": True,  # three ranks per core: the suite must name the contention it was told to allow
        "dataset_images": 16 * n,  # every shard must hold a batch
        # 3 ranks a core reach ~0.3 of linear; 0.9 fails them even when the 1-rank baseline ran slowed by the
        # tests beside this lane (scripts/test.sh): at 0.6 such a baseline could let them pass
        "min_scaling_efficiency": 0.9,
        # an oversubscribed scale is judged against linear (bench.analysis.verdict.scaling): its node ceiling,
        # n more ranks at once, would be measured and judge nothing
        "ceilings": False,
    }
    response = trigger(running_airflow, dag, conf)
    assert response.status_code == 200, response.text
    assert wait_run(running_airflow, dag, response.json()["dag_run_id"]) == "failed"
    texts = [p["json"]["text"] for p in webhook.posts]
    assert any(f"ssd @ {n} GPUs: scaling_efficiency" in t and "oversubscribed" in t for t in texts), texts
    assert any("oncall@example.com" in m["to"] for m in smtp.messages)
    logs = [p for p in (running_airflow.home / "logs").rglob("*") if p.is_file()]
    text = "\n".join(p.read_text(errors="replace") for p in logs)
    assert "scaling check failed" in text  # the logs we search are the run's real task logs
    for secret in (SECRET_TOKEN, SMTP_PASSWORD, "SECRET"):
        assert secret not in text


def start_and_wait_deferred(running_airflow, conf: dict, dag: str = EMBEDDED) -> tuple[str, str]:
    """Trigger a run of `dag` and wait until a train task is deferred; returns (run id, its taskInstances path)."""
    response = trigger(running_airflow, dag, conf)
    assert response.status_code == 200, response.text
    run_id = response.json()["dag_run_id"]
    path = f"/api/v2/dags/{dag}/dagRuns/{run_id}/taskInstances"
    running_airflow.wait_for(
        lambda: any(
            t["task_id"] == "train" and t["state"] == "deferred"
            for t in running_airflow.get(path).json()["task_instances"]
        ),
        180,
    )
    return run_id, path


# A distinct image size per component keeps each run's history (config_key) its own.
@pytest.mark.parametrize("component,image_size", [("triggerer", 64), ("scheduler", 80)])
def test_component_restart_mid_run_resumes_and_collects_once(running_airflow, component, image_size):
    # long enough to restart the component under the deferred runs; no node ceilings: what is judged is the
    # restart (a ceiling is one more 2-rank run of 150 steps, a third of the run's CPU, judging nothing here)
    conf = SMALL | {"steps": 150, "image_size": image_size, "ceilings": False}
    run_id, path = start_and_wait_deferred(running_airflow, conf)
    running_airflow.stop_component(component)
    # the restart lands under a deferred train (else it tests a run that no longer needed the component)
    states = [t["state"] for t in running_airflow.get(path).json()["task_instances"] if t["task_id"] == "train"]
    assert "deferred" in states, states
    running_airflow.start_component(component, component)
    assert running_airflow.wait_run(run_id) == "success"
    trains = [t for t in running_airflow.get(path).json()["task_instances"] if t["task_id"] == "train"]
    # the two scales, each trained once
    assert len(trains) == 2 and all(t["try_number"] == 1 and t["state"] == "success" for t in trains)
    from bench.store.db import ResultsStore

    rows = ResultsStore(f"sqlite:///{running_airflow.home}/sw/results.db").frame()
    mine = rows[rows["suite_run_id"] == suite_run_identity("scaling_regression", run_id)]
    assert sorted(mine["gpus"]) == [1, 2]  # collected exactly once per scale


# With the triggerer up, its on_kill cancels the job, unless the mark lands before the trigger
# starts; with it down there is no trigger at all: the suite's leftover sweep must cancel the job.
@pytest.mark.parametrize("triggerer_up", [True, False], ids=["triggerer-up", "triggerer-down"])
def test_marking_a_deferred_slurm_task_failed_cancels_the_job(running_airflow, slurm, triggerer_up, suite_dags):
    dag = suite_dags["rest-slurm"]  # its suite file names the launcher
    conf = SMALL | {
        "partition": "test",
        "gpus": [2],
        "ranks_per_node": 1,
        "steps": 1_000_000,
        "image_size": 64 if triggerer_up else 96,
        "ceilings": False,  # one deferred scale to cancel; no node-ceiling run after it
    }
    if not triggerer_up:
        running_airflow.stop_component("triggerer")
    try:
        run_id, base = start_and_wait_deferred(running_airflow, conf, dag)
        job = wait_until(lambda: [line.split()[0] for line in slurm.queue() if "RUNNING" in line], 120)[0]
        patched = httpx.patch(
            f"{running_airflow.url}{base}/train/0",
            headers=running_airflow.headers(),
            json={"new_state": "failed"},
            timeout=30,
        )
        assert patched.status_code == 200, patched.text
        wait_until(lambda: not slurm.queue(), 120)
        state = slurm.run("scontrol", "show", "job", job).stdout
        assert "JobState=CANCELLED" in state
        from tests.infra.faults import any_pids, cmdline

        # nothing of the job outlives it (its rendezvous names the job's folder under this Airflow's home;
        # other tests' rendezvous servers may run beside this lane: scripts/test.sh)
        home = str(running_airflow.home).encode()
        wait_until(lambda: not [p for p in any_pids(b"bench.launch.rendezvous") if home in cmdline(p)], 30)
        assert wait_run(running_airflow, dag, run_id) == "failed"  # a cancelled scale is never a pass
        if not triggerer_up:
            sweep = running_airflow.get(f"{base}/cancel_leftover_runs/xcomEntries/return_value")
            assert sweep.status_code == 200, sweep.text
            identity = suite_run_identity(dag, run_id)
            assert sweep.json()["value"] == [f"{identity}-ssd-2".replace(":", "-").replace("+", "-")]
    finally:
        if not triggerer_up:
            running_airflow.start_component("triggerer", "triggerer")
