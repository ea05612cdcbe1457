"""Two suites on one schedule get the same Airflow run_id: each keeps its own folder, jobs and rows."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.dags.conftest import ROOT

pytestmark = pytest.mark.slow

SUITE = """
cluster: {cluster}
workloads: [ssd]
gpus: [1, 2]
steps: 3
min_measure_s: 0
max_step_time_spread: 100
max_foreign_share: 1.0  # beside the other lanes: identity is under test, not interference
min_scaling_efficiency: 0.0
dataset_images: 32
probe_storage: false
# what is judged is each suite's identity (rows, report, jobs): its scales' runs, no node ceilings
ceilings: false
"""


def test_two_suites_with_one_logical_date_keep_every_row_report_and_job(airflow_home, tmp_path, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    from bench.store.db import ResultsStore
    from bench.suite.plan import suite_dir, suite_run_identity
    from scalewatch import paths

    folder = tmp_path / "suites"
    folder.mkdir()
    for name in ("sitea", "siteb"):
        (folder / f"{name}.yaml").write_text(SUITE.format(cluster="shared"))
    monkeypatch.setenv("SCALEWATCH_SUITES", str(folder))
    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    when = datetime(2026, 1, 12, 4, tzinfo=UTC)  # what both weekly schedules would fire at
    runs = {
        name: bag.dags[f"scaling_regression__{name}"].test(run_after=when, logical_date=when)
        for name in ("sitea", "siteb")
    }
    assert runs["sitea"].run_id == runs["siteb"].run_id  # Airflow's run_id alone cannot tell them apart
    store = ResultsStore(paths.results_url())
    rows, suites = store.frame(), store.suite_runs()
    folders = set()
    for name, run in runs.items():
        assert run.state == "success", name
        identity = suite_run_identity(f"scaling_regression__{name}", run.run_id)
        mine = rows[rows["suite_run_id"] == identity]
        assert sorted(mine["gpus"]) == [1, 2], (name, rows[["suite_run_id", "gpus"]])
        assert suites[suites["suite_run_id"] == identity]["dag_id"].tolist() == [f"scaling_regression__{name}"]
        out = suite_dir(paths.reports_root(), identity)
        assert (out / "report.html").exists() and (out / "results.csv").exists()
        assert (out / "ssd-1" / "state.json").exists() and (out / "ssd-2" / "state.json").exists()
        assert f'"dag_id": "scaling_regression__{name}"' in (out / "suite.json").read_text()
        folders.add(out)
    assert len(folders) == 2
