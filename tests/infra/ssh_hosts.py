"""Real ssh hosts for tests: network namespaces on a bridge, each with its own IP and sshd.

Addresses are in a private /24 that exists only inside namespaces (and the bridge) made here.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench.launch.sshopts import SshOptions, known_hosts_line

SUBNET = "10.213.7"
BRIDGE = "swbr0"


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check)


@dataclass
class SshHosts:
    root: Path
    count: int = 2
    prefix: str = "swns"
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def gateway(self) -> str:
        return f"{SUBNET}.1"

    def ip(self, i: int) -> str:
        return f"{SUBNET}.{10 + i}"

    @property
    def ips(self) -> list[str]:
        return [self.ip(i) for i in range(self.count)]

    def start(self) -> SshHosts:
        self.root.mkdir(parents=True, exist_ok=True)
        self.stop_network()
        sh("ip", "link", "add", BRIDGE, "type", "bridge")
        sh("ip", "addr", "add", f"{self.gateway}/24", "dev", BRIDGE)
        sh("ip", "link", "set", BRIDGE, "up")
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
            ns = f"{self.prefix}{i}"
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", f"{ns}h", "type", "veth", "peer", "name", f"{ns}c")
            sh("ip", "link", "set", f"{ns}c", "netns", ns)
            sh("ip", "link", "set", f"{ns}h", "master", BRIDGE, "up")
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
        for i in range(self.count):
            sh("ip", "netns", "del", f"{self.prefix}{i}", check=False)
            sh("ip", "link", "del", f"{self.prefix}{i}h", check=False)
        sh("ip", "link", "del", BRIDGE, check=False)

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.stop_network()


@contextlib.contextmanager
def link_rate_limit(namespaces: list[str], rate: str) -> Iterator[None]:
    """A `tc tbf` rate limit (e.g. "24mbit") on each namespace host's link, egress; lifted on exit."""
    try:
        for ns in namespaces:
            sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", rate,
               "burst", "64kb", "latency", "400ms")  # fmt: skip
        yield
    finally:
        for ns in namespaces:
            sh("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "eth0", "root", check=False)
