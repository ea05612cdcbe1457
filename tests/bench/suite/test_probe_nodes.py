"""The storage probe from the compute nodes at once, over ssh, as a cluster runs it.

Three namespace hosts: host0 serves the store over sshfs (its sftp-server), host1 and host2 are the
compute nodes, each mounting it at the same path in its own mount namespace, each node's link
rate-limited by `tc` on what it receives. The probe reaches the nodes through the suite's ssh launcher.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from bench.analysis.verdict.evaluate import sizing_ceiling
from bench.config import SuiteSettings
from bench.data.generate import GenerateSpec, generate
from bench.data.probe import storage_at
from bench.data.stage import MANIFEST
from bench.errors import DatasetError
from bench.launch.registry import build_launcher
from bench.suite.probe import probe_nodes, suite_nodes
from bench.suite.sweep import sweep
from tests.infra.ssh_hosts import SshHosts, download_rate_limit, link_rate_limit

pytestmark = [pytest.mark.slow, pytest.mark.rates]

LINK = "24Mbit"  # each compute node's link: 3.0 MB/s
STORE = "16Mbit"  # the store's own link when throttled below one node's: 2.0 MB/s


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(hosts, settings dict of an ssh suite on host1 and host2 reading the store host0 serves)."""
    root = tmp_path_factory.mktemp("probe-cluster")
    hosts = SshHosts(root / "hosts", count=3, prefix="swpn").start()
    export, point = root / "export", root / "mnt"
    export.mkdir()
    point.mkdir()
    # ~12 MB: a 2 s read at one link takes half of it, so the best level's second read is fresh too
    generate(GenerateSpec("coco", root / "source" / "coco", images=96, min_side=700, max_side=900, seed=6))
    opts = hosts.options()
    sshfs = (
        f"sshfs root@{hosts.ip(0)}:{export} {point} -o IdentityFile={hosts.client_key},"
        f"UserKnownHostsFile={hosts.known_hosts},StrictHostKeyChecking=yes,BatchMode=yes"
    )
    for i in (1, 2):  # each node's own mount, in its sshd's mount namespace, as a cluster's nodes mount
        subprocess.run(opts.argv(hosts.ip(i), sshfs), check=True, capture_output=True, stdin=subprocess.DEVNULL)
    settings = {
        "workloads": ["ssd"],
        "gpus": [1, 2],
        "launcher": "ssh",
        "hosts": [f"{hosts.ip(1)}:1", f"{hosts.ip(2)}:1"],
        "dataset_path": str(point),
        "stage_from": str(root / "source"),
        "probe_max_jobs": 1,  # one sshfs reader fills a link: a second job's level would add nothing
        "probe_seconds": 2.0,  # 1 s reads of a 3 MB/s link came 10-12% under it; 2 s within 4%
    }
    try:
        yield hosts, settings, root
    finally:
        for i in (1, 2):
            subprocess.run(opts.argv(hosts.ip(i), f"fusermount -u -z {point}"), capture_output=True)
        hosts.stop()


def _probe(hosts, settings, root, **changes):
    cfg = SuiteSettings(**(settings | changes)).sweep_config(root, root / "out")
    launcher = build_launcher("ssh", ssh=hosts.options())
    return probe_nodes(cfg, suite_nodes(cfg, launcher, _env()))


def _env() -> dict[str, str]:
    """The nodes run this checkout's code, as ranks in tests/bench/launch/test_ssh.py do (sshd passes no env)."""
    return {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}


SUITE = {  # a small training run per scale: the verdicts, not their figures, are this test's
    "steps": 4,
    "warmup_steps": 1,
    "min_measure_s": 0.0,
    "batch_size": 8,
    "image_size": 128,
    "ceilings": False,
    "confirm_causes": False,
    "confirm_regressions": False,
}


def test_an_ssh_suite_on_two_hosts_gives_verdicts_and_probes_the_nodes_links_then_a_slower_store(cluster):
    """(a) the suite over 2 hosts reading the store through their tc-limited links: verdicts at 1 and
    2 ranks, one node's ceiling that of one link, 2 nodes' aggregate that of both; (c) the store's own
    link throttled below one node's: the probe says `store`."""
    hosts, settings, root = cluster
    one_link = 3.0
    cfg = SuiteSettings(**settings, **SUITE).sweep_config(root, root / "out")
    launcher = build_launcher("ssh", ssh=hosts.options())
    with download_rate_limit(hosts, [1, 2], LINK):
        outcome = sweep(
            cfg, f"sqlite:///{root / 'r.db'}", "nodes", log=lambda _: None, launcher=launcher, node_env=_env()
        )
        with link_rate_limit([hosts.namespace(0)], STORE):
            slow = _probe(hosts, settings, root)
    # stage_on's default for ssh is node: host1 copied the dataset onto the store through its own mount
    # and checked the manifest there; the worker (this process) never mounted the store
    assert cfg.resolved_stage_on() == "node" and (root / "export" / "coco" / MANIFEST).is_file()
    assert not any(Path(settings["dataset_path"]).iterdir())
    frame = pd.read_csv(root / "out" / "nodes" / "results.csv")
    assert sorted(frame["gpus"]) == [1, 2] and set(frame["state"]) == {"COMPLETED"}, outcome
    assert frame["verdict"].isin(["pass", "fail", "inconclusive"]).all() and outcome["verdict"], outcome
    hosts_of_2 = {r["host"] for r in json.loads(frame[frame["gpus"] == 2].iloc[0]["rank_breakdown"])}
    assert len(hosts_of_2) == 2, hosts_of_2  # one rank on each host
    free = json.loads((root / "out" / "nodes" / "probe.json").read_text())
    assert free["conclusive"], free["reason"]
    assert free["per_node_mb_s"] == free["ceiling_mb_s"] == pytest.approx(one_link, rel=0.1), free
    two = free["aggregate"][-1]
    assert [a["nodes"] for a in free["aggregate"]] == [1, 2] and free["nodes"] == [hosts.ip(1), hosts.ip(2)]
    assert two["mb_s"] == pytest.approx(2 * one_link, rel=0.1), free  # min(2 links, an unthrottled store)
    assert two["min_node_mb_s"] == pytest.approx(one_link, rel=0.15), free
    assert free["bound"] == "client" and storage_at(free, 2)[1] == "client"
    sized = frame[frame["storage_ceiling_mb_s"].notna()]  # sizing takes the 2 nodes' aggregate
    assert (sized["storage_ceiling_mb_s"] == two["mb_s"]).all() and (sized["probe_nodes"] == 2).all()
    assert (sized["storage_bound"] == "client").all()
    # the store throttled below one node's link: one node and both read the store's figure
    store = 2.0
    assert slow["per_node_mb_s"] == pytest.approx(store, rel=0.1), slow
    assert slow["aggregate"][-1]["mb_s"] == pytest.approx(store, rel=0.1), slow
    assert slow["bound"] == "store" and storage_at(slow, 2) == (pytest.approx(store, rel=0.1), "store")
    assert sizing_ceiling(slow) == (pytest.approx(store, rel=0.1), pytest.approx(1.5, abs=0.5), "store")


def test_a_node_that_cannot_read_the_dataset_fails_the_probe_naming_it(cluster):
    hosts, settings, root = cluster
    opts = hosts.options()
    point = settings["dataset_path"]
    subprocess.run(opts.argv(hosts.ip(1), f"fusermount -u -z {shlex.quote(point)}"), check=True)
    with pytest.raises(DatasetError, match=rf"storage probe on node {hosts.ip(1)}: .*not a staged dataset"):
        _probe(hosts, settings, root, probe_seconds=0.5)
    mount = subprocess.run(opts.argv(hosts.ip(2), "grep -c sshfs /proc/self/mountinfo"), capture_output=True)
    assert mount.returncode == 0  # host2's mount, in its own namespace, was not touched by host1's
