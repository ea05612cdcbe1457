"""Issue 61, items 1 and 2, on the launchers themselves: what a run's processes got of the worker.

The worker here is as the issue found it: secrets in its environment (an Airflow JWT secret, a
connection's URL) and a `bench/` package planted in its working folder. Each launcher (local, ssh over
the session's sshd hosts, Slurm on a real cluster) runs idle ranks; the test reads each process's own
/proc/<pid>/environ, cwd and command line (the namespaced hosts and slurmd share this /proc) while
they train. And a rendezvous log swapped for a link while an ssh rendezvous fails must not put the
link's target into the run's reason.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from bench.config.models import HostSlots, RunSpec, TrainConfig
from bench.launch.base import RunState, collect, wait
from bench.launch.registry import build_launcher
from bench.safe_fs import REASON_CHARS
from tests.bench.launch.conftest import idle
from tests.bench.launch.hostile_outputs import worker_secret
from tests.infra.faults import any_pids, train_pids, wait_for
from tests.infra.slurm_cluster import SlurmCluster

pytestmark = pytest.mark.slow

FAKE_SECRETS = {
    "AIRFLOW__API_AUTH__JWT_SECRET": "jwt-S3CRET-4f2a",
    "AIRFLOW_CONN_SCALEWATCH_RESULTS": "postgresql://scalewatch:S3CRET-pw@db.internal/results",
}


@pytest.fixture
def hostile_worker(tmp_path, monkeypatch) -> Path:
    """Secrets in this worker's environment and a `bench/` package in its working folder; the marker file
    the planted package writes if anything imports it."""
    for name, value in FAKE_SECRETS.items():
        monkeypatch.setenv(name, value)
    marker = tmp_path / "planted-bench-was-imported"
    package = tmp_path / "cwd" / "bench"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f"open({str(marker)!r}, 'a').write('imported')\nraise SystemExit(97)\n")
    monkeypatch.chdir(package.parent)
    return marker


def idle_train(records: Path) -> TrainConfig:
    return TrainConfig(**idle(records), batch_size=4, sample_interval_s=0.2)


def facts(pid: int) -> tuple[bytes, str, bytes] | None:
    """(environ, cwd, cmdline) of a live process, None once it is gone."""
    try:
        proc = Path(f"/proc/{pid}")
        return (proc / "environ").read_bytes(), os.readlink(proc / "cwd"), (proc / "cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return None


def assert_clean(pids: list[int]) -> None:
    """Each process: no worker secret and no AIRFLOW* name in its environment, `/` as its working folder,
    and started with -P (no working folder on sys.path)."""
    seen = [(pid, f) for pid in pids if (f := facts(pid)) is not None]
    assert seen, "no process of the run to read"
    for pid, (environ, cwd, cmdline) in seen:
        names = [e.split(b"=", 1)[0].decode() for e in environ.split(b"\0") if e]
        assert b"S3CRET" not in environ, (pid, cmdline)
        assert not [n for n in names if n.startswith("AIRFLOW")], (pid, cmdline, names)
        assert cwd == "/", (pid, cmdline, cwd)
        assert b"\0-P\0" in cmdline, (pid, cmdline)


def training(launcher, handle: dict, out: Path, marker: Path, ranks: int = 2, timeout: float = 180) -> None:
    """Wait until `ranks` ranks train; a planted package imported, or the run ending first, fails at once."""
    wait_for(
        lambda: marker.exists() or launcher.poll(handle)[0].finished or len(train_pids(out)) == ranks,
        timeout,
        what=f"{ranks} training ranks",
    )
    assert not marker.exists(), "the `bench/` package planted in the working folder was imported"
    assert len(train_pids(out)) == ranks, launcher.poll(handle)


def run_pids(handle: dict, out: Path, extra: tuple[bytes, ...] = ()) -> list[int]:
    """The run's rank wrappers and training processes (and any `extra` command line pattern's)."""
    patterns = (f"bench.launch.rank\0--tag\0{handle['run_id']}".encode(), *extra)
    return [*(pid for p in patterns for pid in any_pids(p)), *train_pids(out)]


def test_local_run_processes_get_no_worker_secret_and_start_from_root(hostile_worker, tmp_path, records):
    launcher = build_launcher("local")
    s = RunSpec(run_id="locsecret", train=idle_train(records), ranks=2, output_dir=tmp_path / "run")
    handle = launcher.submit(s)
    try:
        training(launcher, handle, s.output_dir, hostile_worker)
        assert_clean([int(handle["job_id"]), *run_pids(handle, s.output_dir)])  # the supervisor too
    finally:
        launcher.cancel(handle)


def ssh_spec(hosts, tmp_path: Path, train: TrainConfig, run_id: str, **over) -> RunSpec:
    return RunSpec(
        run_id=run_id,
        train=train,
        ranks=2,
        output_dir=tmp_path / "run",
        python=over.pop("python", Path(sys.executable)),
        hosts=(HostSlots(host=hosts.ip(0)), HostSlots(host=hosts.ip(1))),
        rendezvous_addr=hosts.gateway,
        env={"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {},
        **over,
    )


def test_ssh_run_processes_get_no_worker_secret_and_start_from_root(hostile_worker, ssh_hosts, tmp_path, records):
    launcher = build_launcher("ssh", ssh=ssh_hosts.options())
    s = ssh_spec(ssh_hosts, tmp_path, idle_train(records), "sshsecret")
    handle = launcher.submit(s)
    try:
        training(launcher, handle, s.output_dir, hostile_worker)
        # the supervisor here; the rank wrappers and training processes on the hosts (this /proc shows them)
        assert_clean([int(handle["job_id"]), *run_pids(handle, s.output_dir)])
    finally:
        launcher.cancel(handle)


def gated_python(folder: Path, gate: Path, before: str = "") -> Path:
    """An interpreter that waits for `gate` to exist (then runs `before`, a shell line) before it starts:
    the test swaps the rendezvous's log while the rendezvous waits here."""
    script = folder / "gated-python"
    script.write_text(f'#!/bin/sh\nwhile [ ! -e {gate} ]; do sleep 0.05; done\n{before}\nexec {sys.executable} "$@"\n')
    script.chmod(0o755)
    return script


def failed_rendezvous(ssh_hosts, tmp_path: Path, records: Path, python: Path, swap) -> tuple[str, str]:
    """Run an ssh run whose rendezvous (on host 0) fails: an interface no host has. `swap(log)` runs once
    the supervisor opened logs/rendezvous.log, before the rendezvous writes its error. (reason, state file)."""
    launcher = build_launcher("ssh", ssh=ssh_hosts.options())
    s = ssh_spec(ssh_hosts, tmp_path, idle_train(records), "sshrdvlog", python=python, rendezvous_interface="bogus0")
    log = s.output_dir / "logs" / "rendezvous.log"
    handle = launcher.submit(s)
    wait_for(log.exists, 60, what="the rendezvous's log")
    swap(log)
    (tmp_path / "gate").touch()
    state, reason = wait(launcher, handle, 120)
    result = collect(handle, state, reason, 2)
    assert result.state == RunState.FAILED and "rendezvous on" in result.reason, result.reason
    return result.reason, (s.output_dir / "state.json").read_text()


@pytest.mark.parametrize("target", ["worker secret", "/proc/self/environ"])
def test_a_rendezvous_log_swapped_for_a_link_is_never_read_into_the_reason(
    hostile_worker, ssh_hosts, tmp_path, records, target
):
    linked = worker_secret(tmp_path) if target == "worker secret" else Path(target)

    def swap(log: Path) -> None:
        (log.parent / "swap").symlink_to(linked)
        os.replace(log.parent / "swap", log)

    python = gated_python(tmp_path, tmp_path / "gate")
    reason, state_file = failed_rendezvous(ssh_hosts, tmp_path, records, python, swap)
    for text in (reason, state_file):
        assert "S3CRET" not in text and "AIRFLOW" not in text, text
    assert "its log not read" in reason and "is a symbolic link" in reason and len(reason) <= REASON_CHARS


def test_a_rendezvous_failing_with_a_huge_line_gives_a_bounded_printable_reason(ssh_hosts, tmp_path, records):
    noise = "printf 'boom\\033[2J\\t%s\\n' \"$(head -c 2000 /dev/zero | tr '\\0' x)\" >&2; exit 3"
    python = gated_python(tmp_path, tmp_path / "gate", before=noise)
    reason, _ = failed_rendezvous(ssh_hosts, tmp_path, records, python, lambda log: None)
    assert "did not start: boom [2J xxx" in reason and reason.endswith("...")
    assert len(reason) <= REASON_CHARS and reason.isprintable()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = SlurmCluster(tmp_path_factory.mktemp("slurm-secrets")).start()
    yield c
    c.stop()


def test_slurm_job_processes_get_no_worker_secret_and_start_from_root(hostile_worker, cluster, tmp_path, records):
    """The job is submitted from the folder holding the planted package: the batch script and srun start
    from `/`, with --export=NONE and the allow-list, so neither the package nor the secrets reach a rank."""
    launcher = build_launcher("slurm", slurm_env=cluster.env)
    s = RunSpec(
        run_id="slsecret",
        train=idle_train(records),
        ranks=2,
        ranks_per_node=1,
        partition="test",
        output_dir=tmp_path / "run",
        python=Path(sys.executable),
    )
    handle = launcher.submit(s)
    try:
        training(launcher, handle, s.output_dir, hostile_worker)
        rendezvous = f"bench.launch.rendezvous\0--port-file\0{s.output_dir / 'rendezvous.addr'}".encode()
        assert_clean(run_pids(handle, s.output_dir, (rendezvous,)))
    finally:
        launcher.cancel(handle)
        wait_for(lambda: not cluster.queue(), 60, what="an empty queue")
