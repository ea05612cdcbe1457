"""Against real sshd servers in network namespaces with their own IPs."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.config.models import HostSlots, RunSpec, TrainConfig
from bench.errors import LaunchError
from bench.launch.base import collect, wait
from bench.launch.registry import build_launcher
from bench.launch.sshopts import SshOptions
from tests.infra.ssh_hosts import SshHosts

pytestmark = pytest.mark.slow


@pytest.fixture
def hosts(ssh_hosts) -> SshHosts:
    return ssh_hosts  # the session's (tests/conftest.py)


# The checkpoint phase after a scale's training, on the same ranks and hosts (issue 40): 1 MiB shards.
CHECKPOINT = {"bytes_per_rank": "1MiB", "writes": 1, "reads": 1}


def spec(hosts, tmp_path, datasets, host_list=None, backend="auto", ranks=2, **train_over) -> RunSpec:
    train = TrainConfig(
        workload="ssd",
        data=datasets["coco"],
        steps=4,
        batch_size=4,
        sample_interval_s=0.2,
        backend=backend,
        **train_over,
    )
    return RunSpec(
        run_id="ssh",
        train=train,
        ranks=ranks,
        output_dir=tmp_path / "run",
        python=Path(sys.executable),
        hosts=host_list or (HostSlots(host=hosts.ip(0)), HostSlots(host=hosts.ip(1))),
        rendezvous_addr=hosts.gateway,
        # sshd drops the environment: the remote ranks must run this checkout's code, not the install's
        env={"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {},
    )


@pytest.mark.parametrize("backend", ["horovod", "ddp"])
def test_two_host_training_each_rank_on_its_slot(hosts, tmp_path, datasets, backend):
    from tests.infra.faults import slots_while_training

    launcher = build_launcher("ssh", ssh=hosts.options())
    s = spec(hosts, tmp_path, datasets, backend=backend, checkpoint=CHECKPOINT, checkpoint_dir=tmp_path / "store")
    s = s.model_copy(update={"train": s.train.model_copy(update={"steps": 30})})
    handle = launcher.submit(s)
    live = slots_while_training(s.output_dir, 2)  # the namespaced hosts share this /proc
    state, reason = wait(launcher, handle, 240, 0.5)
    result = collect(handle, state, reason, 2)
    assert result.ok, result.reason
    assert result.summary["hosts"] == sorted(hosts.ips)
    assert live == {r["rank"]: r["slot"]["cpus"] for r in result.summary["per_rank"]}
    assert all(len(r["slot"]["cpus"]) == 1 for r in result.summary["per_rank"])
    assert result.summary["backend"] == backend and result.summary["contention"] == ""
    ckpt = result.summary["checkpoint"]  # each host's rank wrote its shard and read the other's back
    assert ckpt["status"] == "done" and ckpt["ranks"] == 2 and ckpt["bytes"] == 2 << 20, ckpt
    assert sorted(r["host"] for r in ckpt["per_rank"]) == sorted(hosts.ips) and ckpt["cleanup"]["left"] == []
    assert list((tmp_path / "store").iterdir()) == []


@pytest.mark.parametrize("backend", ["horovod", "ddp"])
def test_a_scale_smaller_than_the_hosts_slots_runs_only_its_ranks(hosts, tmp_path, datasets, backend):
    # the 1-GPU baseline of a sweep over two hosts: Horovod's planner alone started a rank on every slot
    launcher = build_launcher("ssh", ssh=hosts.options())
    s = spec(hosts, tmp_path, datasets, backend=backend, ranks=1, checkpoint=CHECKPOINT, checkpoint_dir=tmp_path)
    handle = launcher.submit(s)
    state, reason = wait(launcher, handle, 240, 0.5)
    result = collect(handle, state, reason, 1)
    assert result.ok, result.reason
    assert result.summary["ranks"] == 1 and result.summary["hosts"] == [hosts.ip(0)]
    assert result.summary["checkpoint"]["status"] == "done" and result.summary["checkpoint"]["ranks"] == 1
    assert sorted(p.name for p in (s.output_dir / "ranks").glob("rank*.json")) == ["rank0.json"]


def test_unreachable_host_named_before_launch(hosts, tmp_path, datasets):
    nobody = hosts.ip(89)  # .99 of the hosts' own /24: no host answers there
    bad = (HostSlots(host=hosts.ip(0)), HostSlots(host=nobody))
    launcher = build_launcher("ssh", ssh=hosts.options(connect_timeout_s=2))
    with pytest.raises(LaunchError, match=rf"host {re.escape(nobody)}"):
        launcher.submit(spec(hosts, tmp_path, datasets, bad))
    assert not (tmp_path / "run" / "spec.json").exists()


def test_wrong_key_and_host_key_mismatch(hosts, tmp_path, datasets):
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    with pytest.raises(LaunchError, match=rf"host {hosts.ip(0)}.*(Permission denied|publickey)"):
        hosts.options(key_file=other).check_reachable((HostSlots(host=hosts.ip(0)),))
    wrong_known = tmp_path / "known_hosts"
    fake = (tmp_path / "other_key.pub").read_text().split()
    wrong_known.write_text(f"{hosts.ip(0)} {fake[0]} {fake[1]}\n")
    with pytest.raises(LaunchError, match=rf"host {hosts.ip(0)}.*(Host key verification failed|REMOTE HOST)"):
        hosts.options(known_hosts_file=wrong_known).check_reachable((HostSlots(host=hosts.ip(0)),))


def test_no_host_key_means_no_connection(hosts):
    opts = SshOptions(user="root", key_file=hosts.client_key, known_hosts_file=Path("/dev/null"))
    with pytest.raises(LaunchError, match="Host key verification failed"):
        opts.check_reachable((HostSlots(host=hosts.ip(1)),))


def test_a_sigkilled_supervisor_leaves_no_remote_rank(hosts, tmp_path, datasets):
    import os
    import signal

    from bench.launch.base import RunState
    from tests.infra.faults import train_pids, wait_for

    s = spec(hosts, tmp_path, datasets).model_copy(
        update={
            "run_id": "sshorphan",
            "train": spec(hosts, tmp_path, datasets).train.model_copy(update={"steps": 5000}),
        }
    )
    launcher = build_launcher("ssh", ssh=hosts.options())
    handle = launcher.submit(s)
    wait_for(lambda: len(train_pids(s.output_dir)) == 2, 120)  # namespaces share /proc: remote ranks are visible
    os.kill(int(handle["job_id"]), signal.SIGKILL)
    assert wait_for(lambda: not train_pids(s.output_dir), 60)
    assert launcher.poll(handle)[0] == RunState.FAILED


def test_duplicate_hosts_are_refused(hosts):
    from bench.config.models import SweepConfig
    from bench.config.types import parse
    from bench.errors import ConfigError

    with pytest.raises(ConfigError, match=r"hosts: host n1 is listed twice"):
        parse(
            SweepConfig,
            {
                "launcher": "ssh",
                "hosts": ["n1:2", "n1:2"],
                "dataset_path": "/d",
                "output_dir": "/o",
                "train": {"workload": "ssd", "steps": 2, "data": "/d"},
            },
        )
