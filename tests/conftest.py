"""Shared fixtures: small generated datasets, the ssh hosts, the S3 server, and paths to the project's own
interpreter."""

from __future__ import annotations

import itertools
import os
import secrets
import shutil
import sys
import tempfile
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


_buckets = itertools.count()


@pytest.fixture(scope="session")
def rgw():
    """One real Ceph RGW for the session's S3 tests (tests/infra/ceph_rgw.py), started the first time a
    test needs it (~7-20 s), stopped and its loop device freed at the end."""
    from tests.infra.ceph_rgw import ceph_rgw

    if shutil.which("radosgw") is None:
        pytest.fail("radosgw is not installed: scripts/install.sh --with-test-services installs Ceph")
    root = Path(tempfile.mkdtemp(prefix="scalewatch-rgw-", dir="/var/tmp"))
    try:
        with ceph_rgw(root / "cluster") as cluster:
            yield cluster
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def s3(rgw):
    """A boto3 client of the test user (bench.data.location.s3_client: what the suite itself uses)."""
    from bench.data.location import credentials_from_env, s3_client

    return s3_client(credentials_from_env(rgw.env()))


@pytest.fixture
def bucket(s3) -> str:
    """A bucket of the test's own on the session's RGW."""
    name = f"test-{next(_buckets)}-{secrets.token_hex(3)}"
    s3.create_bucket(Bucket=name)
    return name
