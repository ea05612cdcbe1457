"""The one place launcher backends are named and built."""

from __future__ import annotations

from bench.config import LAUNCHERS
from bench.errors import ConfigError
from bench.launch.commands import CommandRunner
from bench.launch.detached import DetachedLauncher, SshLauncher
from bench.launch.slurm import SlurmLauncher
from bench.launch.sshopts import SshOptions


def build_launcher(
    name: str,
    ssh: SshOptions | None = None,
    login_host: str | None = None,
    slurm_env: dict[str, str] | None = None,
):
    if name == "local":
        return DetachedLauncher()
    if name == "ssh":
        return SshLauncher(ssh or SshOptions())
    if name == "slurm":
        return SlurmLauncher(CommandRunner(ssh if login_host else None, login_host, slurm_env))
    raise ConfigError(f"launcher: {name!r} is not one of {', '.join(LAUNCHERS)}")
