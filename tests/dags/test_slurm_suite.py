"""A Slurm suite as a user runs it: one suite file through the DAG (dag.test()), on a real two-node Slurm
cluster (tests/infra/slurm_cluster.py: slurmctld, two slurmd, munge). Issue 51: until this, only the
cancel test ran the DAG on Slurm, and no Slurm suite ever completed through it."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from bench.data.generate import GenerateSpec, generate
from bench.suite.plan import suite_dir, suite_run_identity
from tests.dags.conftest import ROOT
from tests.infra.configs import changed
from tests.infra.suite_files import suite_file

# Not `rates`: the verdicts of a small run and where the probe read are judged, not the probe's figures.
pytestmark = [pytest.mark.slow]

SUITE_NAME = "slurm_nodes"


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    from tests.infra.slurm_cluster import SlurmCluster

    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm-suite")).start()
    yield cluster
    cluster.stop()


def test_the_slurm_suite_file_through_the_dag_gives_verdicts_and_probes_both_nodes(
    airflow_home, slurm, tmp_path, monkeypatch
):
    """dag.test() of a suite file naming the partition and one rank a node: verdicts at 1 and 2 ranks, the
    2-rank scale on both nodes, the storage probe read by a task on each node."""
    from airflow.dag_processing.dagbag import DagBag

    generate(GenerateSpec("coco", tmp_path / "source" / "coco", images=96, min_side=300, max_side=400, seed=11))
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / f"{SUITE_NAME}.yaml").write_text(
        suite_file(
            "Two Slurm nodes, one rank each.",
            launcher="slurm",
            partition="test",
            ranks_per_node=1,  # 2 ranks: one on each node (no GPU gres here); the probe then reads from both
            dataset_path=str(tmp_path / "data"),
            stage_from=str(tmp_path / "source"),
            probe_max_jobs=1,
            probe_seconds=2.0,
        )
    )
    for key, value in slurm.env.items():  # the worker's Slurm CLI reaches this cluster, as a login node's would
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("SCALEWATCH_SUITES", str(suites))
    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    dag = bag.get_dag(f"scaling_regression__{SUITE_NAME}")
    run = dag.test()
    states = {ti.task_id: ti.state for ti in run.get_task_instances() if ti.map_index < 1}
    assert run.state == "success", states
    assert not [line for line in slurm.queue() if line.strip() and "JOBID" not in line]  # nothing left queued
    out = suite_dir(airflow_home / "sw" / "runs", suite_run_identity(dag.dag_id, run.run_id))
    frame = pd.read_csv(out / "results.csv")
    assert sorted(frame["gpus"]) == [1, 2] and set(frame["state"]) == {"COMPLETED"}, frame
    assert set(frame["verdict"]) == {"pass"} and frame["valid"].all(), frame[["gpus", "verdict", "reason"]]
    assert (frame["throughput_img_s"] > 0).all() and frame[frame["gpus"] == 2]["scaling_efficiency"].notna().all()
    two = frame[frame["gpus"] == 2].iloc[0]
    assert {r["host"] for r in json.loads(two["rank_breakdown"])} == {"node1", "node2"}, two["rank_breakdown"]
    probe = json.loads((out / "probe.json").read_text())
    # the 2-node level: a task on each node (its SLURMD_NODENAME) read its own share of the dataset
    (level,) = [lv for lv in probe["node_levels"] if lv["nodes"] == 2]
    assert sorted(p["host"] for p in level["per_node"]) == ["node1", "node2"], level
    assert all(p["bytes"] > 0 and p["mb_s"] > 0 for p in level["per_node"]), level
    assert sorted(probe["nodes"]) == ["node1", "node2"] and probe["per_node_mb_s"] > 0, probe


CPU_CORES = 0.2  # node2's CPU: a fifth of a core for its slurmd and all it starts


@pytest.mark.rates
def test_a_slurm_nodes_cpu_held_by_a_quota_on_its_slurmd_is_named_as_the_scales_cause(slurm, tmp_path, monkeypatch):
    """Issue 49's CPU kind on Slurm, bench-level (the DAG adds nothing to how a node is named; the test
    above runs the suite through it): node2's slurmd, and so the slurmstepd and the rank it starts, under a
    cgroup-v1 cpu quota. The 2-rank scale, below its bound, names node2 as its cause `node` by its compute
    rate against node1's. The link and disk kinds do not apply here: both slurmd run on this host, so the
    nodes share one loopback and one page cache (no link or mount of one node alone to hold)."""
    import yaml

    from bench.config.models import SuiteSettings
    from bench.suite.sweep import sweep
    from tests.infra.node_faults import slurmd_cpu_quota

    generate(GenerateSpec("coco", tmp_path / "source" / "coco", images=96, min_side=300, max_side=400, seed=11))
    text = suite_file(
        "Two Slurm nodes, one rank each; node2's CPU held.",
        launcher="slurm",
        partition="test",
        ranks_per_node=1,
        dataset_path=str(tmp_path / "data"),
        stage_from=str(tmp_path / "source"),
    )
    doc = {k: v for k, v in yaml.safe_load(text).items() if k not in ("schedule", "description")}
    cfg = SuiteSettings(**(doc | {"min_scaling_efficiency": 0.9})).sweep_config(tmp_path, tmp_path / "runs")
    cfg = changed(cfg, probe_storage=False)
    for key, value in slurm.env.items():
        monkeypatch.setenv(key, value)
    with slurmd_cpu_quota(slurm._slurmd_node2.pid, "node2", CPU_CORES):
        outcome = sweep(cfg, f"sqlite:///{tmp_path / 'results.db'}", log=print)
    frame = pd.read_csv(suite_dir(cfg.output_dir, outcome["suite_run_id"]) / "results.csv", keep_default_na=False)
    assert set(frame["state"]) == {"COMPLETED"}, frame[["gpus", "state", "reason"]]
    two = frame[frame["gpus"] == 2].iloc[0]
    assert two["verdict"] == "fail", two.to_dict()
    assert (two["bottleneck"], two["slow_node"]) == ("node", "node2"), two.to_dict()
    assert "node node2 computes" in two["bottleneck_evidence"], two["bottleneck_evidence"]
    nodes = {n["host"]: n for n in json.loads(two["node_figures"])}
    assert nodes["node2"]["compute_img_s"] < 0.5 * nodes["node1"]["compute_img_s"], nodes
    assert frame[frame["gpus"] == 1].iloc[0]["slow_node"] == ""  # one node: no peer group
