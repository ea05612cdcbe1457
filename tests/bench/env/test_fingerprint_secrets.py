"""A mount's credentials never reach the fingerprint: /proc/mounts holds a FUSE URL's password, an rclone
key or a CIFS password verbatim, and the fingerprint goes to the store, the dashboard and alerts."""

from __future__ import annotations

import json

from bench.env.fingerprint import describe, differences, mount_of, run_fingerprint
from bench.suite.record import run_environment

REDACTED = "REDACTED"  # what a secret value reads as
SECRETS = ("s3cret-pw", "AKIAEXAMPLEKEYID", "wJalrXUtnFEMI-secret", "hunter2", "sv=2024&sig=SIGNATURE")
MOUNTS = (
    "/dev/vda1 / ext4 rw,relatime 0 0\n"
    "https://alice:s3cret-pw@dav.example.com/coco /mnt/dav fuse rw,nosuid,nodev,relatime,user_id=0 0 0\n"
    "s3remote:bucket /mnt/s3 fuse.rclone rw,access_key_id=AKIAEXAMPLEKEYID,"
    "secret_access_key=wJalrXUtnFEMI-secret,region=eu-west-1 0 0\n"
    "//nas/share /mnt/cifs cifs rw,vers=3.0,username=bob,password=hunter2,sec=ntlmssp 0 0\n"
    "sshuser:s3cret-pw@nas01:/export /mnt/sshfs fuse.sshfs rw,user_id=0 0 0\n"
    "https://acct.blob.example.net/c?sv=2024&sig=SIGNATURE /mnt/blob fuse rw 0 0\n"
    "nas01:/export/coco /mnt/nas nfs4 rw,vers=4.2,rsize=1048576,hard 0 0\n"
)


def _mounts(tmp_path):
    path = tmp_path / "mounts"
    path.write_text(MOUNTS)
    return path


def test_a_mount_source_loses_its_userinfo_and_secret_options_their_values(tmp_path):
    mounts = _mounts(tmp_path)
    dav = mount_of("/mnt/dav/images", mounts)
    assert dav["source"] == "https://dav.example.com/coco" and dav["options"] == "rw,nosuid,nodev,relatime,user_id=0"
    s3 = mount_of("/mnt/s3/x", mounts)
    assert s3["source"] == "s3remote:bucket"
    assert s3["options"] == f"rw,access_key_id={REDACTED},secret_access_key={REDACTED},region=eu-west-1"
    cifs = mount_of("/mnt/cifs", mounts)
    assert cifs["options"] == f"rw,vers=3.0,username=bob,password={REDACTED},sec=ntlmssp"
    assert mount_of("/mnt/sshfs/a", mounts)["source"] == "nas01:/export"
    assert mount_of("/mnt/blob/a", mounts)["source"] == f"https://acct.blob.example.net/c?sv=2024&sig={REDACTED}"


def test_a_mount_without_credentials_reads_exactly_as_before(tmp_path):
    """Redaction changes nothing else: an unchanged mount is never seen as an environment change."""
    got = mount_of("/mnt/nas/coco", _mounts(tmp_path))
    assert got == {
        "fstype": "nfs4",
        "source": "nas01:/export/coco",
        "options": "rw,vers=4.2,rsize=1048576,hard",
        "mountpoint": "/mnt/nas",
    }


def test_no_secret_reaches_the_run_fingerprint_or_a_described_change(tmp_path):
    """Also from a rank report written before the node redacted (its mount verbatim in the summary)."""
    verbatim = {
        "source": "https://alice:s3cret-pw@dav.example.com/coco",
        "options": "rw,secret_access_key=wJalrXUtnFEMI-secret,password=hunter2",
        "fstype": "fuse",
        "mountpoint": "/mnt/dav",
    }
    old = {"host": "gpu-01", "mount": verbatim}
    new = {"host": "gpu-01", "mount": mount_of("/mnt/s3/x", _mounts(tmp_path))}
    runs = [{"result": {"summary": {"environment": [old]}}}]
    before, after = run_environment(runs), run_fingerprint([new])
    text = json.dumps([before, after]) + describe(differences(before, after), "2026-11-16")
    assert not [s for s in SECRETS if s in text], text
    assert "https://dav.example.com/coco" in before["mount"] and f"password={REDACTED}" in before["mount"]
