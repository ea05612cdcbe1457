"""Who can join a run: the rendezvous listens on one address, admits only holders of the run's secret,
bounds what it holds, and no rank unpickles what a peer sends (review round 3, item 1).

Real servers, real ranks and real sockets throughout: an outsider is a process that knows the port."""

import os
import socket
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from datetime import timedelta
from pathlib import Path

import psutil
import pytest

from bench.config.models import HostSlots, RunSpec, TrainConfig
from bench.launch.base import collect, wait
from bench.launch.registry import build_launcher
from bench.launch.rendezvous import start_rendezvous
from bench.train.dist.store import MAX_KEY, MAX_VALUE, SECRET_ENV, StoreError, StoreServer, connect, new_secret
from tests.infra.faults import slots_while_training


def test_the_store_admits_only_the_secret_and_bounds_keys_and_values():
    secret = new_secret()
    server = StoreServer("127.0.0.1", secret)
    try:
        with pytest.raises(StoreError, match="refused"):
            connect("127.0.0.1", server.port, new_secret(), timedelta(seconds=5))
        store = connect("127.0.0.1", server.port, secret, timedelta(seconds=5))
        store.set("k", b"v")
        assert store.get("k") == b"v" and store.add("n", 2) == 2 and store.add("n", 3) == 5
        with pytest.raises(StoreError, match="limit"):
            store.set("big", b"x" * (MAX_VALUE + 1))
        with pytest.raises(StoreError, match="limit"):
            store.set("k" * (MAX_KEY + 1), b"v")
        # a raw peer that announces a huge frame before authenticating is dropped unread
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
            raw.recv(4096)  # the challenge
            raw.sendall((1 << 30).to_bytes(4, "big"))
            assert raw.recv(4096) == b""  # closed by the server
        assert store.get("k") == b"v"  # the run's own connection is unaffected
    finally:
        server.stop()


def test_a_torch_tcpstore_client_without_the_secret_gets_nothing():
    """The attack as reproduced: torch's own TCPStore client pointed at the run's port as RANK=1."""
    from torch.distributed import TCPStore

    secret = new_secret()
    server = StoreServer("127.0.0.1", secret)
    try:
        with pytest.raises(Exception):  # noqa: B017 - whatever torch raises, it must not get in
            intruder = TCPStore("127.0.0.1", server.port, is_master=False, timeout=timedelta(seconds=5))
            intruder.set("rank1", b"payload")
        store = connect("127.0.0.1", server.port, secret, timedelta(seconds=5))
        assert not store.check(["rank1"]) and store.num_keys() == 0
    finally:
        server.stop()


def test_horovod_rendezvous_answers_only_urls_with_the_run_token():
    from bench.train.dist.store import horovod_url_addr

    secret = new_secret()
    rdv = start_rendezvous("horovod", [("localhost", 1)], 1, "127.0.0.1", secret)
    try:
        assert rdv.listen_addr == "127.0.0.1"
        plain = f"http://127.0.0.1:{rdv.port}/global/0"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(plain, data=b"x", method="PUT"), timeout=5)
        assert refused.value.code == 403
        # HEAD, which Horovod's handler inherits from a file server, answers nothing (with the token or not)
        for url in (plain, f"http://{horovod_url_addr('127.0.0.1', rdv.port, secret)}:{rdv.port}/etc/passwd"):
            with pytest.raises(urllib.error.HTTPError) as head:
                urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=5)
            assert head.value.code == 403
        good = f"http://{horovod_url_addr('127.0.0.1', rdv.port, secret)}:{rdv.port}/global/0"
        urllib.request.urlopen(urllib.request.Request(good, data=b"x", method="PUT"), timeout=5)
        assert urllib.request.urlopen(good, timeout=5).read() == b"x"
        # a body over the bound is refused on its announced length, before a byte of it is read
        path = good.split(f":{rdv.port}", 1)[1]
        with socket.create_connection(("127.0.0.1", rdv.port), timeout=5) as raw:
            raw.sendall(f"PUT {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {MAX_VALUE + 1}\r\n\r\n".encode())
            assert raw.recv(4096).split(b"\r\n")[0].endswith(b"413 Request Entity Too Large")
    finally:
        rdv.stop()


_RANK = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    rank = int(os.environ["RANK"])
    if rank == 1:  # a peer that sends a pickle whose loading runs its code
        import torch.distributed as tdist
        from datetime import timedelta
        from bench.train.dist.store import SECRET_ENV, connect
        store = connect(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), os.environ[SECRET_ENV])
        tdist.init_process_group("gloo", store=store, rank=1, world_size=2, timeout=timedelta(seconds=60))

        class Evil:
            def __reduce__(self):
                return (Path.touch, (Path(sys.argv[1]),))

        tdist.all_gather_object([None, None], Evil())
    else:
        from bench.errors import RunFailed
        from bench.train.dist.ddp import DdpDist
        dist = DdpDist.start()
        try:
            print("gathered", dist.allgather({"rank": 0}))
        except RunFailed as error:
            print("refused", error)
    """
)


def test_a_peers_pickle_is_never_unpickled(tmp_path):
    """Rank 1 speaks all_gather_object (a length, then the bytes) with a pickle payload; rank 0's exchange
    reads JSON, so the bytes are refused as data and their code never runs."""
    secret = new_secret()
    server = StoreServer("127.0.0.1", secret)
    marker = tmp_path / "pwned"
    script = tmp_path / "rank.py"
    script.write_text(_RANK)
    env = os.environ | {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(server.port),
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "0",
        SECRET_ENV: secret,
    }
    try:
        procs = [
            subprocess.Popen(
                [sys.executable, str(script), str(marker)],
                env=env | {"RANK": str(r)},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for r in (0, 1)
        ]
        outs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        server.stop()
    assert not marker.exists(), "rank 0 ran the peer's code"
    assert "refused exchange: rank 1 sent" in outs[0] and "not JSON" in outs[0], outs[0]


def _spec(tmp_path, datasets, backend: str, **over) -> RunSpec:
    train = TrainConfig(
        workload="ssd", data=datasets["coco"], steps=over.pop("steps", 4), batch_size=4, sample_interval_s=0.2
    )
    train = train.model_copy(update={"backend": backend})
    return RunSpec(run_id="rdv", train=train, ranks=2, output_dir=tmp_path / "run", **over)


def _listening(pid: int) -> list[tuple[str, int]]:
    return [c.laddr[:2] for c in psutil.Process(pid).net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["horovod", "ddp"])
def test_a_local_run_listens_on_loopback_only_and_keeps_its_secret_off_command_lines(tmp_path, datasets, backend):
    launcher = build_launcher("local")
    s = _spec(tmp_path, datasets, backend, steps=30)
    handle = launcher.submit(s)
    slots_while_training(s.output_dir, 2)
    import json

    supervisor = json.loads((s.output_dir / "state.json").read_text())["pid"]
    listening = _listening(supervisor)
    ranks = psutil.Process(supervisor).children(recursive=True)
    secret = next(p.environ()[SECRET_ENV] for p in ranks if SECRET_ENV in p.environ())
    on_command_lines = [
        p.info["cmdline"] for p in psutil.process_iter(["cmdline"]) if secret in " ".join(p.info["cmdline"] or [])
    ]
    state, reason = wait(launcher, handle, 180, 0.3)
    result = collect(handle, state, reason, 2)
    assert result.ok, result.reason
    assert listening and all(ip == "127.0.0.1" for ip, _ in listening), listening
    assert len(secret) == 64 and on_command_lines == []
    rendezvous = result.summary["rendezvous"]
    assert rendezvous["host"] == "127.0.0.1" and (rendezvous["host"], rendezvous["port"]) in listening


@pytest.mark.slow
# horovod: the 2-rank scale of tests/dags/test_ssh_suite.py's DAG run asserts the same (the suite's
# `auto` backend), so only DDP's rendezvous is run here
@pytest.mark.parametrize("backend", ["ddp"])
def test_an_ssh_run_meets_on_the_address_the_hosts_reach_with_no_address_given(ssh_hosts, tmp_path, datasets, backend):
    """A suite file names hosts, not a rendezvous address (the field is test-only): the ranks must still
    meet. Before, they were handed 127.0.0.1 and every scale failed, the 1-rank one too."""
    launcher = build_launcher("ssh", ssh=ssh_hosts.options())
    s = _ssh_spec(ssh_hosts, tmp_path, datasets, backend)
    handle = launcher.submit(s)
    state, reason = wait(launcher, handle, 240, 0.5)
    result = collect(handle, state, reason, 2)
    assert result.ok, result.reason
    assert result.summary["hosts"] == sorted(ssh_hosts.ips)
    # on the first rank's host, on its address toward the other host (not the launcher's, not loopback)
    assert result.summary["rendezvous"]["host"] == ssh_hosts.ip(0)
    assert result.summary["rendezvous"]["interface"]  # the ranks' interface toward it, recorded


def _ssh_spec(ssh_hosts, tmp_path, datasets, backend: str, **over) -> RunSpec:
    return _spec(
        tmp_path,
        datasets,
        backend,
        python=Path(sys.executable),
        hosts=(HostSlots(host=ssh_hosts.ip(0)), HostSlots(host=ssh_hosts.ip(1))),
        env={"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {},
        **over,
    )


@pytest.mark.slow
def test_a_rendezvous_interface_missing_on_the_first_host_fails_before_any_rank_naming_its_interfaces(
    ssh_hosts, tmp_path, datasets
):
    launcher = build_launcher("ssh", ssh=ssh_hosts.options())
    s = _ssh_spec(ssh_hosts, tmp_path, datasets, "ddp", rendezvous_interface="ib0")
    handle = launcher.submit(s)
    state, reason = wait(launcher, handle, 120, 0.5)
    result = collect(handle, state, reason, 2)
    assert not result.ok
    assert "'ib0' has no IPv4 address on host0" in result.reason and "eth0" in result.reason, result.reason
    assert not list((s.output_dir / "ranks").glob("rank*.json"))  # no rank was started


@pytest.mark.slow
def test_a_host_that_cannot_reach_the_first_host_is_named_before_training(ssh_hosts, tmp_path, datasets):
    from tests.infra.ssh_hosts import sh

    ns = f"{ssh_hosts.prefix}1"
    sh("ip", "netns", "exec", ns, "ip", "route", "add", "blackhole", f"{ssh_hosts.ip(0)}/32")
    try:
        launcher = build_launcher("ssh", ssh=ssh_hosts.options())
        s = _ssh_spec(ssh_hosts, tmp_path, datasets, "horovod")
        handle = launcher.submit(s)
        state, reason = wait(launcher, handle, 120, 0.5)
        result = collect(handle, state, reason, 2)
    finally:
        sh("ip", "netns", "exec", ns, "ip", "route", "del", "blackhole", f"{ssh_hosts.ip(0)}/32", check=False)
    assert not result.ok
    assert f"hosts cannot reach the rendezvous at {ssh_hosts.ip(0)}:" in result.reason, result.reason
    assert ssh_hosts.ip(1) in result.reason.split("rendezvous at")[1]
    assert not list((s.output_dir / "ranks").glob("rank*.json"))
