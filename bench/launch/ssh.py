"""The ssh launcher: the run's ranks on the hosts, over ssh, under the detached supervisor the local
launcher uses (bench.launch.detached); the hosts are checked reachable before launch."""

from __future__ import annotations

from bench.config.models import RunSpec
from bench.launch.detached import DetachedLauncher
from bench.launch.options import LauncherOptions
from bench.launch.sshopts import SshOptions

NAME = "ssh"


class SshLauncher(DetachedLauncher):
    name = NAME

    def __init__(self, ssh: SshOptions) -> None:
        super().__init__(ssh)

    def check(self, spec: RunSpec) -> None:
        assert self.ssh is not None
        self.ssh.check_reachable(spec.where.hosts)


def build(options: LauncherOptions) -> SshLauncher:
    return SshLauncher(options.ssh or SshOptions())
