"""Build a bench launcher from JSON-able kwargs, so a trigger in the triggerer can rebuild it."""

from __future__ import annotations

from bench.launch.registry import build_launcher
from bench.launch.sshopts import SshOptions


def launcher_kwargs(kind: str, conn_id: str | None, hosts=()) -> dict:
    """Resolve the connection once (in the worker) into plain options the trigger can carry."""
    kwargs: dict = {"kind": kind}
    if kind in ("ssh", "slurm") and conn_id:
        from scalewatch.connections import ssh_options

        opts, host = ssh_options(conn_id, hosts)
        kwargs["ssh"] = opts.model_dump(mode="json")
        if kind == "slurm":
            kwargs["login_host"] = host
    return kwargs


def from_kwargs(kwargs: dict):
    ssh = SshOptions.model_validate(kwargs["ssh"]) if kwargs.get("ssh") else None
    return build_launcher(
        kwargs["kind"], ssh=ssh, login_host=kwargs.get("login_host"), slurm_env=kwargs.get("slurm_env")
    )
