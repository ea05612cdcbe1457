"""Issue 49's other fault kinds, injected for real on one node of a namespace cluster (the link kind is
tests/dags/test_ssh_slow_node.py): three namespace hosts, host0 serving the store (an ext4 of its own on
a loop device) over sshfs to the compute nodes host1 and host2, both links held by `tc` to the same rate.

- Disk or mount: host2's reads held at the store's disk (a blkio read limit on the processes serving its
  mount; what is throttleable for a node's reads here: tests/infra/node_faults.py). The storage probe
  names host2, `bound: node`.
- CPU: a cgroup cpu quota on everything host2 runs (its ranks). The 2-rank scale, below its bound, names
  host2 as its cause `node` by its compute rate against its peer's.

Bench-level runs (the probe; `sweep`, the suite without Airflow, in this process): the DAG adds nothing
to how a node is named (test_ssh_suite runs the same suite file through the DAG). One cluster for both.
"""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest
import yaml

from bench.config.models import SuiteSettings
from bench.data.generate import GenerateSpec, generate
from bench.launch.registry import suite_launcher
from bench.suite.node_probe import probe_nodes, suite_nodes
from bench.suite.plan import suite_dir
from bench.suite.run import stage_datasets
from tests.dags.test_ssh_suite import ssh_config_text, suite_text
from tests.infra.configs import changed
from tests.infra.faults import store_device
from tests.infra.node_faults import evict, mount_read_throttle, node_cpu_quota, store_page_cache_cap
from tests.infra.ssh_hosts import SshHosts, download_rate_limit, sshfs_store

pytestmark = [pytest.mark.slow, pytest.mark.rates]

LINK = "48Mbit"  # 6 MB/s on each compute node's link
LINK_MB_S = 6.0
READ_CAP = 2_000_000  # host2's mount reads at the store's disk: a third of its link
CPU_CORES = 0.2  # host2's CPU: a fifth of a core for all it runs
CACHE_CAP = 16 << 20  # the store host's page cache, a third of the ~48 MB dataset


def _env() -> dict[str, str]:
    """The nodes run this checkout's code (sshd passes no env of ours)."""
    return {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}


@pytest.fixture(scope="module")
def faulty_cluster(tmp_path_factory):
    """(hosts, cfg of the suite file, the store's export folder): the dataset staged through host1's
    mount; nothing slowed yet beyond the equal links."""
    root = tmp_path_factory.mktemp("node-faults")
    hosts = SshHosts(root / "hosts", count=3, prefix="swnf").start()
    point = root / "mnt"
    point.mkdir()
    generate(GenerateSpec("coco", root / "source" / "coco", images=192, min_side=700, max_side=900, seed=6))
    ssh_config = root / "ssh_config"
    ssh_config.write_text(ssh_config_text(hosts))
    doc = yaml.safe_load(suite_text(hosts, ssh_config, point, root / "source"))
    doc = {k: v for k, v in doc.items() if k not in ("schedule", "description")}
    cfg = SuiteSettings(**(doc | {"min_scaling_efficiency": 0.9})).sweep_config(root, root / "runs")
    try:
        with (
            store_device(root / "store.img", root / "export", 256, [hosts.procs[0].pid]) as export,
            store_page_cache_cap(hosts, CACHE_CAP),  # before the mounts: their servers are capped too
            sshfs_store(hosts, ssh_config, export, point, (1, 2)),
            download_rate_limit(hosts, [1, 2], LINK),
        ):
            stage_datasets(cfg, suite_launcher(cfg), _env())
            yield hosts, cfg, export
    finally:
        hosts.stop()


def test_a_nodes_reads_held_at_the_stores_disk_name_it_in_the_probe(faulty_cluster):
    hosts, cfg, export = faulty_cluster
    slow = hosts.ip(2)
    with mount_read_throttle(hosts, 2, export, READ_CAP) as servers:
        assert servers  # the processes that serve host2's mount, and only those, are held
        evict(export)
        probe = probe_nodes(cfg, suite_nodes(cfg, suite_launcher(cfg), _env()))
    assert probe["conclusive"], probe["reason"]
    assert probe["bound"] == "node", probe
    assert [s["host"] for s in probe["slow_nodes"]] == [slow], probe
    named = probe["slow_nodes"][0]
    assert named["mb_s"] == pytest.approx(READ_CAP / 1e6, rel=0.25), probe
    assert named["peers_median_mb_s"] > 2 * named["mb_s"], probe  # host1 read at its link's pace


def test_a_nodes_cpu_held_by_a_quota_is_named_as_the_scales_cause(faulty_cluster, tmp_path):
    from bench.suite.sweep import sweep

    hosts, cfg, _ = faulty_cluster
    slow = hosts.ip(2)
    cfg = changed(cfg, output_dir=tmp_path / "runs", probe_storage=False)
    with node_cpu_quota(hosts, 2, CPU_CORES):
        outcome = sweep(cfg, f"sqlite:///{tmp_path / 'results.db'}", log=print, node_env=_env())
    frame = pd.read_csv(suite_dir(cfg.output_dir, outcome["suite_run_id"]) / "results.csv", keep_default_na=False)
    assert set(frame["state"]) == {"COMPLETED"}, frame[["gpus", "state"]]
    two = frame[frame["gpus"] == 2].iloc[0]
    assert two["verdict"] == "fail", two.to_dict()
    assert (two["bottleneck"], two["slow_node"]) == ("node", slow), two.to_dict()
    assert f"node {slow} computes" in two["bottleneck_evidence"], two["bottleneck_evidence"]
    nodes = {n["host"]: n for n in json.loads(two["node_figures"])}
    assert nodes[slow]["compute_img_s"] < 0.5 * nodes[hosts.ip(1)]["compute_img_s"], nodes
    assert frame[frame["gpus"] == 1].iloc[0]["slow_node"] == ""  # host1 alone: no peer group
