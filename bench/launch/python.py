"""Which interpreter runs our code on a node: one rule for the launchers' ranks and for what the suite
runs on the nodes beside them (the storage probe, staging on a node), so both find the same Python.

The worker's own interpreter (sys.executable) when the nodes share its install at the same path (the
local launcher, ssh hosts, a Slurm cluster this machine submits to directly); `python3` on the nodes'
PATH when the worker reaches the cluster through a login node over ssh (its paths mean nothing there).
A RunSpec's `python` overrides both (docs/cluster.md)."""

from __future__ import annotations

import sys
from pathlib import Path


def node_python(configured: str | Path | None = None, through_login_node: bool = False) -> str:
    """The interpreter a node runs: `configured` when set, else python3 through a login node, else ours."""
    if configured:
        return str(configured)
    return "python3" if through_login_node else sys.executable
