"""Suites as code: each suite file becomes its own DAG with the file's defaults and schedule."""

from __future__ import annotations

import pytest

from tests.dags.conftest import ROOT

NAS = """
description: Weekly check of the NAS tier.
schedule: "0 5 * * 2"
cluster: nas-a
workloads: [ssd]
gpus: [1]
steps: 3
min_measure_s: 0
max_step_time_spread: 100
dataset_images: 24
scaling_efficiency_by_gpus: {16: 0.9, 32: 0.8, 64: 0.7}
"""
NVME = """
schedule: null
cluster: nvme-b
workloads: [deeplabv3plus]
gpus: [1]
steps: 3
min_measure_s: 0
max_step_time_spread: 100
dataset_images: 24
batch_size: 4
"""


def bag(monkeypatch, folder):
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("SCALEWATCH_SUITES", str(folder))
    return DagBag(dag_folder=str(ROOT / "dags"))


@pytest.fixture
def suites(tmp_path):
    folder = tmp_path / "suites"
    folder.mkdir()
    (folder / "nas.yaml").write_text(NAS)
    (folder / "nvme.yaml").write_text(NVME)
    return folder


def test_two_suite_files_give_two_dags_with_their_own_defaults_and_schedules(airflow_home, suites, monkeypatch):
    b = bag(monkeypatch, suites)
    assert b.import_errors == {}
    nas, nvme = b.dags["scaling_regression__nas"], b.dags["scaling_regression__nvme"]
    assert "scaling_regression" in b.dags  # the embedded default stays
    assert nas.schedule == "0 5 * * 2" and nvme.schedule is None
    assert nas.params["cluster"] == "nas-a" and nvme.params["cluster"] == "nvme-b"
    assert nas.params["workloads"] == ["ssd"] and nvme.params["workloads"] == ["deeplabv3plus"]
    assert nas.params["scaling_efficiency_by_gpus"] == {"16": 0.9, "32": 0.8, "64": 0.7}
    assert nvme.params["batch_size"] == 4 and nas.params["batch_size"] == 8  # the form's default where unset
    assert {t.task_id for t in nas.tasks} == {t.task_id for t in b.dags["scaling_regression"].tasks}
    assert "NAS tier" in nas.doc_md


@pytest.mark.parametrize(
    "text,needle",
    [
        ("gpus: [0]\n", "gpus.0: Input should be greater than or equal to 1"),
        ("launcher: kubernetes\n", "launcher: Input should be 'local', 'ssh' or 'slurm'"),
        ("batch_sise: 8\n", "unknown setting 'batch_sise'; did you mean 'batch_size'?"),
        ("schedule: every monday\n", "schedule: 'every monday' is not a valid cron expression"),
        ("launcher: ssh\nhosts: ['n1:1']\ngpus: [1, 2]\n", "2 ranks exceed the 1 slots of hosts"),
        ("gpus: [1, 2\n", "not valid YAML"),
        ("scaling_efficiency_by_gpus: {16: high}\n", "scaling_efficiency_by_gpus.16: Input should be a valid number"),
    ],
)
def test_a_broken_suite_file_is_an_import_error_naming_it_and_the_others_still_load(
    airflow_home, suites, monkeypatch, text, needle
):
    (suites / "broken.yaml").write_text(text)
    b = bag(monkeypatch, suites)
    errors = "\n".join(b.import_errors.values())
    assert str(suites / "broken.yaml") in errors and needle in errors, errors
    assert {"scaling_regression__nas", "scaling_regression__nvme", "scaling_regression"} <= set(b.dag_ids)
    assert "scaling_regression__broken" not in b.dag_ids


def test_the_shipped_example_suite_is_valid(airflow_home, monkeypatch):
    monkeypatch.delenv("SCALEWATCH_SUITES", raising=False)
    from airflow.dag_processing.dagbag import DagBag

    b = DagBag(dag_folder=str(ROOT / "dags"))
    assert b.import_errors == {} and "scaling_regression__example" in b.dag_ids
    assert b.dags["scaling_regression__example"].params["min_scaling_efficiency"] == 0.7


@pytest.mark.slow
def test_each_suite_dag_runs_on_the_local_launcher(airflow_home, suites, monkeypatch):
    from bench.store.db import ResultsStore
    from bench.suite.plan import suite_run_identity
    from scalewatch import paths

    b = bag(monkeypatch, suites)
    for name, cluster in (("nas", "nas-a"), ("nvme", "nvme-b")):
        run = b.dags[f"scaling_regression__{name}"].test()
        assert run.state == "success", name
        rows = ResultsStore(paths.results_url()).frame()
        identity = suite_run_identity(f"scaling_regression__{name}", run.run_id)
        mine = rows[rows["suite_run_id"] == identity]
        assert len(mine) == 1 and (mine["cluster"] == cluster).all()
        runs = ResultsStore(paths.results_url()).suite_runs()
        assert runs[runs["suite_run_id"] == identity]["dag_id"].tolist() == [f"scaling_regression__{name}"]


@pytest.mark.slow
def test_the_shipped_example_suite_runs_on_the_embedded_default(airflow_home, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.delenv("SCALEWATCH_SUITES", raising=False)
    example = DagBag(dag_folder=str(ROOT / "dags")).dags["scaling_regression__example"]
    small = {"workloads": ["ssd"], "gpus": [1], "min_measure_s": 0, "max_step_time_spread": 100}
    run = example.test(run_conf=small)  # everything else: the file's own values
    assert run.state == "success"
