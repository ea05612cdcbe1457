"""The storage under test as the report and the alerts name it (issue 64 item 7): what the nodes read,
from their fingerprints: `S3 (endpoint, bucket)` for a bucket, never a key; the path and its file
system's mount for files."""

from __future__ import annotations

from bench.env.fingerprint import storage_of, storage_under_test


def _run(*mounts: dict) -> dict:
    return {"result": {"summary": {"environment": [{"host": f"n{k}", "mount": m} for k, m in enumerate(mounts)]}}}


def test_a_bucket_is_named_by_its_endpoint_and_bucket_and_no_key(monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)  # S3's own variable would name the endpoint
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://10.0.0.7:7480")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-value")
    mount = storage_of("s3://weekly-data/suite/a")
    assert mount == {
        "fstype": "s3",
        "source": "S3 (http://10.0.0.7:7480, weekly-data)",
        "mountpoint": "s3://weekly-data/suite/a",
    }
    assert "AKIDEXAMPLE" not in repr(mount) and "s3cr3t" not in repr(mount)
    named = storage_under_test([_run(mount, mount)], "s3://weekly-data/suite")
    assert named == "S3 (http://10.0.0.7:7480, weekly-data)"


def test_files_are_named_by_path_and_mount_and_a_disagreeing_node_shows():
    nfs = {"fstype": "nfs4", "source": "nas1:/export", "options": "rw", "mountpoint": "/mnt/nas"}
    other = {**nfs, "source": "nas2:/export"}
    assert storage_under_test([_run(nfs, nfs)], "/mnt/nas/data") == "/mnt/nas/data on nfs4 nas1:/export"
    both = storage_under_test([_run(nfs), _run(other)], "/mnt/nas/data")
    assert both == "/mnt/nas/data on nfs4 nas1:/export; /mnt/nas/data on nfs4 nas2:/export"
    # a source's credentials never reach the line (redacted again, as the fingerprint is)
    leaky = {**nfs, "fstype": "fuse.rclone", "source": "https://user:pw@host/x"}
    assert "pw" not in storage_under_test([_run(leaky)], "/mnt/nas/data")
    # nothing reported (a synthetic run, a failed scale): the setting itself
    assert storage_under_test([_run({"fstype": "none (synthetic)"}), {"result": {}}], "/data") == "/data"
    assert storage_of(None) == {"fstype": "none (synthetic)"}
