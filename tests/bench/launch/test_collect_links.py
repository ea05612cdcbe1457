"""Results a cluster sends back, and the output folder they land in, are read without following links.

Issue 37, item 3: a cluster-side `logs/rank1.log -> a file on the worker` came back as a link (the
fetch ran `tar -xf`), and collecting followed it; a link to /dev/zero, or a FIFO, hung the worker.
Real files, links, FIFOs and tar streams; the fetch runs over a real sshd on the loopback.
"""

from __future__ import annotations

import io
import json
import socket
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from bench.errors import LaunchError
from bench.launch import slurm
from bench.launch.base import RunState, collect, log_tail
from bench.launch.commands import CommandRunner
from bench.launch.slurm import SlurmLauncher, extract_results
from bench.launch.sshopts import SshOptions, known_hosts_line
from tests.bench.launch.hostile_outputs import PLANTED, handle_for, memory_bound, plant, run_folder, worker_secret


def test_collect_reads_no_record_and_lists_no_log_through_a_link(tmp_path):
    secret = worker_secret(tmp_path)
    out = run_folder(tmp_path / "run")
    for name in ("ranks/rank1.json", "logs/rank1.log"):
        plant(out / name, "secret", secret)
    result = collect(handle_for(out), RunState.COMPLETED, "slurm COMPLETED", 2)
    assert "S3CRET" not in json.dumps(result.as_dict())
    assert result.state == RunState.FAILED and "rank 1 on ? exit None" in result.reason
    assert result.log_paths == [str(out / "logs" / "rank0.log")]


@pytest.mark.timeout(30)
def test_collect_never_blocks_on_a_fifo_or_reads_dev_zero(tmp_path):
    out = run_folder(tmp_path / "run")
    plant(out / "ranks" / "rank0.json", "fifo", Path())  # no writer: a blocking open would wait forever
    plant(out / "metrics" / "summary.json", "/dev/zero", Path())  # a read of it never ends
    plant(out / "logs" / "rank2.log", "fifo", Path())
    with memory_bound():
        result = collect(handle_for(out), RunState.COMPLETED, "slurm COMPLETED", 2)
    assert result.state == RunState.FAILED and result.summary is None
    assert result.exit_codes[0] is None and "summary.json missing" in result.reason
    assert result.log_paths == [str(out / "logs" / f"rank{r}.log") for r in (0, 1)]


def bytes_read_by_this_process() -> int:
    """rchar: every byte this process has read with read()/pread(), from the kernel's own count."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


@pytest.mark.timeout(30)
def test_log_tail_reads_only_a_bounded_end_of_a_huge_log(tmp_path):
    out = run_folder(tmp_path / "run")
    with (out / "logs" / "rank0.log").open("a") as f:
        f.write("x" * (32 << 20) + "\n" + "".join(f"late line {i}\n" for i in range(30)))
    before = bytes_read_by_this_process()
    tail = log_tail(out, out / "logs" / "rank0.log")
    assert bytes_read_by_this_process() - before < (256 << 10)  # of a 32 MiB log
    assert tail.splitlines() == [f"late line {i}" for i in range(10, 30)]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("planted", PLANTED)
def test_log_tail_names_a_log_it_will_not_read_and_never_blocks(tmp_path, planted):
    out = run_folder(tmp_path / "run")
    log = out / "logs" / "rank1.log"
    plant(log, planted, worker_secret(tmp_path))
    kind = "is not a regular file" if planted == "fifo" else "is a symbolic link"
    with memory_bound():
        shown = log_tail(out, log)
    assert shown.startswith(f"(not shown: {log}: {kind}") and "S3CRET" not in shown


def real_tar(root: Path, *names: str) -> bytes:
    """The archive the cluster side sends: GNU tar of the output folder, as the fetch runs it remotely."""
    return subprocess.run(["tar", "-C", str(root), "-cf", "-", *names], capture_output=True, check=True).stdout


def crafted_tar(members: dict[str, bytes]) -> bytes:
    """A real tar archive with names GNU tar would not write (absolute, '..'), as a hostile sender could."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def nothing_unsafe_under(root: Path) -> bool:
    """No link or FIFO landed, and no file there holds the secret."""
    for path in root.rglob("*"):
        if path.is_symlink() or not (path.is_dir() or path.is_file()):
            return False
        if path.is_file() and b"S3CRET" in path.read_bytes():
            return False
    return True


@pytest.mark.timeout(30)
@pytest.mark.parametrize("planted", PLANTED)
def test_extract_refuses_a_link_or_fifo_member_naming_it(tmp_path, planted):
    out = run_folder(tmp_path / "cluster")
    plant(out / "logs" / "rank1.log", planted, worker_secret(tmp_path))
    dest = tmp_path / "dest"
    dest.mkdir()
    kind = "FIFO" if planted == "fifo" else "symbolic link"
    with pytest.raises(LaunchError, match=rf"member 'logs/rank1.log': is a {kind}; only regular files and folders"):
        extract_results(io.BytesIO(real_tar(out, "ranks", "metrics", "logs")), dest)
    assert nothing_unsafe_under(dest)


def test_extract_unpacks_a_regular_tree_whole(tmp_path):
    out = run_folder(tmp_path / "cluster")
    dest = tmp_path / "dest"
    dest.mkdir()
    stream = io.BytesIO(real_tar(out, "ranks", "metrics", "logs"))
    extract_results(stream, dest)
    assert stream.read() == b""  # the record padding after the archive's end was read, too
    sent = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*")) == sent
    assert all((dest / rel).read_bytes() == (out / rel).read_bytes() for rel in sent if (out / rel).is_file())


@pytest.mark.parametrize("name", ["/etc/scalewatch.json", "logs/../../escaped.txt", "elsewhere/x.txt"])
def test_extract_refuses_a_member_outside_the_results_naming_it(tmp_path, name):
    dest = tmp_path / "dest" / "inner"
    dest.mkdir(parents=True)
    with pytest.raises(LaunchError, match=rf"member '{name}': not a path under ranks, metrics, logs"):
        extract_results(io.BytesIO(crafted_tar({"logs/ok.log": b"fine", name: b"payload"})), dest)
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and p.read_bytes() == b"payload"]


def test_extract_refuses_an_archive_over_the_size_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(slurm, "FETCH_MAX_BYTES", 3000)
    dest = tmp_path / "dest"
    dest.mkdir()
    members = {"logs/rank0.log": b"a" * 2000, "logs/rank1.log": b"b" * 2000}
    with pytest.raises(LaunchError, match=r"member 'logs/rank1.log': the archive exceeds 3000 bytes"):
        extract_results(io.BytesIO(crafted_tar(members)), dest)
    assert not (dest / "logs" / "rank1.log").exists()


@pytest.fixture(scope="module")
def loopback_sshd(tmp_path_factory):
    """A real sshd on 127.0.0.1 (a free port), standing in for a cluster's login node; no network set up."""
    root = tmp_path_factory.mktemp("sshd")
    for key in ("client", "host"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / key)], check=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conf = root / "sshd_config"
    conf.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {root / 'host'}\nPidFile {root / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {root / 'client.pub'}\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nStrictModes no\nUsePAM no\n"
    )
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    sshd = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(conf)], stderr=(root / "sshd.log").open("w"))
    known = root / "known_hosts"
    known.write_text(known_hosts_line("127.0.0.1", port, " ".join((root / "host.pub").read_text().split()[:2])))
    options = SshOptions(user="root", key_file=root / "client", known_hosts_file=known, port=port)
    try:
        deadline = time.monotonic() + 30
        while subprocess.run(options.argv("127.0.0.1", "true"), capture_output=True).returncode != 0:
            assert time.monotonic() < deadline, (root / "sshd.log").read_text()
            time.sleep(0.2)
        yield options
    finally:
        sshd.terminate()
        sshd.wait(10)


def fetch_over_ssh(options: SshOptions, cluster: Path, worker: Path) -> None:
    launcher = SlurmLauncher(CommandRunner(options, "127.0.0.1"))
    launcher.fetch(handle_for(cluster), worker)


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("planted", PLANTED)
def test_a_fetch_refuses_a_cluster_side_link_or_fifo_and_collecting_shows_no_secret(loopback_sshd, tmp_path, planted):
    secret = worker_secret(tmp_path)
    cluster, worker = run_folder(tmp_path / "cluster"), tmp_path / "worker-run"
    plant(cluster / "logs" / "rank1.log", planted, secret)
    kind = "FIFO" if planted == "fifo" else "symbolic link"
    with pytest.raises(LaunchError, match=rf"fetching {cluster} from 127.0.0.1 failed .*'logs/rank1.log': is a {kind}"):
        fetch_over_ssh(loopback_sshd, cluster, worker)
    assert nothing_unsafe_under(worker)
    with memory_bound():
        result = collect(handle_for(worker), RunState.COMPLETED, "slurm COMPLETED", 2)
        tails = [log_tail(worker, path) for path in result.log_paths]
    assert result.state == RunState.FAILED and "S3CRET" not in json.dumps(result.as_dict()) + "".join(tails)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_fetch_of_regular_results_brings_them_back_whole(loopback_sshd, tmp_path):
    cluster, worker = run_folder(tmp_path / "cluster"), tmp_path / "worker-run"
    fetch_over_ssh(loopback_sshd, cluster, worker)
    result = collect(handle_for(worker), RunState.COMPLETED, "slurm COMPLETED", 2)
    assert result.ok, result.reason
    assert [Path(p).name for p in result.log_paths] == ["rank0.log", "rank1.log"]
    assert log_tail(worker, result.log_paths[1]).splitlines()[-1] == "rank 1 step 49"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_fetch_the_login_node_refuses_fails_naming_why_and_drops_the_earlier_copy(loopback_sshd, tmp_path):
    cluster = run_folder(tmp_path / "cluster")
    worker = run_folder(tmp_path / "worker-run")  # what an earlier attempt fetched: must not pass for this one
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    with pytest.raises(LaunchError, match=rf"fetching {cluster} from 127.0.0.1 failed .*Permission denied"):
        fetch_over_ssh(loopback_sshd.model_copy(update={"key_file": other}), cluster, worker)
    assert not (worker / "metrics").exists() and not (worker / "ranks").exists()
