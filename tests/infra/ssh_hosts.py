"""Real ssh hosts for tests: network namespaces on a bridge, each with its own IP and sshd.

Addresses are in a private /24 that exists only inside namespaces (and the bridge) made here. Each set of
hosts takes a bridge, a /24 and namespace names of its own (`swbr<n>`, 10.213.<n>.0/24, `<prefix><n>x<i>`:
the first n from 8 whose bridge and /24 are free), so two test sessions on one machine, or a test and a
benchmark, never tear down each other's hosts. A bridge whose owner process is gone is reclaimed.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench.analysis.cluster import rate_bytes_s
from bench.launch.sshopts import SshOptions, known_hosts_line

CHECKOUT = Path(__file__).resolve().parents[2]
NETWORKS = range(8, 250)  # 10.213.<n>.0/24 and bridge swbr<n> (10.213.7 was every session's before)
OWNER = "scalewatch-test-hosts"  # the bridge's alias: "<OWNER> <pid> <namespace prefix> <count>"


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _reclaim_orphans() -> None:
    """Bridges (and their namespaces) left by test processes that are gone: a killed session's."""
    for n in range(256):  # any bridge this module ever made, whatever range it took from then
        alias = Path(f"/sys/class/net/swbr{n}/ifalias")
        try:
            words = alias.read_text().split()
        except OSError:
            continue
        if len(words) == 4 and words[0] == OWNER and not _alive(int(words[1])):
            _remove(f"swbr{n}", words[2], int(words[3]))


def _remove(bridge: str, prefix: str, count: int) -> None:
    for i in range(count):
        sh("ip", "netns", "del", f"{prefix}{i}", check=False)
        sh("ip", "link", "del", f"{prefix}{i}h", check=False)
    sh("ip", "link", "del", bridge, check=False)


@dataclass
class SshHosts:
    root: Path
    count: int = 2
    prefix: str = "swns"  # the namespaces are f"{prefix}{i}"; start() makes it this session's own
    procs: list[subprocess.Popen] = field(default_factory=list)
    network: int | None = None  # n of 10.213.<n>.0/24 and swbr<n>, taken by start()

    @property
    def subnet(self) -> str:
        assert self.network is not None, "start() takes the hosts' network"
        return f"10.213.{self.network}"

    @property
    def bridge(self) -> str:
        return f"swbr{self.network}"

    @property
    def gateway(self) -> str:
        return f"{self.subnet}.1"

    def ip(self, i: int) -> str:
        return f"{self.subnet}.{10 + i}"

    def namespace(self, i: int) -> str:
        return f"{self.prefix}{i}"

    @property
    def ips(self) -> list[str]:
        return [self.ip(i) for i in range(self.count)]

    def _take_network(self) -> None:
        """The first free bridge name, taken atomically (`ip link add` fails on a name that exists)."""
        _reclaim_orphans()
        base = self.prefix
        for n in NETWORKS:
            if sh("ip", "-o", "addr", "show", "to", f"10.213.{n}.0/24").stdout.strip():
                continue  # the /24 is in use (hosts of another kind, or of code before this naming)
            if sh("ip", "link", "add", f"swbr{n}", "type", "bridge", check=False).returncode == 0:
                self.network, self.prefix = n, f"{base}{n}x"
                sh("ip", "link", "set", self.bridge, "alias", f"{OWNER} {os.getpid()} {self.prefix} {self.count}")
                return
        raise RuntimeError(f"no free bridge name swbr{NETWORKS[0]}-{NETWORKS[-1]} for test hosts")

    def start(self) -> SshHosts:
        self.root.mkdir(parents=True, exist_ok=True)
        self._take_network()
        try:
            return self._start()
        except BaseException:
            self.stop()  # a half-made set of hosts is not left behind for the session's life
            raise

    def _start(self) -> SshHosts:
        sh("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        self.client_key = self.root / "id_ed25519"
        if not self.client_key.exists():
            sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.client_key))
        authorized = self.root / "authorized_keys"
        authorized.write_text((self.root / "id_ed25519.pub").read_text())
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        known = []
        hosts_file = self.root / "hosts"
        hosts_file.write_text("127.0.0.1 localhost\n" + "".join(f"{self.ip(i)} host{i}\n" for i in range(self.count)))
        for i in range(self.count):
            ns = self.namespace(i)
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", f"{ns}h", "type", "veth", "peer", "name", f"{ns}c")
            sh("ip", "link", "set", f"{ns}c", "netns", ns)
            sh("ip", "link", "set", f"{ns}h", "master", self.bridge, "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", f"{ns}c", "name", "eth0")
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.ip(i)}/24", "dev", "eth0")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            host_key = self.root / f"host{i}_ed25519"
            if not host_key.exists():
                sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key))
            conf = self.root / f"sshd{i}.conf"
            conf.write_text(
                "\n".join(
                    [
                        "Port 22",
                        f"ListenAddress {self.ip(i)}",
                        f"HostKey {host_key}",
                        f"PidFile {self.root}/sshd{i}.pid",
                        f"AuthorizedKeysFile {authorized}",
                        "PermitRootLogin prohibit-password",
                        "PasswordAuthentication no",
                        "KbdInteractiveAuthentication no",
                        "StrictModes no",
                        "UsePAM no",
                        "PermitUserEnvironment no",
                        "MaxStartups 50",
                        "MaxSessions 50",
                        "Subsystem sftp /usr/lib/openssh/sftp-server",  # sshfs mounts (a network filesystem)
                        # this checkout importable on every host, as a cluster's nodes have the suite
                        # installed: runs that pass the nodes no env of theirs (the DAG's, `bench sweep`'s)
                        # would otherwise import whatever the venv's editable install points at
                        f"SetEnv PYTHONPATH={CHECKOUT}",
                    ]
                )
                + "\n"
            )
            self.procs.append(
                subprocess.Popen(
                    # Own hostname and /etc/hosts, as a real host has: Horovod 0.28's process-set Gloo
                    # context resolves the hostname and ignores HOROVOD_GLOO_IFACE.
                    [
                        "nsenter",
                        f"--net=/run/netns/{ns}",
                        "unshare",
                        "--uts",
                        "--mount",
                        "sh",
                        "-c",
                        f"hostname host{i} && mount --bind {hosts_file} /etc/hosts && "
                        f"exec /usr/sbin/sshd -D -e -f {conf}",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=(self.root / f"sshd{i}.log").open("w"),
                )
            )
            known.append(
                known_hosts_line(
                    self.ip(i),
                    22,
                    (self.root / f"host{i}_ed25519.pub").read_text().split(" ")[0]
                    + " "
                    + (self.root / f"host{i}_ed25519.pub").read_text().split(" ")[1],
                )
            )
        self.known_hosts = self.root / "known_hosts"
        self.known_hosts.write_text("".join(known))
        self.wait_ready()
        return self

    def options(self, **overrides) -> SshOptions:
        fields = {"user": "root", "key_file": self.client_key, "known_hosts_file": self.known_hosts}
        return SshOptions(**(fields | overrides))

    def wait_ready(self, timeout: float = 30) -> None:
        opts = self.options()
        deadline = time.monotonic() + timeout
        for ip in self.ips:
            while True:
                done = subprocess.run(opts.argv(ip, "true"), capture_output=True, text=True, stdin=subprocess.DEVNULL)
                if done.returncode == 0:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sshd on {ip} not ready: {done.stderr}")
                time.sleep(0.3)

    def stop_network(self) -> None:
        if self.network is not None:
            _remove(self.bridge, self.prefix, self.count)

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.stop_network()


# The bulk queue's depth in seconds of the line: deep enough that TCP never loses a packet to it, as the
# lossless fabrics collectives run over (InfiniBand's credits, RoCE's PFC) make a sender wait rather than
# drop. With 0.4 s, tail drops cost a 2-rank allreduce RTO stalls: 0.75 of the line, or no end in 15 min.
QUEUE_S = 4.0
# Pure TCP ACKs: IPv4 with a 20-byte header, under 128 bytes in all, TCP flags exactly ACK (wondershaper's
# match; ACKs with timestamp and SACK options stay under 128 bytes).
_PURE_ACK = ("match", "ip", "protocol", "6", "0xff", "match", "u8", "0x05", "0x0f", "at", "0",
             "match", "u16", "0x0000", "0xff80", "at", "2", "match", "u8", "0x10", "0xff", "at", "33")  # fmt: skip


@contextlib.contextmanager
def link_rate_limit(namespaces: list[str], rate: str) -> Iterator[None]:
    """A rate limit (e.g. "24Mbit": `bench project` and tc read it alike) on each namespace host's link,
    egress; lifted on exit.

    An `htb` class at the rate with two children: pure ACKs first, everything else through one FIFO
    `QUEUE_S` deep. As tbf was (one FIFO, 400 ms), the link gave a ring allreduce what its rank count let
    it, not the line: at 4 Mbit/s a 2-rank allreduce got 0.68-0.76 of it, a 4-rank 0.75-0.90, and a
    2-rank allreduce once did not end in 15 minutes, stalled by tail drops. With the ACKs first and no
    drops: 2 ranks 0.96 of the line twice, 4 ranks 0.91-0.93 (docs/benchmarks.md, 14). A shallow tbf
    queue starved the link with Horovod's small messages instead."""
    try:
        for ns in namespaces:
            shape(("ip", "netns", "exec", ns, "tc"), "eth0", rate)
        yield
    finally:
        for ns in namespaces:
            sh("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "eth0", "root", check=False)


def shape(tc: tuple[str, ...], dev: str, rate: str) -> None:
    """link_rate_limit's qdiscs on `dev` (egress), with `tc` the command that reaches its namespace."""
    bps = rate_bytes_s(rate) * 8
    sh(*tc, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "20")
    burst = ("burst", "64kb", "cburst", "64kb")
    sh(*tc, "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", rate, *burst)
    for leaf, share, prio in (("10", 0.05, "0"), ("20", 0.95, "1")):
        sh(*tc, "class", "add", "dev", dev, "parent", "1:1", "classid", f"1:{leaf}", "htb",
           "rate", f"{bps * share / 1e3:.0f}kbit", "ceil", rate, "prio", prio, *burst)  # fmt: skip
    sh(*tc, "qdisc", "add", "dev", dev, "parent", "1:10", "pfifo", "limit", "1000")
    sh(*tc, "qdisc", "add", "dev", dev, "parent", "1:20", "bfifo", "limit", f"{bps / 8 * QUEUE_S:.0f}")
    sh(*tc, "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "10", "u32",
       *_PURE_ACK, "flowid", "1:10")  # fmt: skip


@contextlib.contextmanager
def download_rate_limit(hosts: SshHosts, indices: list[int], rate: str) -> Iterator[None]:
    """A rate limit on what each namespace host receives: the bridge side of its veth, egress toward it
    (a compute node's link as its reads see it; link_rate_limit shapes what a host sends)."""
    devs = [f"{hosts.namespace(i)}h" for i in indices]
    try:
        for dev in devs:
            shape(("tc",), dev, rate)
        yield
    finally:
        for dev in devs:
            sh("tc", "qdisc", "del", "dev", dev, "root", check=False)


@contextlib.contextmanager
def sshfs_store(hosts: SshHosts, ssh_config: Path, export: Path, point: Path, nodes) -> Iterator[None]:
    """host0's `export` mounted at `point` on each of `nodes` over sshfs, each in its own sshd's mount
    namespace (as a cluster's nodes mount a NAS); unmounted (lazily) on the way out, failed mounts included."""
    opts = SshOptions(config_file=ssh_config)
    sshfs = f"sshfs -F {ssh_config} -o BatchMode=yes {hosts.ip(0)}:{export} {point}"
    try:
        for i in nodes:
            subprocess.run(opts.argv(hosts.ip(i), sshfs), check=True, capture_output=True, stdin=subprocess.DEVNULL)
        yield
    finally:
        for i in nodes:
            subprocess.run(opts.argv(hosts.ip(i), f"fusermount -u -z {point}"), capture_output=True)
