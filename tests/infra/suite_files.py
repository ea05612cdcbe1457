"""Suite files as a user writes them, for tests that run a whole suite over several hosts (ssh, Slurm)."""

from __future__ import annotations

from pathlib import Path

import yaml

# A small training run per scale: these suites' verdicts, not their figures, are judged (the probe's are).
SMALL_SCALES = {
    "workloads": ["ssd"],
    "gpus": [1, 2],
    "steps": 4,
    "warmup_steps": 1,
    "min_measure_s": 0.0,
    "max_step_time_spread": 100,
    "batch_size": 8,
    "image_size": 128,
    # slow links (3 MB/s) or a busy 2-core box and 4 steps: no scaling figure of theirs is judged (a bound of
    # 0 asks for no scaling verdict, the slower-than-a-smaller-scale rule of issue 62 included: 2 ranks across
    # 3 MB/s links run slower than one)
    "min_scaling_efficiency": 0.0,
    "min_bandwidth_efficiency": 0.1,
    "ceilings": False,
    "confirm_causes": False,
    "confirm_regressions": False,
    # beside the other lanes of the suite, foreign work on the ranks' cores is the rule, not a fault under
    # test: these suites judge the wiring (issue 62: over max_foreign_share a scale is INCONCLUSIVE)
    "max_foreign_share": 1.0,
}


def suite_file(description: str, **where) -> str:
    """A suite file's text: where it runs (launcher, hosts or partition, store) over SMALL_SCALES."""
    return yaml.safe_dump({"description": description, "schedule": None, **SMALL_SCALES, **where}, sort_keys=False)


def records_workload(
    path: Path, *, files: int, record_bytes: int, batch: int, seconds_per_batch: float, threads: int = 1, **more
) -> Path:
    """An emulated workload file as a user writes it (bench/workloads): `files` generated raw records of
    `record_bytes`, read `batch` at a time by `threads` loader workers, one accelerator's seconds per batch;
    `more` adds top-level keys (min_au, ...)."""
    spec = {
        "dataset": {"format": "raw", "files": files, "record_bytes": {"mean": record_bytes}},
        "reader": {"threads": threads, "batch": batch, "prefetch": 4},
        "compute": {"accelerator": {"seconds_per_batch": seconds_per_batch}},
        **more,
    }
    path.write_text(yaml.safe_dump(spec))
    return path


ROOT = Path(__file__).resolve().parents[2]
# The alert targets of the DAG tests' suites (tests.infra.receivers.alert_connections names the connections).
ALERTED = {"slack_conn_id": "sw_slack", "smtp_conn_id": "sw_smtp", "email_to": ["oncall@example.com"]}


def suite_dag(tmp_path: Path, monkeypatch, name: str, settings: dict):
    """The DAG of one suite file written as a user writes it (`tmp_path`/suites/`name`.yaml, the folder
    SCALEWATCH_SUITES names), parsed from the project's dags/ folder without an import error."""
    from airflow.dag_processing.dagbag import DagBag

    suites = tmp_path / "suites"
    suites.mkdir(exist_ok=True)
    (suites / f"{name}.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
    monkeypatch.setenv("SCALEWATCH_SUITES", str(suites))
    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    return bag.get_dag(f"scaling_regression__{name}")
