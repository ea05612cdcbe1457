"""The local launcher: the run's ranks on this node, under a detached supervisor (bench.launch.detached)."""

from __future__ import annotations

from bench.launch.detached import DetachedLauncher
from bench.launch.options import LauncherOptions

NAME = DetachedLauncher.name


def build(options: LauncherOptions) -> DetachedLauncher:
    return DetachedLauncher()
