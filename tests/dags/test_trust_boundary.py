"""The trust boundary (issue 48): a run's conf never names a file the worker reads or a way a command starts.

The reproduced attack: an annotation's note holding a line break and an OpenSSH `Match exec` line is stored
in the default SQLite store; a conf then points `ssh_config` at the store's file. OpenSSH runs `Match exec`
while it reads a config and reads on past lines it cannot parse, so the store's file ran the note's command
on the worker as soon as the launcher's first ssh read it. Now the conf is refused before any task runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from bench.config.models import SETTING_FIELDS
from bench.config.trust import DEPLOYMENT_SETTINGS
from bench.config.types import BUILTIN_WORKLOADS
from bench.errors import ConfigError
from bench.store.db import ResultsStore
from tests.dags.test_scaling_regression import load_dag

pytestmark = pytest.mark.usefixtures("airflow_home")


@pytest.fixture(scope="module")
def embedded_dag(airflow_home):
    """The embedded default's DAG, parsed once for the tests that only read its form."""
    return load_dag(airflow_home)


def plant_note(store_file: Path, marker: Path) -> None:
    """The attack's note, stored as a note with line breaks was before this change (the store keeps what
    earlier versions accepted)."""
    ResultsStore(f"sqlite:///{store_file}").add_annotation(
        {
            "cluster": "local",
            "workload": "ssd",
            "gpus": 2,
            "config_key": "abc",
            "metric": "throughput_img_s",
            "changed_at": "2026-01-05T03:00:00+00:00",
            "kind": "explained",
            "note": f'new firmware\nMatch exec "id > {marker}"\n',
            "author": "viewer",
            "dag_id": "scaling_regression",
        }
    )


def attack_conf(store_file: Path) -> dict:
    return {"launcher": "ssh", "hosts": ["node1:2"], "ssh_config": str(store_file), "workloads": ["ssd"]}


def test_the_reproduced_attack_is_refused_and_runs_nothing(airflow_home, tmp_path):
    from airflow.sdk.definitions.param import ParamValidationError

    store_file = airflow_home / "sw" / "results.db"
    store_file.parent.mkdir(parents=True, exist_ok=True)
    marker = tmp_path / "ran"
    plant_note(store_file, marker)
    dag = load_dag(airflow_home)
    before = ResultsStore(f"sqlite:///{store_file}").suite_runs()
    # the REST API, the form and dag.test validate a conf against the form before a run exists; the check
    # stops at the conf's first deployment-only setting, the form's first field of the three (issue 61:
    # launcher and hosts are the deployment's too)
    with pytest.raises(ParamValidationError, match="param launcher") as refused:
        dag.test(run_conf=attack_conf(store_file))
    assert "set_only_in" in str(refused.value) and "suite file" in str(refused.value)
    assert not marker.exists(), marker.read_text()
    after = ResultsStore(f"sqlite:///{store_file}").suite_runs()
    assert len(after) == len(before)  # nothing stored for the refused run


def test_validate_config_refuses_the_conf_naming_the_setting_and_where_it_is_set(airflow_home, tmp_path):
    """What reaches validate_config another way (a conf not checked against the form) meets the same rule,
    before any of the conf is validated or any file looked at."""
    from scalewatch.params import form_values, settings_from_params

    dag = load_dag(airflow_home)
    with pytest.raises(ConfigError) as refused:
        settings_from_params(form_values(dag), attack_conf(tmp_path / "results.db"))
    message = str(refused.value)
    assert message.startswith("conf: launcher: set only in a suite file") and "the deployment" in message
    assert "; hosts: set only in a suite file" in message and "; ssh_config: set only in a suite file" in message


@pytest.mark.parametrize(
    "setting,value",
    [
        ("dataset_path", "/etc"),
        ("stage_from", "/root"),
        ("conn_id", "another_cluster"),
        ("ssh_config", "/x"),
        # issue 61: where and how commands start, and whose history the report reads
        ("launcher", "ssh"),
        ("hosts", ["node1:2"]),
        ("rendezvous_interface", "eth1"),
        ("cluster", "another-cluster"),
        # and who is told: a conf neither points the alert elsewhere nor silences it
        ("slack_conn_id", "my_webhook"),
        ("smtp_conn_id", "my_relay"),
        ("email_to", ["someone@example.com"]),
    ],
)
def test_every_deployment_only_setting_is_refused_in_a_conf(embedded_dag, setting, value):
    from scalewatch.params import form_values, settings_from_params

    form = form_values(embedded_dag)
    with pytest.raises(ConfigError, match=f"conf: {setting}: set only in a suite file"):
        settings_from_params(form, {setting: value})
    with pytest.raises(jsonschema.ValidationError, match="is not one of"):
        jsonschema.validate(value, embedded_dag.params.get_param(setting).schema)


def test_the_form_sends_the_suites_own_values_and_they_pass(airflow_home):
    """The UI form sends every field: a deployment-only one with the suite's value is not set by the run."""
    from scalewatch.params import form_values, settings_from_params

    dag = load_dag(airflow_home)
    form = form_values(dag)
    settings = settings_from_params(form, dict(form) | {"steps": 3})
    assert settings.training.steps == 3 and str(settings.data.dataset_path) == form["dataset_path"]
    for name in DEPLOYMENT_SETTINGS:
        schema = dag.params.get_param(name).schema
        assert schema["enum"] == [form[name]], name  # the form shows the suite's value, read-only
        jsonschema.validate(form[name], schema)


def test_a_workload_file_is_refused_in_a_conf_unless_the_suite_lists_it(airflow_home, tmp_path):
    from scalewatch.params import params, settings_from_params

    suite_file = tmp_path / "mine.yaml"
    suite_file.write_text((Path(__file__).parents[2] / "bench/workloads/builtin/retinanet-b200.yaml").read_text())
    other = tmp_path / "other.yaml"
    other.write_text("not: read\n")
    form = {name: p.value for name, p in params({"workloads": ["ssd", str(suite_file)]}).items()}
    schema = params({"workloads": ["ssd", str(suite_file)]})["workloads"].schema
    # the suite's own file and the built-ins: allowed
    assert settings_from_params(form, {"workloads": [str(suite_file), BUILTIN_WORKLOADS[0]]}).training.workloads
    jsonschema.validate([str(suite_file), "ssd"], schema)
    with pytest.raises(ConfigError, match=r"workloads: workload files \('.*other.yaml'\) are named only in a suite"):
        settings_from_params(form, {"workloads": [str(other)]})
    with pytest.raises(jsonschema.ValidationError, match="does not match"):
        jsonschema.validate([str(other)], schema)
    # nothing was learned about the file: refused before its existence or content was looked at
    named_only = r"workloads: workload files \('/nonexistent/x.yaml'\) are named only in"
    with pytest.raises(ConfigError, match=named_only) as refused:
        settings_from_params(form, {"workloads": ["/nonexistent/x.yaml"]})
    assert "does not exist" not in str(refused.value)


def test_run_once_refuses_the_conf_before_anything_runs(airflow_home, tmp_path):
    import subprocess
    import sys

    from tests.dags.conftest import ROOT, airflow_env

    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "run_dag_once.py"), json.dumps(attack_conf(tmp_path / "x.db"))],
        env=__import__("os").environ | airflow_env(airflow_home),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "invalid conf: conf: launcher: set only in a suite file" in done.stderr
    assert "; ssh_config: set only in a suite file" in done.stderr


def test_the_settings_model_says_who_sets_each_setting():
    """One table, in the model: every field has its place, and the file- and command-naming ones are the
    deployment's."""
    places = {name: (f.json_schema_extra or {}).get("set_by") for name, f in SETTING_FIELDS.items()}
    assert set(places.values()) == {"run", "deployment"}
    assert {"ssh_config", "dataset_path", "stage_from", "conn_id"} <= set(DEPLOYMENT_SETTINGS)
    steering = {"launcher", "hosts", "rendezvous_interface", "cluster", "slack_conn_id", "smtp_conn_id", "email_to"}
    assert steering <= set(DEPLOYMENT_SETTINGS)  # issue 61


def test_validate_config_reads_the_suites_values_from_the_running_dag(airflow_home, capfd):
    """In a real task, validate_config takes the suite's values from the DAG (form_values) before the conf's
    own rules: an unknown key still fails there with its own message, nothing after it runs."""
    run = load_dag(airflow_home).test(run_conf={"gpu": [1, 2]})
    states = {ti.task_id: ti.state for ti in run.get_task_instances() if ti.map_index < 1}
    assert states["validate_config"] == "failed" and states.get("stage_dataset") != "success", states
    seen = capfd.readouterr()
    assert "unknown setting 'gpu'; did you mean 'gpus'?" in seen.out + seen.err
