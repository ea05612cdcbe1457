"""The storage kind decided in one place (bench.data.location), the store refused before any write when
it is unusable, and staging into a real Ceph RGW: uploaded, verified by listing, re-staging skipping
what is there and correct (bench.data.stage_s3, bench.suite.staging_s3)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import yaml

from bench.data.location import (
    FileLocation,
    S3Location,
    StoreRefused,
    credentials_from_env,
    parse_location,
    s3_client,
)
from bench.data.stage_s3 import MARKER, S3_MANIFEST, check_store, list_objects, stage_to_s3
from bench.errors import ConfigError, StagingError

pytestmark = pytest.mark.slow

WORKLOAD = {
    "dataset": {"format": "raw", "files": 6, "samples_per_file": 2, "record_bytes": {"mean": 65536, "stdev": 0}},
    "reader": {"threads": 1, "batch": 4},
    "compute": {"accelerator": {"seconds_per_batch": 0.01}},
    "min_au": 0.9,
}


def test_the_location_decides_the_kind_and_refuses_a_bad_bucket_naming_the_setting():
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9"}
    assert parse_location("/data/suite") == FileLocation(Path("/data/suite"))
    loc = parse_location("s3://bench-data/weekly/a/", env)
    assert loc == S3Location("bench-data", "weekly/a", "http://127.0.0.1:9")
    assert loc.child("records-x").key("0001.bin") == "weekly/a/records-x/0001.bin"
    assert loc.describe() == "S3 (http://127.0.0.1:9, bench-data)"
    for bad, needle in (("s3://Bad_Bucket/x", "bucket 'Bad_Bucket'"), ("s3://bench-data/a/../b", "prefix")):
        with pytest.raises(ConfigError, match=needle) as caught:
            parse_location(bad, env)
        assert "dataset_path" in str(caught.value)


def test_credentials_come_from_the_aws_variables_and_never_show():
    with pytest.raises(ConfigError, match="AWS_SECRET_ACCESS_KEY"):
        credentials_from_env({"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "K"})
    creds = credentials_from_env(
        {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "AKEY123", "AWS_SECRET_ACCESS_KEY": "s3cr3t"}
    )
    assert "s3cr3t" not in repr(creds) and "AKEY123" not in repr(creds)


def _dead_endpoint() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # closed when this returns: nothing answers there


def test_an_unusable_store_is_refused_before_anything_is_written(rgw, s3, bucket):
    """No endpoint, no bucket, wrong keys, foreign objects: each refused naming the setting and what the
    server said, the secret never in the message, and the bucket left as it was."""
    good = rgw.env()
    dead = {**good, "AWS_ENDPOINT_URL": _dead_endpoint()}
    wrong = {**good, "AWS_SECRET_ACCESS_KEY": "not-the-secret-" + "x" * 20}
    s3.put_object(Bucket=bucket, Key="theirs/data.csv", Body=b"a,b\n")
    cases = [
        (dead, f"s3://{bucket}/mine", "AWS_ENDPOINT_URL", "does not answer"),
        (good, "s3://no-such-bucket-here/mine", "bucket 'no-such-bucket-here' does not exist", "404"),
        (wrong, f"s3://{bucket}/mine", "AWS_ACCESS_KEY_ID", "SignatureDoesNotMatch"),
        (good, f"s3://{bucket}/theirs", "dataset_path", "'theirs/data.csv'"),
    ]
    for env, url, setting, said in cases:
        with pytest.raises(StoreRefused) as caught:
            check_store(s3_client(credentials_from_env(env)), parse_location(url, env))
        text = str(caught.value)
        assert setting in text and said in text, text
        assert env["AWS_SECRET_ACCESS_KEY"] not in text
    assert [k for k, _, _ in list_objects(s3, S3Location(bucket, ""))] == ["theirs/data.csv"]


def test_staging_uploads_multipart_verifies_and_skips_what_is_there(s3, bucket, tmp_path):
    """A 20 MiB file goes up in parts (its ETag '-3'), small ones whole; a second staging copies nothing;
    an object whose bytes changed (same size) is uploaded again, not skipped."""
    source = tmp_path / "src"
    (source / "sub").mkdir(parents=True)
    (source / "big.bin").write_bytes(os.urandom(20 << 20))
    for i in range(5):
        (source / "sub" / f"{i}.bin").write_bytes(os.urandom(100_000 + i))
    loc = S3Location(bucket, "suite/ds")
    first = stage_to_s3(s3, source, loc)
    assert (first.files, first.copied, first.skipped) == (6, 6, 0)
    listed = {k: (size, etag) for k, size, etag in list_objects(s3, loc)}
    assert listed["suite/ds/big.bin"][0] == 20 << 20 and listed["suite/ds/big.bin"][1].endswith("-3")
    assert f"suite/ds/{S3_MANIFEST}" in listed
    again = stage_to_s3(s3, source, loc)
    assert (again.copied, again.skipped) == (0, 6)
    s3.put_object(Bucket=bucket, Key="suite/ds/sub/2.bin", Body=os.urandom(100_002))  # same size, other bytes
    third = stage_to_s3(s3, source, loc)
    assert (third.copied, third.skipped) == (1, 5)
    body = s3.get_object(Bucket=bucket, Key="suite/ds/sub/2.bin")["Body"].read()
    assert body == (source / "sub" / "2.bin").read_bytes()


def test_a_link_in_the_source_is_refused(s3, bucket, tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    (source / "a.bin").write_bytes(b"x" * 10)
    (source / "b.bin").symlink_to("/etc/hostname")
    with pytest.raises(StagingError, match="symbolic link"):
        stage_to_s3(s3, source, S3Location(bucket, "p"))


def test_a_suite_stages_its_records_into_the_bucket_and_restages_nothing(rgw, s3, bucket, tmp_path):
    """bench.suite.staging.stage_here with `dataset_path: s3://...`: the prefix claimed, the workload's
    generated records uploaded under records-NAME, a second staging skipping every object."""
    from bench.suite.staging import StagingSpec, stage_here
    from bench.suite.staging_s3 import stage_here_s3

    workload = tmp_path / "tiny.yaml"
    workload.write_text(yaml.safe_dump(WORKLOAD))
    spec = StagingSpec(workloads=(str(workload),), dataset_path=f"s3://{bucket}/weekly")
    first = stage_here_s3(spec, rgw.env())["tiny"]
    assert first["path"] == f"s3://{bucket}/weekly/records-tiny"
    assert first["files"] == 7 and first["copied"] == 7  # 6 record files and records.json
    keys = {k for k, _, _ in list_objects(s3, S3Location(bucket, "weekly"))}
    assert f"weekly/{MARKER}" in keys and f"weekly/records-tiny/{S3_MANIFEST}" in keys
    with pytest.MonkeyPatch.context() as mp:  # the CLI's path: the variables of this process
        for name, value in rgw.env().items():
            mp.setenv(name, value)
        again = stage_here(spec)["tiny"]
    assert (again["copied"], again["skipped"]) == (0, 7)
