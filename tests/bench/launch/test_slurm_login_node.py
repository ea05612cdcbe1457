"""Slurm driven through an SSH login node: sbatch/scontrol/scancel run on a namespaced host over ssh."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench.config.models import RunSpec, TrainConfig
from bench.launch.base import RunState, collect, wait
from bench.launch.registry import build_launcher
from tests.infra.faults import train_pids, wait_for
from tests.infra.slurm_cluster import SlurmCluster
from tests.infra.ssh_hosts import SshHosts

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def login_and_cluster(tmp_path_factory, ssh_hosts):
    """The login node is the session's first namespace host (tests/conftest.py); slurmctld listens on
    the hosts' bridge, where that host reaches it."""
    hosts = ssh_hosts
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm-login"), ctld_addr=hosts.gateway)
    try:
        cluster.start()
        yield hosts, cluster
    finally:
        cluster.stop()


def launcher_for(hosts: SshHosts, cluster: SlurmCluster):
    return build_launcher("slurm", ssh=hosts.options(), login_host=hosts.ip(0), slurm_env=cluster.env)


def spec(tmp_path, datasets, steps: int, run_id: str) -> RunSpec:
    train = TrainConfig(workload="ssd", data=datasets["coco"], steps=steps, batch_size=4, sample_interval_s=0.2)
    return RunSpec(
        run_id=run_id,
        train=train,
        ranks=2,
        ranks_per_node=1,
        partition="test",
        output_dir=tmp_path / "run",
        python=Path(sys.executable),
    )


def test_job_submitted_and_collected_through_the_login_node(login_and_cluster, tmp_path, datasets):
    hosts, cluster = login_and_cluster
    launcher = launcher_for(hosts, cluster)
    s = spec(tmp_path, datasets, 4, "login")
    handle = launcher.submit(s)
    state, reason = wait(launcher, handle, 240, 1.0)
    launcher.fetch(handle, s.output_dir)
    result = collect(handle, state, reason, 2)
    assert result.ok, (result.reason, result.log_paths)
    assert sorted(result.rank_hosts.values()) == ["node1", "node2"]


def test_cancel_through_the_login_node(login_and_cluster, tmp_path, datasets):
    hosts, cluster = login_and_cluster
    launcher = launcher_for(hosts, cluster)
    s = spec(tmp_path, datasets, 100000, "logincancel")
    handle = launcher.submit(s)
    wait_for(lambda: train_pids(s.output_dir), 120)
    launcher.cancel(handle)
    state, _ = wait(launcher, handle, 120, 1.0)
    assert state == RunState.CANCELLED
    assert wait_for(lambda: not cluster.queue(), 60)


def test_a_failed_fetch_fails_the_run_and_no_earlier_summary_is_read(login_and_cluster, tmp_path, datasets):
    import subprocess

    from bench.launch.base import fetch_and_collect

    hosts, cluster = login_and_cluster
    launcher = launcher_for(hosts, cluster)
    s = spec(tmp_path, datasets, 4, "stale")
    handle = launcher.submit(s)
    state, reason = wait(launcher, handle, 240, 1.0)
    first = fetch_and_collect(launcher, handle, state, reason)
    assert first.ok, first.reason
    # The same run collected again, with the login node refusing us: the summary on disk is from the
    # fetch above, and must not pass for this attempt's.
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    refused = build_launcher("slurm", ssh=hosts.options(key_file=other), login_host=hosts.ip(0), slurm_env=cluster.env)
    again = fetch_and_collect(refused, handle, RunState.COMPLETED, "slurm COMPLETED")
    assert again.state == RunState.FAILED and "fetching" in again.reason and again.summary is None
    assert not (s.output_dir / "metrics" / "summary.json").exists()


def test_a_summary_of_another_attempt_is_never_collected(tmp_path):
    import json

    from bench.launch.base import collect

    out = tmp_path / "run"
    (out / "metrics").mkdir(parents=True)
    (out / "ranks").mkdir()
    (out / "ranks" / "rank0.json").write_text(json.dumps({"rank": 0, "host": "n1", "exit_code": 0}))
    from tests.bench.launch.summaries import valid_summary

    (out / "metrics" / "summary.json").write_text(json.dumps(valid_summary(run_nonce="aaaa")))
    handle = {"backend": "slurm", "run_id": "x", "output_dir": str(out), "job_id": "7", "ranks": 1}
    assert collect(handle | {"nonce": "aaaa"}, RunState.COMPLETED, "", 1).ok
    other = collect(handle | {"nonce": "bbbb"}, RunState.COMPLETED, "", 1)
    assert other.state == RunState.FAILED and "another attempt" in other.reason and other.summary is None
