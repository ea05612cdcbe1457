"""OpenSSH client options: host-key checking always on, keys and known hosts from config.

Built from an Airflow SSH connection (plugins/) or an ssh config file (CLI), then passed down.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from bench.config.models import HostSlots
from bench.config.types import SafePath, SlurmName
from bench.errors import LaunchError
from bench.launch.environment import SAFE_CWD, tool_environment
from bench.safe_fs import reason_text


class SshOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    user: SlurmName | None = None
    key_file: SafePath | None = None
    known_hosts_file: SafePath | None = None
    config_file: SafePath | None = None
    port: int | None = Field(None, ge=1, le=65535)
    connect_timeout_s: int = Field(10, ge=1, le=300)
    strict_host_key_checking: bool = True

    def argv(self, host: HostSlots | str, command: str) -> list[str]:
        name = host.host if isinstance(host, HostSlots) else host
        args = [
            "ssh",
            "-o",
            "BatchMode=yes",
            "-o",
            f"ConnectTimeout={self.connect_timeout_s}",
            "-o",
            f"StrictHostKeyChecking={'yes' if self.strict_host_key_checking else 'accept-new'}",
            "-o",
            "LogLevel=ERROR",
        ]
        if self.config_file:
            args += ["-F", str(self.config_file)]
        if self.known_hosts_file:
            args += ["-o", f"UserKnownHostsFile={self.known_hosts_file}"]
        if self.key_file:
            args += ["-i", str(self.key_file), "-o", "IdentitiesOnly=yes"]
        if self.port:
            args += ["-p", str(self.port)]
        if self.user:
            args += ["-l", self.user]
        return [*args, "--", name, command]

    def check_reachable(self, hosts: tuple[HostSlots, ...]) -> None:
        """`true` on every host first: a clear error naming the host before anything launches."""
        for host in hosts:
            try:
                done = subprocess.run(
                    self.argv(host, "true"),
                    capture_output=True,
                    text=True,
                    stdin=subprocess.DEVNULL,
                    timeout=self.connect_timeout_s + 15,
                    check=False,
                    env=tool_environment(),
                    cwd=SAFE_CWD,
                )
            except subprocess.TimeoutExpired:
                raise LaunchError(
                    f"host {host.host}: ssh did not answer within {self.connect_timeout_s + 15}s"
                ) from None
            if done.returncode != 0:
                detail = reason_text((done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1], 200)
                raise LaunchError(f"host {host.host}: ssh check failed: {detail}")


def known_hosts_line(host: str, port: int, host_key: str) -> str:
    name = host if port == 22 else f"[{host}]:{port}"
    return f"{name} {host_key.strip()}\n"


def write_private(path: Path, text: str) -> Path:
    """Create `path` mode 0600, refusing to follow a link or reuse a file someone else put there."""
    import os

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path
