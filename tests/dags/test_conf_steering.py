"""What a run's conf may no longer steer (issue 61, item 6), through the DAG's own doors.

A run's conf (the trigger form, the REST API, scripts/run-once.sh) chose where and how commands start
(`launcher`, `hosts`, `rendezvous_interface`), whose history and slow-node lines the report reads
(`cluster`), who is told (`slack_conn_id`, `smtp_conn_id` set to null silenced the alert; `email_to` took
5,000 addresses) and, through its own bounds, which runs entered the history every later run of the series
is judged against. The first seven are now the deployment's (a suite file, the environment), `email_to` is
bounded wherever it is written, and a run judged by bounds of its own keeps its verdict but stays out of
the shared history.
"""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from bench.config.models import MAX_EMAIL_RECIPIENTS
from bench.errors import ConfigError
from bench.suite.plan import suite_run_identity
from tests.dags.conftest import ROOT
from tests.dags.test_scaling_regression import load_dag

pytestmark = pytest.mark.usefixtures("airflow_home")

# A value of each that differs from the embedded default's
STEERING = {
    "launcher": "ssh",
    "hosts": ["node1:2"],
    "rendezvous_interface": "eth1",
    "cluster": "another-cluster",
    "slack_conn_id": "my_webhook",
    "smtp_conn_id": "my_relay",
    "email_to": ["someone@example.com"],
}
TEAM_ALERTS = {"slack_conn_id": "team_slack", "smtp_conn_id": "team_smtp", "email_to": ["oncall@example.com"]}


@pytest.fixture(scope="module")
def embedded_dag(airflow_home):
    """The embedded default's DAG, parsed once."""
    return load_dag(airflow_home)


def dag_runs(dag_id: str) -> int:
    from airflow.models.dagrun import DagRun

    return len(DagRun.find(dag_id=dag_id))


@pytest.mark.parametrize("setting", sorted(STEERING))
def test_a_conf_that_sets_it_is_refused_naming_it_before_a_run_exists(embedded_dag, setting):
    """dag.test checks a conf against the form as the UI and the REST API do: refused there, naming the
    setting and where it is set, and no run is created (nothing staged, launched or stored)."""
    from airflow.sdk.definitions.param import ParamValidationError

    before = dag_runs(embedded_dag.dag_id)
    with pytest.raises(ParamValidationError, match=f"param {setting}: ") as refused:
        embedded_dag.test(run_conf={setting: STEERING[setting]})
    assert "set_only_in" in str(refused.value) and "suite file" in str(refused.value)
    assert dag_runs(embedded_dag.dag_id) == before


@pytest.mark.parametrize("setting", sorted(STEERING))
def test_validate_config_refuses_it_naming_it(embedded_dag, setting):
    """What reaches the first task another way meets the same rule, with the rule's own message."""
    from scalewatch.params import form_values, settings_from_params

    with pytest.raises(ConfigError, match=f"^conf: {setting}: set only in a suite file"):
        settings_from_params(form_values(embedded_dag), {setting: STEERING[setting]})


@pytest.mark.parametrize(
    "conf",
    [
        {"slack_conn_id": None},  # silenced
        {"smtp_conn_id": None},
        {"email_to": []},
        {"email_to": ["oncall@example.com", "someone@elsewhere.example"]},  # copied elsewhere
    ],
    ids=["no-slack", "no-smtp", "no-recipients", "one-more-recipient"],
)
def test_a_conf_neither_silences_nor_redirects_the_suites_alerts(conf):
    from scalewatch.params import params, settings_from_params

    form = params(TEAM_ALERTS)
    values = {name: p.value for name, p in form.items()}
    ((name, value),) = conf.items()
    with pytest.raises(ConfigError, match=f"^conf: {name}: set only in a suite file"):
        settings_from_params(values, conf)
    with pytest.raises(jsonschema.ValidationError, match="is not one of"):
        jsonschema.validate(value, form[name].schema)


def test_the_form_sends_the_suites_alert_targets_and_they_pass():
    """The UI form sends every field: the suite's own targets are no change, and they are what alerts."""
    from scalewatch.params import params, settings_from_params

    form = params(TEAM_ALERTS)
    values = {name: p.value for name, p in form.items()}
    alerts = settings_from_params(values, dict(values)).alerts
    assert alerts.model_dump(mode="json") == TEAM_ALERTS
    # a list field offers the suite's own items and nothing else to pick (the UI's multi-select)
    assert form["email_to"].schema["examples"] == TEAM_ALERTS["email_to"] and form["hosts"].schema["examples"] == []


def test_more_recipients_than_the_bound_fail_the_suite_file_naming_the_field_and_limit(tmp_path, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    from bench.suite_files import dag_id

    many = [f"oncall{i}@example.com" for i in range(MAX_EMAIL_RECIPIENTS + 1)]
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "mailing.yaml").write_text(yaml.safe_dump({"schedule": None, "email_to": many}))
    (suites / "team.yaml").write_text(yaml.safe_dump({"schedule": None, "email_to": many[:-1]}))
    monkeypatch.setenv("SCALEWATCH_SUITES", str(suites))
    bag = DagBag(dag_folder=str(ROOT / "dags"))
    errors = "\n".join(bag.import_errors.values())
    assert f"mailing.yaml: email_to: Tuple should have at most {MAX_EMAIL_RECIPIENTS} items" in errors, errors
    assert "team.yaml" not in errors
    assert bag.get_dag(dag_id("team")).params["email_to"] == many[:-1]  # at the bound: taken


def test_a_conf_that_sets_bounds_names_them_in_the_runs_config(embedded_dag, tmp_path):
    """The edge compares the run's bounds with the suite's (validated: the form's 0.7 for the suite's 0.7
    is no change), and the names travel with the plan to the task that records the run."""
    from scalewatch.params import form_values, run_config
    from scalewatch.tasks.plan import plan_sweep, sweep_config

    form = form_values(embedded_dag)
    home, out = tmp_path, tmp_path / "runs"
    assert run_config(form, dict(form), home, out).enters_history  # the form: every field, the suite's values
    assert run_config(form, {"min_scaling_efficiency": 0.7, "steps": 3}, home, out).enters_history
    looser = run_config(form, {"min_scaling_efficiency": 0.1, "regression_tolerance": 1.0}, home, out)
    assert looser.conf_bounds == ("min_scaling_efficiency", "regression_tolerance")
    again = sweep_config(json.loads(json.dumps({"sweep": plan_sweep(looser)})))
    assert again.conf_bounds == looser.conf_bounds and not again.enters_history


@pytest.mark.slow
def test_a_run_judged_by_its_confs_looser_bounds_stays_out_of_the_history(embedded_dag):
    """A real run whose conf loosens one bound: it passes, valid and on its own slots (everything history
    asks of a row), and still none of its rows and not its probe are accepted; its stored config names why."""
    from bench.store.db import ResultsStore
    from scalewatch import paths

    conf = {"workloads": ["ssd"], "gpus": [1], "steps": 3, "min_measure_s": 0, "image_size": 112}
    conf |= {"dataset_images": 16, "ceilings": False, "probe_seconds": 0.5}
    # looser than the suite's (1.0; and interference judged at 10% of a rank's cores): the row passes on a
    # shared machine too, so only the conf's bounds can keep it out
    conf |= {"max_step_time_spread": 100, "max_foreign_share": 1.0}
    run = embedded_dag.test(run_conf=conf)
    assert run.state == "success"
    identity = suite_run_identity(run.dag_id, run.run_id)
    store = ResultsStore(paths.results_url())
    rows = store.frame()
    mine = rows[rows["suite_run_id"] == identity]
    assert len(mine) == 1 and mine.iloc[0]["verdict"] == "pass" and bool(mine.iloc[0]["valid"]), mine.to_dict()
    assert not bool(mine.iloc[0]["oversubscribed"]) and not bool(mine.iloc[0]["accepted"])
    probes = store.probes()
    probe = probes[probes["suite_run_id"] == identity].iloc[0]
    assert bool(probe["conclusive"]) and not bool(probe["accepted"]), (probe["reason"], probe["accepted"])
    stored = store.suite_runs(ids=[identity]).iloc[0]
    assert json.loads(stored["config"])["conf_bounds"] == ["max_step_time_spread", "max_foreign_share"]
