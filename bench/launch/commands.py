"""Where cluster CLI commands run: on this machine, or on a login node over ssh. Argv lists only.

Here, a command gets the allow-listed environment (bench.launch.environment) and the runner's own
settings (SLURM_CONF, say), from `/`: sbatch copies its caller's environment into the job record, so
the worker's secrets must never be in it. Over ssh, the runner's settings travel as `env K=V`.
An error quotes at most a bounded, printable part of the command's stderr."""

from __future__ import annotations

import shlex
import subprocess

from bench.errors import LaunchError
from bench.launch.environment import SAFE_CWD, tool_environment
from bench.launch.sshopts import SshOptions
from bench.safe_fs import reason_text


class CommandRunner:
    def __init__(
        self, ssh: SshOptions | None = None, login_host: str | None = None, env: dict[str, str] | None = None
    ) -> None:
        self.ssh, self.login_host, self.env = ssh, login_host, env

    @property
    def remote(self) -> bool:
        return self.ssh is not None

    def run(
        self, argv: list[str], stdin: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess:
        if self.ssh is not None:
            assert self.login_host
            # sshd drops the client's environment: settings such as SLURM_CONF travel as `env K=V`.
            remote = ["env", *(f"{k}={v}" for k, v in sorted((self.env or {}).items())), *argv] if self.env else argv
            full, env = self.ssh.argv(self.login_host, shlex.join(remote)), tool_environment()
        else:
            full, env = argv, tool_environment(self.env)
        try:
            done = subprocess.run(
                full,
                input=stdin,
                capture_output=True,
                text=True,
                timeout=timeout,
                env=env,
                cwd=SAFE_CWD,
                stdin=None if stdin is not None else subprocess.DEVNULL,
                check=False,
            )
        except FileNotFoundError:
            raise LaunchError(f"{argv[0]}: not found on this machine") from None
        except subprocess.TimeoutExpired:
            raise LaunchError(f"{shlex.join(argv)}: no answer within {timeout}s") from None
        if check and done.returncode != 0:
            where = f" on {self.login_host}" if self.remote else ""
            raise LaunchError(f"{argv[0]}{where} failed (exit {done.returncode}): {reason_text(done.stderr)}")
        return done
