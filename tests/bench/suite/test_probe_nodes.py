"""The storage probe from the compute nodes at once, over ssh, as a cluster runs it.

Three namespace hosts: host0 serves the store over sshfs (its sftp-server), host1 and host2 are the
compute nodes, each mounting it at the same path in its own mount namespace, each node's link
rate-limited by `tc` on what it receives. The probe reaches the nodes through the suite's ssh launcher.
"""

from __future__ import annotations

import os
import shlex
import subprocess

import pytest

from bench.config import SuiteSettings
from bench.data.generate import GenerateSpec, generate
from bench.data.probe import storage_at
from bench.data.stage import MANIFEST
from bench.errors import DatasetError
from bench.launch.registry import build_launcher
from bench.suite.probe import probe_nodes, suite_nodes
from bench.suite.run import stage_datasets
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
    # ~6 MB: a cold read of it all takes 2 s at one link, enough for tc's rate to show within 10%
    generate(GenerateSpec("coco", root / "source" / "coco", images=48, min_side=700, max_side=900, seed=6))
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
        "probe_max_jobs": 2,
        "probe_seconds": 2.0,
    }
    try:
        # stage_on's default for ssh is node: host1 copies the dataset onto the store through its own
        # mount and checks the manifest there; the worker (this process) never mounts the store
        cfg = SuiteSettings(**settings).sweep_config(root, root / "out")
        staged = stage_datasets(cfg, build_launcher("ssh", ssh=opts), _env())
        assert cfg.resolved_stage_on() == "node" and staged["ssd"]["files"] == staged["ssd"]["copied"] > 48
        assert (export / "coco" / MANIFEST).is_file() and not any(point.iterdir())
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


def test_one_node_reads_its_link_two_read_both_and_a_slower_store_binds(cluster):
    hosts, settings, root = cluster
    one_link = 3.0
    with download_rate_limit(hosts, [1, 2], LINK):
        free = _probe(hosts, settings, root)
        with link_rate_limit([hosts.namespace(0)], STORE):
            slow = _probe(hosts, settings, root)
    assert free["conclusive"], free["reason"]
    assert free["per_node_mb_s"] == free["ceiling_mb_s"] == pytest.approx(one_link, rel=0.1), free
    two = free["aggregate"][-1]
    assert [a["nodes"] for a in free["aggregate"]] == [1, 2] and free["nodes"] == [hosts.ip(1), hosts.ip(2)]
    assert two["mb_s"] == pytest.approx(2 * one_link, rel=0.1), free  # min(2 links, an unthrottled store)
    assert two["min_node_mb_s"] == pytest.approx(one_link, rel=0.15), free
    assert free["bound"] == "client" and storage_at(free, 2)[1] == "client"
    # the store throttled below one node's link: one node and both read the store's figure
    store = 2.0
    assert slow["per_node_mb_s"] == pytest.approx(store, rel=0.1), slow
    assert slow["aggregate"][-1]["mb_s"] == pytest.approx(store, rel=0.1), slow
    assert slow["bound"] == "store" and storage_at(slow, 2) == (pytest.approx(store, rel=0.1), "store")


def test_a_node_that_cannot_read_the_dataset_fails_the_probe_naming_it(cluster):
    hosts, settings, root = cluster
    opts = hosts.options()
    point = settings["dataset_path"]
    subprocess.run(opts.argv(hosts.ip(2), f"fusermount -u -z {shlex.quote(point)}"), check=True)
    try:
        with pytest.raises(DatasetError, match=rf"storage probe on node {hosts.ip(2)}: .*not a staged dataset"):
            _probe(hosts, settings, root, probe_seconds=0.5)
    finally:
        mount = subprocess.run(
            opts.argv(hosts.ip(1), "grep -o 'sshfs.*' /proc/self/mountinfo"), capture_output=True, text=True
        )
        assert mount.returncode == 0  # host1's mount was not touched by host2's
