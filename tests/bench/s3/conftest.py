"""One real Ceph RGW for the S3 tests of this folder (tests/infra/ceph_rgw.py): started once per
session (~7-20 s), stopped and its loop device freed at the end. Each test gets a bucket of its own."""

from __future__ import annotations

import itertools
import secrets
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.infra.ceph_rgw import ceph_rgw

_names = itertools.count()


@pytest.fixture(scope="session")
def rgw():
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
    name = f"test-{next(_names)}-{secrets.token_hex(3)}"
    s3.create_bucket(Bucket=name)
    return name
