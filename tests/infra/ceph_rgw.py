"""A real S3 server for tests: Debian's Ceph 16 as a one-node cluster (mon, one BlueStore OSD on a loop
device of its own, radosgw with beast on 127.0.0.1), in a private folder, on private ports.

Why a real server and a loop device: the suite's S3 figures are judged against what the store served,
and only a real store has a device a blkio throttle can hold (a mock serves from memory at any rate).
The OSD's device is a loop device of its own, so a throttle on it holds the OSD's reads and writes and
nothing else on the machine. Recipe and timings: ../shared/FEASIBILITY.md, "S3 object storage"
(`paxos propose interval` 0.05 and the RGW pools created while the OSD boots: ~7 s to a first PUT).

Stop: SIGKILL radosgw, the OSD, then the mon (radosgw takes 6-10 s on SIGTERM; the OSD goes before the
mon it reports to); any throttle line on the device is reset to 0 before the loop device is detached
(loop numbers are machine-wide: a line left behind would throttle the next user of that number).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

BLKIO = Path("/sys/fs/cgroup/blkio")
RGW_POOLS = (
    ".rgw.root",
    "default.rgw.control",
    "default.rgw.meta",
    "default.rgw.log",
    "default.rgw.buckets.index",
    "default.rgw.buckets.data",
    "default.rgw.buckets.non-ec",
)
RGW_NAME = "client.rgw.test"
USER = "scalewatch-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ceph_env() -> dict[str, str]:
    """The ceph tools are /usr/bin/python3 scripts (python3-rados): no venv's PYTHONPATH reaches them."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin"
    return env


@dataclass
class CephRgw:
    """One running cluster: `endpoint`, the S3 user's keys, and the OSD's loop `device` (for throttles)."""

    root: Path
    image_mb: int = 6144
    endpoint: str = ""
    access_key: str = ""
    secret_key: str = ""
    device: str = ""
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "ceph.conf"

    @property
    def keyring(self) -> Path:
        return self.root / "keyring"

    def env(self) -> dict[str, str]:
        """The standard AWS variables a client of this server reads (what `bench` takes outside Airflow)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def node_home(self, home: Path) -> Path:
        """A HOME whose ~/.aws/credentials hold this cluster's user's keys and no endpoint: a node's own
        credentials, as the ranks and node probes read them (the worker's keys never travel)."""
        env = self.env()
        (home / ".aws").mkdir(parents=True, exist_ok=True)
        (home / ".aws" / "credentials").write_text(
            f"[default]\naws_access_key_id = {env['AWS_ACCESS_KEY_ID']}\n"
            f"aws_secret_access_key = {env['AWS_SECRET_ACCESS_KEY']}\n"
        )
        return home

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """A ceph tool against this cluster, as client.admin."""
        cmd = [args[0], "-c", str(self.conf), *args[1:]]
        done = subprocess.run(cmd, capture_output=True, text=True, env=_ceph_env(), timeout=120)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: exit {done.returncode}: {done.stderr.strip()[-800:]}")
        return done

    def write_conf(self, mon_v2: int, mon_v1: int, rgw_port: int) -> None:
        r = self.root
        fsid = str(uuid.uuid4())
        self.fsid = fsid
        lines = [
            "[global]",
            f"fsid = {fsid}",
            f"mon host = [v2:127.0.0.1:{mon_v2},v1:127.0.0.1:{mon_v1}]",
            "mon initial members = a",
            "public addr = 127.0.0.1",
            "cluster addr = 127.0.0.1",
            "ms bind ipv6 = false",
            f"keyring = {self.keyring}",
            f"run dir = {r}/run",
            f"admin socket = {r}/run/$name.asok",
            f"pid file = {r}/run/$name.pid",
            f"log file = {r}/log/$name.log",
            "auth cluster required = cephx",
            "auth service required = cephx",
            "auth client required = cephx",
            "osd pool default size = 1",
            "osd pool default min size = 1",
            "osd pool default pg num = 8",
            "osd pool default pgp num = 8",
            "mon allow pool size one = true",
            "mon warn on pool no redundancy = false",
            "mon mgr mkfs grace = 86400",
            "osd crush chooseleaf type = 0",
            "paxos propose interval = 0.05",
            "osd memory target = 1073741824",
            "[mon.a]",
            f"mon data = {r}/mon",
            "[osd.0]",
            f"osd data = {r}/osd",
            "osd objectstore = bluestore",
            # no data cache in the OSD: a GET of an object read before reads the device again, so a blkio
            # throttle on it holds every scale's reads, as a store without a cache would (BlueStore keeps
            # read data in its buffer cache by default; the tests' datasets fit it)
            "bluestore default buffered read = false",
            f"bluestore block path = {self.device}",
            "[client.rgw.test]",
            f"rgw frontends = beast endpoint=127.0.0.1:{rgw_port}",
            f"rgw data = {r}/rgw",
            "rgw enable usage log = true",
            "rgw usage log tick interval = 1",
            "rgw usage log flush threshold = 1",
            "rgw thread pool size = 64",
        ]
        self.conf.write_text("\n".join(lines) + "\n")
        for d in ("run", "log", "mon", "osd", "rgw"):
            (r / d).mkdir(exist_ok=True)

    def make_keyring(self) -> None:
        """One keyring with every entity's key and caps; the mon's mkfs imports it into its auth database."""
        entities = [
            ("mon.", ["mon", "allow *"]),
            ("client.admin", ["mon", "allow *", "osd", "allow *", "mds", "allow *", "mgr", "allow *"]),
            ("osd.0", ["mon", "allow profile osd", "mgr", "allow profile osd", "osd", "allow *"]),
            (RGW_NAME, ["mon", "allow rw", "osd", "allow rwx", "mgr", "allow rw"]),
        ]
        first = True
        for name, caps in entities:
            cmd = ["ceph-authtool", str(self.keyring), "--gen-key", "-n", name]
            if first:
                cmd.insert(2, "--create-keyring")
                first = False
            for i in range(0, len(caps), 2):
                cmd += ["--cap", caps[i], caps[i + 1]]
            subprocess.run(cmd, check=True, capture_output=True, env=_ceph_env())

    def start_daemon(self, name: str, *args: str) -> None:
        with open(self.root / "log" / f"{name}.out", "wb") as log:  # the daemon holds its own copy
            self.procs[name] = subprocess.Popen(
                [args[0], "-f", "-c", str(self.conf), *args[1:]],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_ceph_env(),
                start_new_session=True,
            )

    def start_mon(self, mon_v2: int, mon_v1: int) -> None:
        monmap = self.root / "monmap"
        addrs = f"[v2:127.0.0.1:{mon_v2},v1:127.0.0.1:{mon_v1}]"
        subprocess.run(
            ["monmaptool", "--create", "--fsid", self.fsid, "--addv", "a", addrs, str(monmap)],
            check=True,
            capture_output=True,
            env=_ceph_env(),
        )
        self.run("ceph-mon", "--mkfs", "-i", "a", "--monmap", str(monmap), "--keyring", str(self.keyring))
        self.start_daemon("mon", "ceph-mon", "-i", "a")

    def start_osd(self) -> list[subprocess.Popen]:
        """mkfs the OSD, register it, start it; returns the pool creations started meanwhile."""
        osd_uuid = str(uuid.uuid4())
        self.run("ceph-osd", "-i", "0", "--mkfs", "--osd-uuid", osd_uuid, "--no-mon-config")
        self.run("ceph", "osd", "new", osd_uuid, "0")
        pools = [
            subprocess.Popen(
                ["ceph", "-c", str(self.conf), "osd", "pool", "create", p, "8", "8"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=_ceph_env(),
            )
            for p in RGW_POOLS
        ]
        self.start_daemon("osd", "ceph-osd", "-i", "0")
        return pools

    def wait_pools(self, pools: list[subprocess.Popen]) -> None:
        for p, name in zip(pools, RGW_POOLS, strict=True):
            if p.wait(timeout=120) != 0:
                raise RuntimeError(f"pool {name}: {p.stderr.read().decode()[-500:]}")
        apps = [
            subprocess.Popen(
                ["ceph", "-c", str(self.conf), "osd", "pool", "application", "enable", p, "rgw"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=_ceph_env(),
            )
            for p in RGW_POOLS
        ]
        for p in apps:
            p.wait(timeout=120)

    def make_user(self) -> None:
        self.access_key = secrets.token_hex(10).upper()
        self.secret_key = secrets.token_urlsafe(30)
        self.run(
            "radosgw-admin",
            "user",
            "create",
            "--uid",
            USER,
            "--display-name",
            USER,
            "--access-key",
            self.access_key,
            "--secret-key",
            self.secret_key,
        )

    def wait_rgw(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.procs["rgw"].poll() is not None:
                raise RuntimeError(f"radosgw exited: {self.log_tail('client.rgw.test')}")
            try:
                urllib.request.urlopen(self.endpoint, timeout=2).read()
                return
            except urllib.error.HTTPError:
                return  # it answers (an anonymous request may be refused)
            except OSError:
                time.sleep(0.1)
        raise TimeoutError(f"radosgw did not answer within {timeout:g} s: {self.log_tail('client.rgw.test')}")

    def log_tail(self, name: str) -> str:
        path = self.root / "log" / f"{name}.log"
        return path.read_text(errors="replace")[-1500:] if path.exists() else "(no log)"

    def usage_bytes_sent(self) -> int:
        """The bytes RGW's usage log says it sent this cluster's user for object GETs (get_obj)."""
        import json

        self.run("radosgw-admin", "usage", "trim", "--uid", USER, "--end-date", "2000-01-01", check=False)
        doc = json.loads(self.run("radosgw-admin", "usage", "show", "--uid", USER, "--show-log-entries=false").stdout)
        total = 0
        for user in doc.get("summary", []):
            for cat in user.get("categories", []):
                if cat.get("category") == "get_obj":
                    total += int(cat.get("bytes_sent", 0))
        return total

    def usage_bytes_sent_settled(self, at_least: int, timeout: float = 30.0) -> int:
        """usage_bytes_sent once the usage log has flushed at least `at_least` (it ticks every second), or
        what it says at `timeout`."""
        import time

        deadline = time.monotonic() + timeout
        while True:
            sent = self.usage_bytes_sent()
            if sent >= at_least or time.monotonic() > deadline:
                return sent
            time.sleep(1.0)

    def stop(self) -> None:
        for name in ("rgw", "osd", "mon"):
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)


def device_numbers(device: str) -> str:
    """'MAJOR:MINOR' of a block device node (a throttle line's key)."""
    st = os.stat(device)
    return f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"


@contextlib.contextmanager
def osd_throttle(cluster: CephRgw, rate: int, direction: str = "read") -> Iterator[None]:
    """Caps the OSD's `direction` ("read" or "write") bytes/s on its loop device at `rate`. The line
    sits in the root blkio group: only the OSD does I/O on that device, so nothing else is held. BlueStore
    reads and writes with O_DIRECT, so every S3 GET and PUT meets the throttle (FEASIBILITY: 20 MiB/s ->
    20.9-21.0 MB/s of GETs). The line is reset to 0 on exit."""
    knob = BLKIO / f"blkio.throttle.{direction}_bps_device"
    key = device_numbers(cluster.device)
    knob.write_text(f"{key} {rate}\n")
    try:
        yield
    finally:
        knob.write_text(f"{key} 0\n")


def _attach_loop(image: Path, size_mb: int) -> str:
    with open(image, "wb") as f:
        f.truncate(size_mb << 20)
    made = subprocess.run(["losetup", "--find", "--show", "--direct-io=on", str(image)], capture_output=True, text=True)
    if made.returncode != 0:
        raise RuntimeError(f"cannot attach a loop device (needs root): {made.stderr.strip()}")
    return made.stdout.strip()


def _detach_loop(device: str) -> None:
    """Resets both throttle lines on the device (loop numbers are machine-wide), then detaches it."""
    key = device_numbers(device)
    for direction in ("read", "write"):
        knob = BLKIO / f"blkio.throttle.{direction}_bps_device"
        if knob.exists():
            with contextlib.suppress(OSError):
                knob.write_text(f"{key} 0\n")
    subprocess.run(["losetup", "--detach", device], capture_output=True)


@contextlib.contextmanager
def ceph_rgw(root: Path, image_mb: int = 6144) -> Iterator[CephRgw]:
    """A one-node Ceph with radosgw on 127.0.0.1, in `root` (made here); stopped, its loop device freed."""
    root.mkdir(parents=True, exist_ok=True)
    cluster = CephRgw(root=root, image_mb=image_mb)
    cluster.device = _attach_loop(root / "osd.img", image_mb)
    try:
        mon_v2, mon_v1, rgw_port = _free_port(), _free_port(), _free_port()
        cluster.endpoint = f"http://127.0.0.1:{rgw_port}"
        cluster.write_conf(mon_v2, mon_v1, rgw_port)
        cluster.make_keyring()
        cluster.start_mon(mon_v2, mon_v1)
        pools = cluster.start_osd()
        cluster.wait_pools(pools)
        cluster.make_user()
        cluster.start_daemon("rgw", "radosgw", "-n", RGW_NAME)
        cluster.wait_rgw()
        yield cluster
    finally:
        cluster.stop()
        _detach_loop(cluster.device)
        with contextlib.suppress(OSError):
            (root / "osd.img").unlink()
