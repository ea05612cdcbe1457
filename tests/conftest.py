"""Shared fixtures: small generated datasets and paths to the project's own interpreter."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins"))
PY = sys.executable
BENCH = str(Path(PY).with_name("bench"))
HOROVODRUN = str(Path(PY).with_name("horovodrun"))


def pytest_configure(config: pytest.Config) -> None:
    from tests.dags.conftest import set_session_airflow_home

    set_session_airflow_home(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    from tests.dags.conftest import remove_session_airflow_home

    remove_session_airflow_home(config)


def oversubscribed_ranks() -> int:
    """Three ranks per core this process may use: a scale that cannot be near-linear on this machine."""
    return 3 * len(os.sched_getaffinity(0))


@pytest.fixture(scope="session")
def datasets(tmp_path_factory) -> dict[str, Path]:
    from bench.data.generate import GenerateSpec, generate

    root = tmp_path_factory.mktemp("datasets")
    out = {}
    for kind in ("coco", "segmentation"):
        generate(GenerateSpec(kind, root / kind, images=32, seed=1))
        out[kind] = root / kind
    return out


@pytest.fixture(scope="session")
def ssh_hosts(tmp_path_factory):
    """Two namespace hosts, each with its own IP and sshd, for the whole session (tests/infra/ssh_hosts.py):
    every test that launches over ssh, mounts over sshfs or logs in to a Slurm login node uses these.
    Whatever a test adds to them (a `tc` limit, a mount in an sshd's namespace, a blkio group) its own
    context manager takes away again."""
    from tests.infra.ssh_hosts import SshHosts

    hosts = SshHosts(tmp_path_factory.mktemp("ssh-hosts")).start()
    yield hosts
    hosts.stop()
