"""What building a launcher may take, beside its name (bench.launch.registry): one object for every
launcher, each taking what it uses."""

from __future__ import annotations

from dataclasses import dataclass

from bench.launch.sshopts import SshOptions


@dataclass(frozen=True)
class LauncherOptions:
    ssh: SshOptions | None = None  # ssh options (the suite's ssh config over a connection's key), if any
    login_host: str | None = None  # Slurm: the login node its commands run on (None: the Slurm CLI here)
    slurm_env: dict[str, str] | None = None  # Slurm: the environment of its commands
