"""The one place launchers are built: each launcher is the module bench.launch.<name>, which builds it
(`build(LauncherOptions)`, and `NAME`, its name); the names are the `launcher` setting's choices
(bench.config.LauncherKind). A new launcher is its module and its name among those choices."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from bench.config.types import LAUNCHERS
from bench.errors import ConfigError
from bench.launch.options import LauncherOptions
from bench.launch.sshopts import SshOptions


def launcher_module(name: str):
    """The module that builds launcher `name` (imported only when that launcher is asked for)."""
    if name not in LAUNCHERS:
        raise ConfigError(f"launcher: {name!r} is not one of {', '.join(LAUNCHERS)}")
    return importlib.import_module(f"bench.launch.{name}")


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
    return launcher_module(name).build(LauncherOptions(ssh=ssh, login_host=login_host, slurm_env=slurm_env))


def suite_launcher(cfg):
    """The launcher a suite config names, with its ssh config file (no Airflow connection: the CLI)."""
    return build_launcher(cfg.where.launcher, ssh_config=cfg.where.ssh_config)
