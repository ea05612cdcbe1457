"""A real Slurm cluster on this host for tests: munged, slurmctld and N slurmd (Debian's build)."""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class SlurmCluster:
    root: Path
    nodes: int = 2
    cpus: int = 2
    ctld_addr: str = "127.0.0.1"  # a bridge address makes slurmctld reachable from namespaced login nodes
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        """Each cluster's own munged: two clusters at once (two pytest lanes) never share, or stop, one."""
        return self.root / "munge" / "munge.socket.2"

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def node_names(self) -> list[str]:
        return [f"node{i}" for i in range(1, self.nodes + 1)]

    def write_conf(self) -> None:
        ctl_port = _free_port()
        lines = [
            "ClusterName=scalewatch-test",
            f"SlurmctldHost={socket.gethostname()}({self.ctld_addr})",
            f"SlurmctldPort={ctl_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            f"AuthInfo=socket={self.munge_socket}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            f"StateSaveLocation={self.root}/state",
            f"SlurmdSpoolDir={self.root}/spool/%n",
            f"SlurmctldPidFile={self.root}/slurmctld.pid",
            f"SlurmdPidFile={self.root}/slurmd-%n.pid",
            f"SlurmctldLogFile={self.root}/slurmctld.log",
            f"SlurmdLogFile={self.root}/slurmd-%n.log",
            "MinJobAge=86400",
            "ReturnToService=2",
            "SlurmdTimeout=10",
            "InactiveLimit=0",
            "KillWait=5",
            "MpiDefault=none",
            "JobCompType=jobcomp/none",
            "JobRequeue=0",
            "SchedulerType=sched/backfill",
            "MaxJobCount=10000",
        ]
        for name in self.node_names():
            lines.append(
                f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={_free_port()} "
                f"CPUs={self.cpus} RealMemory=1000 State=UNKNOWN"
            )
        lines.append(f"PartitionName=test Nodes={','.join(self.node_names())} Default=YES MaxTime=INFINITE State=UP")
        lines.append(f"PartitionName=other Nodes={self.node_names()[0]} Default=NO State=UP")
        self.conf.write_text("\n".join(lines) + "\n")

    def start(self) -> SlurmCluster:
        for d in ("state", "spool"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        self.write_conf()
        self._start_munge()
        self.start_controller()
        for name in self.node_names():
            self.start_node(name)
        self.wait_idle()
        return self

    def start_controller(self) -> None:
        """slurmctld keeps its jobs in StateSaveLocation: a restart finds them again."""
        self._ctld = subprocess.Popen(
            ["slurmctld", "-D", "-i", "-f", str(self.conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.procs.append(self._ctld)

    def stop_controller(self) -> None:
        self._ctld.terminate()
        self._ctld.wait(30)

    def start_node(self, name: str) -> subprocess.Popen:
        (self.root / "spool" / name).mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen(
            ["slurmd", "-D", "-N", name, "-f", str(self.conf)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.procs.append(proc)
        setattr(self, f"_slurmd_{name}", proc)
        return proc

    def stop_node(self, name: str) -> None:
        proc: subprocess.Popen = getattr(self, f"_slurmd_{name}")
        proc.kill()
        proc.wait()

    def _start_munge(self) -> None:
        self.munge_socket.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        self.munge_socket.parent.chmod(0o755)
        key = self.root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        subprocess.run(
            [
                "munged",
                f"--key-file={key}",
                f"--socket={self.munge_socket}",
                f"--pid-file={self.root}/munged.pid",
                f"--log-file={self.root}/munged.log",
                f"--seed-file={self.root}/munged.seed",
                "--force",
            ],
            check=True,
        )
        self._owns_munge = True

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), env=os.environ | self.env, capture_output=True, text=True, check=check)

    def wait_idle(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done = self.run("sinfo", "-h", "-N", "-p", "test", "-o", "%N %t", check=False)
            states = dict(line.split() for line in done.stdout.splitlines() if line.strip())
            if len(states) == self.nodes and all(s in ("idle", "mix", "alloc") for s in states.values()):
                return
            time.sleep(0.5)
        raise RuntimeError(f"slurm nodes not idle: {done.stdout} {done.stderr}")

    def _kill_stray_stepds(self) -> None:
        """slurmstepd outlives a slurmd killed mid-step (the NODE_FAIL test); ours hold files under root."""
        root = str(self.root)
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() != "slurmstepd":
                    continue
                fds = os.listdir(f"/proc/{pid}/fd")
                targets = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in fds]
            except OSError:
                continue
            if any(t.startswith(root) for t in targets):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)

    def queue(self) -> list[str]:
        return [line for line in self.run("squeue", "-h", "-o", "%i %T").stdout.splitlines() if line.strip()]

    def stop(self) -> None:
        # A job still running (a test that failed before its own cleanup) would outlive the daemons
        # and load the machine for every later test: cancel everything while slurmd can still act.
        with contextlib.suppress(subprocess.CalledProcessError):
            self.run("scancel", f"--user={getpass.getuser()}")
            deadline = time.monotonic() + 60
            while self.queue() and time.monotonic() < deadline:
                time.sleep(0.5)
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        self._kill_stray_stepds()
        if getattr(self, "_owns_munge", False):
            pid_file = self.root / "munged.pid"
            if pid_file.exists():
                subprocess.run(["kill", pid_file.read_text().strip()], check=False)
        shutil.rmtree(self.root / "spool", ignore_errors=True)
