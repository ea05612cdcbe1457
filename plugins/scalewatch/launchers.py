"""Build a bench launcher from JSON-able kwargs, so a trigger in the triggerer can rebuild it."""

from __future__ import annotations

from bench.launch.registry import build_launcher
from bench.launch.sshopts import SshOptions


def launcher_kwargs(kind: str, conn_id: str | None, ssh_config=None) -> dict:
    """What a trigger carries: the connection's id, never its key material or the paths of its files;
    the suite's ssh config file (a setting the user gave, as visible as the hosts). The hosts are not
    the launcher's: each run's RunSpec carries them."""
    kwargs: dict = {"kind": kind}
    if kind in ("ssh", "slurm") and conn_id:
        kwargs["conn_id"] = conn_id
    if kind in ("ssh", "slurm") and ssh_config:
        kwargs["ssh_config"] = str(ssh_config)
    return kwargs


def from_kwargs(kwargs: dict):
    """Build the launcher here, resolving the connection in this process (worker or triggerer alike)."""
    ssh, login_host = None, kwargs.get("login_host")
    if kwargs.get("conn_id"):
        from scalewatch.connections import ssh_options

        ssh, host = ssh_options(kwargs["conn_id"])
        if kwargs["kind"] == "slurm":
            login_host = host
    elif kwargs.get("ssh"):
        ssh = SshOptions.model_validate(kwargs["ssh"])
    return build_launcher(
        kwargs["kind"],
        ssh=ssh,
        login_host=login_host,
        slurm_env=kwargs.get("slurm_env"),
        ssh_config=kwargs.get("ssh_config"),
    )
