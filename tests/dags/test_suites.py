"""Suites as code: each suite file becomes its own DAG with the file's defaults and schedule."""

from __future__ import annotations

import os
from pathlib import Path

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
max_foreign_share: 1.0  # beside the other lanes: the suite DAGs are under test, not interference
dataset_images: 24
probe_seconds: 0.5
min_scaling_efficiency_by_gpus: {16: 0.9, 32: 0.8, 64: 0.7}
"""
NVME = """
schedule: null
cluster: nvme-b
workloads: [deeplabv3plus]
gpus: [1]
steps: 3
min_measure_s: 0
max_step_time_spread: 100
max_foreign_share: 1.0  # beside the other lanes: the suite DAGs are under test, not interference
dataset_images: 24
probe_seconds: 0.5
batch_size: 4
"""


def bag(monkeypatch, folder):
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("SCALEWATCH_SUITES", str(folder))
    return DagBag(dag_folder=str(ROOT / "dags"))


def alias_bomb() -> str:
    """A few hundred bytes that PyYAML shares into 9**9 strings once expanded (a "billion laughs")."""
    levels = ["  - &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    levels += [f"  - &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    return "workloads:\n" + "\n".join(levels) + "\n"


def bomb(path: Path) -> None:
    path.write_text(alias_bomb())


def make_fifo(path: Path) -> None:
    os.mkfifo(path)  # nobody ever writes: opening it for reading the usual way waits forever


def link_to_dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")  # read in full: endless zeros


def link_to_a_valid_suite(path: Path) -> None:
    target = path.parent.parent / "elsewhere.yaml"
    target.write_text(NVME)
    path.symlink_to(target)  # links are refused, not followed, whatever they point at


def binary(path: Path) -> None:
    path.write_bytes(b"workloads: [ssd]\n\xff\xfe\x00\x81 not text\n")


def deep(path: Path) -> None:
    path.write_text("workloads: " + "[" * 100_000 + "]" * 100_000 + "\n")  # under the size cap


def deep_through_aliases(path: Path) -> None:
    chain = ["a0: &a0 [ssd]"] + [f"a{i}: &a{i} [*a{i - 1}]" for i in range(1, 2000)]
    path.write_text("\n".join(chain) + "\nworkloads: *a1999\n")


def directory(path: Path) -> None:
    path.mkdir()


def huge_integer(path: Path) -> None:
    path.write_text("steps: " + "9" * 5000 + "\n")  # int() refuses past 4300 digits with ValueError


def self_reference(path: Path) -> None:
    path.write_text("workloads: &w [ssd, *w]\n")


def huge_value(path: Path) -> None:
    path.write_text("cluster: " + "x" * 200_000 + "!\n")  # the schema message would repeat it whole


PATHOLOGICAL = [
    (bomb, "expands to more than 20000 values once its aliases are followed"),
    (make_fifo, "is a FIFO; a suite file must be a regular file"),
    (link_to_dev_zero, "is a symbolic link; a suite file must be a regular file"),
    (link_to_a_valid_suite, "is a symbolic link"),
    (binary, "not UTF-8 text (invalid byte at offset 17)"),
    (deep, "nested deeper than 32 levels (line 1)"),
    (deep_through_aliases, "nested deeper than 32 levels once its aliases are followed"),
    (directory, "is a directory"),
    (huge_integer, "cannot be loaded (ValueError"),
    (self_reference, "an alias refers to a node that contains it"),
    (huge_value, "cluster:"),
]


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
    assert nas.params["min_scaling_efficiency_by_gpus"] == {"16": 0.9, "32": 0.8, "64": 0.7}
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
        (
            "min_scaling_efficiency_by_gpus: {16: high}\n",
            "min_scaling_efficiency_by_gpus.16: Input should be a valid number",
        ),
        (
            "scaling_efficiency_by_gpus: {16: 0.9}\nmin_scaling_efficiency_by_gpus: {16: 0.8}\n",
            "scaling_efficiency_by_gpus and min_scaling_efficiency_by_gpus are both given",
        ),
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


@pytest.mark.parametrize("plant,needle", PATHOLOGICAL, ids=[f.__name__ for f, _ in PATHOLOGICAL])
def test_a_hostile_suite_file_is_one_short_import_error_and_never_hangs_the_others(
    airflow_home, suites, monkeypatch, plant, needle
):
    monkeypatch.setenv("AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT", "20")  # a hang fails the test instead of the run
    plant(suites / "zz.yaml")
    b = bag(monkeypatch, suites)
    errors = "\n".join(b.import_errors.values())
    assert str(suites / "zz.yaml") in errors and needle in errors, errors[:2000]
    assert len(errors) < 1000, f"{len(errors)} chars of error: values must never be shown whole"
    assert {"scaling_regression__nas", "scaling_regression__nvme", "scaling_regression"} <= set(b.dag_ids)
    assert "scaling_regression__zz" not in b.dag_ids


@pytest.mark.timeout(120)  # a loader without the bound spends minutes in jsonschema on the expanded value
def test_an_alias_bomb_is_refused_before_anything_expands_it(suites):
    """The bomb is refused from its node graph (aliases measured, not followed): it never reaches the
    constructor's values or the form's validation, which would walk every one of its 9**9 strings."""
    from bench.suite_files import MAX_YAML_NODES, load_suites
    from scalewatch.params import check_suite_values

    validated: list[str] = []

    def check(name: str, defaults: dict) -> None:
        validated.append(name)
        check_suite_values(name, defaults)

    (suites / "bomb.yaml").write_text(alias_bomb())
    assert len(alias_bomb()) < 600
    loaded, errors = load_suites(suites, check)
    assert [s.name for s in loaded] == ["nas", "nvme"] and list(errors) == [suites / "bomb.yaml"]
    refused = errors[suites / "bomb.yaml"]
    assert f"expands to more than {MAX_YAML_NODES} values once its aliases are followed" in refused, refused
    assert validated == ["nas", "nvme"]  # the bomb's values were never validated: nothing walked them


def test_one_stem_twice_refuses_both_files_naming_them(airflow_home, suites, monkeypatch):
    (suites / "alpha.yaml").write_text(NAS)
    (suites / "alpha.yml").write_text(NVME)
    b = bag(monkeypatch, suites)
    errors = "\n".join(b.import_errors.values())
    for name in ("alpha.yaml", "alpha.yml"):
        assert f"{suites / name}: suite 'alpha' is defined by both alpha.yaml and alpha.yml" in errors, errors
    assert "scaling_regression__alpha" not in b.dag_ids
    assert {"scaling_regression__nas", "scaling_regression__nvme"} <= set(b.dag_ids)


def test_a_badly_named_suite_file_is_an_error_and_the_others_still_load(airflow_home, suites, monkeypatch):
    (suites / "my suite.yaml").write_text(NVME)  # no valid DAG id can be made from it
    b = bag(monkeypatch, suites)
    errors = "\n".join(b.import_errors.values())
    assert f"{suites / 'my suite.yaml'}: file name 'my suite' must match" in errors, errors
    assert {"scaling_regression__nas", "scaling_regression__nvme"} <= set(b.dag_ids)


def test_the_shipped_example_suite_is_valid(airflow_home, monkeypatch):
    monkeypatch.delenv("SCALEWATCH_SUITES", raising=False)
    from airflow.dag_processing.dagbag import DagBag

    b = DagBag(dag_folder=str(ROOT / "dags"))
    assert b.import_errors == {} and "scaling_regression__example" in b.dag_ids
    example, embedded = b.dags["scaling_regression__example"].params, b.dags["scaling_regression"].params
    assert example["cluster"] == "local"  # the file's one setting: its history's name, whatever the environment
    # a suite confirms a failing scale's cause; the embedded default (the built-in DAG, `bench sweep`) does not
    assert example["confirm_causes"] is True and embedded["confirm_causes"] is False
    # the embedded default swaps DeepLabv3+ for an emulated accelerator that puts the disk to work (issue 39)
    assert example["workloads"] == ["ssd", "deeplabv3plus"] and embedded["workloads"] == ["ssd", "retinanet-b200"]
    # and stops its emulated rank search at 8 ranks (a suite searches to the default cap)
    assert embedded["au_search_max_ranks"] == 8 and example["au_search_max_ranks"] == 256
    # every other field is the form's default: the file does not restate them (test_defaults_once checks it)
    mine = {"cluster", "confirm_causes", "workloads", "au_search_max_ranks"}
    assert {k: example[k] for k in example if k not in mine} == {k: embedded[k] for k in embedded if k not in mine}


def test_a_suite_file_with_the_old_table_name_loads_under_the_new_one(airflow_home, suites, monkeypatch, caplog):
    (suites / "old.yaml").write_text("gpus: [1]\nscaling_efficiency_by_gpus: {16: 0.9}\n")
    b = bag(monkeypatch, suites)
    assert b.import_errors == {}
    params = b.dags["scaling_regression__old"].params
    assert params["min_scaling_efficiency_by_gpus"] == {"16": 0.9} and "scaling_efficiency_by_gpus" not in params
    assert "'scaling_efficiency_by_gpus' is deprecated, renamed 'min_scaling_efficiency_by_gpus'" in caplog.text


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
    small = {"workloads": ["ssd"], "gpus": [1], "min_measure_s": 0, "max_step_time_spread": 100, "probe_seconds": 0.5}
    small["max_foreign_share"] = 1.0  # beside the other lanes: the shipped file is under test, not interference
    run = example.test(run_conf=small)  # everything else: the file's own values
    assert run.state == "success"
