"""The environment fingerprint: read from this node for real, unknown where unreadable, diffed per field."""

from __future__ import annotations

import socket

from bench.env.fingerprint import (
    FIELDS,
    UNKNOWN,
    describe,
    differences,
    mount_of,
    nic_speeds,
    node_fingerprint,
    os_image,
    run_fingerprint,
)


def test_this_node_is_read_for_real(tmp_path):
    node = node_fingerprint(socket.gethostname(), tmp_path)
    assert node["torch"].startswith("2.") and node["kernel"] and node["os_image"] != UNKNOWN
    assert node["cuda"] == "none" and node["driver"] == "none"  # a CPU node says so, never a guessed version
    assert node["mount"]["fstype"] not in ("", UNKNOWN) and node["mount"]["mountpoint"].startswith("/")
    run = run_fingerprint([node])
    assert set(run) == set(FIELDS) and run["nodes"] == socket.gethostname()


def test_unreadable_fields_are_unknown_never_guessed(tmp_path):
    assert os_image(tmp_path / "missing") == UNKNOWN
    assert mount_of("/x", tmp_path / "no-mounts")["fstype"] == UNKNOWN
    net = tmp_path / "net"
    (net / "eth0").mkdir(parents=True)
    (net / "eth0" / "speed").write_text("-1\n")  # what a link without a reported speed gives
    (net / "eth1").mkdir()
    (net / "eth1" / "speed").write_text("25000\n")
    assert nic_speeds(net) == {"eth0": UNKNOWN, "eth1": "25000 Mb/s"}


def test_the_longest_mount_prefix_holds_the_path(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "/dev/vda1 / ext4 rw,relatime 0 0\n"
        "nas01:/export/coco /mnt/nas nfs4 rw,vers=4.2,rsize=1048576,hard 0 0\n"
        "tmpfs /mnt/nasx tmpfs rw 0 0\n"
    )
    got = mount_of("/mnt/nas/coco/images", mounts)
    assert got == {
        "fstype": "nfs4",
        "source": "nas01:/export/coco",
        "options": "rw,vers=4.2,rsize=1048576,hard",
        "mountpoint": "/mnt/nas",
    }


def test_nodes_that_differ_are_named_and_a_change_is_described():
    a = {"host": "gpu-01", "nccl": "2.21.5", "kernel": "6.1", "nic_speeds": {"ib0": "200000 Mb/s"}}
    b = {"host": "gpu-02", "nccl": "2.21.5", "kernel": "6.8", "nic_speeds": {"ib0": "100000 Mb/s"}}
    run = run_fingerprint([b, a])
    assert run["nccl"] == "2.21.5" and run["nodes"] == "gpu-01,gpu-02"
    assert run["kernel"] == "gpu-01: 6.1; gpu-02: 6.8"
    later = dict(run, nccl="2.23.4")
    changes = differences(run, later)
    assert changes == [{"field": "nccl", "before": "2.21.5", "after": "2.23.4"}]
    assert describe(changes, "2026-11-16") == "nccl 2.21.5 -> 2.23.4 from the run of 2026-11-16"
    assert describe([]) == ""
