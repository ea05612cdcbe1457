"""The one place launcher backends are named and built."""

from __future__ import annotations

import os
from pathlib import Path

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
    ssh_config: Path | str | None = None,
):
    """`ssh_config`: the suite's ssh config file (ssh -F), over `ssh`'s options or none."""
    if ssh_config is not None:
        ssh = (ssh or SshOptions()).model_copy(update={"config_file": Path(ssh_config)})
        if not Path(ssh_config).is_file() or not os.access(ssh_config, os.R_OK):
            raise ConfigError(f"ssh_config: {ssh_config} is not a readable file")
    if name == "local":
        return DetachedLauncher()
    if name == "ssh":
        return SshLauncher(ssh or SshOptions())
    if name == "slurm":
        return SlurmLauncher(CommandRunner(ssh if login_host else None, login_host, slurm_env))
    raise ConfigError(f"launcher: {name!r} is not one of {', '.join(LAUNCHERS)}")


def suite_launcher(cfg):
    """The launcher a suite config names, with its ssh config file (no Airflow connection: the CLI)."""
    return build_launcher(cfg.launcher, ssh_config=cfg.ssh_config)
