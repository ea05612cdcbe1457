"""Checkpoints to and from a bucket (issue 64 item 6, bench.storage.checkpoint_s3) against a real Ceph RGW:
a write throttle on the OSD's device is the write rate the phase measures, a read throttle its restore
rate; every object is verified (this RGW returns an empty ETag on multipart completion: the size by HEAD,
the content by the restore's sha256), a changed object fails the restore, and nothing is left behind."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from bench.config.checkpoint import CheckpointSpec
from bench.data.location import S3Location
from bench.data.records import RecordsSpec, generate_records
from bench.data.stage_s3 import stage_to_s3
from bench.storage.checkpoint import aggregate
from bench.storage.checkpoint_files import CheckpointError, Pattern, Shard, size_split
from bench.storage.checkpoint_s3 import (
    MULTIPART_CHUNK,
    PREFIX,
    read_shard_s3,
    run_rank_s3,
    sweep_stale,
    write_shard_s3,
)
from tests.conftest import BENCH
from tests.infra.ceph_rgw import osd_throttle

pytestmark = pytest.mark.slow

WRITE_LIMIT = 16 << 20  # bytes/s on the OSD's device
READ_LIMIT = 24 << 20


class _Alone:
    """One rank's meeting points: it meets only itself."""

    def allgather(self, obj):
        return [obj]


def _listed(s3, bucket: str) -> list[str]:
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]


@pytest.mark.rates
def test_the_phase_writes_and_restores_at_the_osds_throttle_and_leaves_nothing(rgw, s3, bucket):
    """One rank, 2 checkpoints of 48 MiB (its optimizer shard multipart), then 2 restores: the write MB/s
    is the write throttle within 10%, the restore MB/s the read throttle within 10%."""
    spec = CheckpointSpec(mode="size", bytes_per_rank=48 << 20, writes=2, reads=2)
    location = S3Location(bucket, "weekly")
    assert size_split(48 << 20)["optim_states"] > MULTIPART_CHUNK  # the large shard goes up in parts
    with osd_throttle(rgw, WRITE_LIMIT, "write"), osd_throttle(rgw, READ_LIMIT, "read"):
        record = run_rank_s3(0, 1, location, spec, _Alone(), s3, host="n1")
    phase = aggregate([record])
    assert phase["bytes"] == 2 * (48 << 20) and phase["read"]["cold"], phase
    assert phase["write_mb_s"] == pytest.approx(WRITE_LIMIT / 1e6, rel=0.10), phase["write"]
    assert phase["read_mb_s"] == pytest.approx(READ_LIMIT / 1e6, rel=0.10), phase["read"]
    # every object it wrote was deleted, and nothing else was written
    assert record["cleanup"] == {"removed": 4, "left": []} and _listed(s3, bucket) == [], record["cleanup"]


def test_an_object_changed_after_its_write_fails_the_restore(s3, bucket):
    """The ETag is not trusted (empty on this RGW's multipart): the restore checks size and sha256."""
    made: list[dict] = []
    shard = Shard(size_split(12 << 20), Pattern(7, 0))
    root = f"weekly/{PREFIX}/test"
    written = write_shard_s3(s3, bucket, root, 0, 0, shard, made)
    assert written["bytes"] == 12 << 20 and [o["bytes"] for o in made] == list(size_split(12 << 20).values())
    assert read_shard_s3(s3, bucket, made, 0)["bytes"] == 12 << 20  # as written: restored
    body = s3.get_object(Bucket=bucket, Key=made[1]["key"])["Body"].read()
    s3.put_object(Bucket=bucket, Key=made[1]["key"], Body=body[:-1] + bytes([body[-1] ^ 1]))  # one bit
    with pytest.raises(CheckpointError, match=r"restored .* bytes that are not the .* written \(size or sha256"):
        read_shard_s3(s3, bucket, made, 0)


def test_a_rank_saves_during_training_and_runs_its_phase_in_the_bucket(rgw, s3, bucket, tmp_path):
    """`bench train` of an emulated rank over S3 with saves every 4 measured steps and a model-mode
    checkpoint phase: both go to the bucket with the node's own credentials, are timed and verified, and
    only the dataset is left in the bucket after."""
    generate_records(RecordsSpec("raw", 32, 8, 16 << 10, seed=3), tmp_path / "src")
    loc = S3Location(bucket, "weekly/records-held")
    stage_to_s3(s3, tmp_path / "src", loc)
    before = set(_listed(s3, bucket))
    data = f"s3://{bucket}/{loc.prefix}"
    args = ["--workload", "held", "--data", data, "--accelerator-s", "0.005", "--batch-size", "4"]
    args += ["--steps", "12", "--warmup-steps", "1", "--loader-threads", "1", "--backend", "ddp"]
    args += ["--metrics-out", str(tmp_path / "m"), "--checkpoint-dir", data, "--checkpoint-every-steps", "4"]
    args += ["--checkpoint-mode", "model", "--checkpoint-writes", "2", "--checkpoint-reads", "1"]
    env = os.environ | rgw.env()  # the node's own AWS variables
    done = subprocess.run([BENCH, "train", *args], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    checkpoint = json.loads((tmp_path / "m" / "summary.json").read_text())["checkpoint"]
    assert checkpoint["status"] == "done" and checkpoint["error"] is None, checkpoint
    assert checkpoint["write_mb_s"] > 0 and checkpoint["read_mb_s"] > 0 and checkpoint["read"]["cold"], checkpoint
    assert checkpoint["bytes"] > 0 and checkpoint["cleanup"] == {"removed": 4, "left": []}, checkpoint
    stall = checkpoint["stall"]
    assert stall["saves"] >= 3 and stall["bytes"] > 0 and 0 < stall["share"] < 1 and stall["left"] == [], stall
    assert set(_listed(s3, bucket)) == before  # every save and shard deleted, nothing else touched


def test_what_killed_ranks_left_is_swept_and_a_live_phases_objects_are_not(rgw, s3, bucket):
    """An object and an unfinished multipart upload under the checkpoint prefix from before the cutoff (a
    rank killed mid-phase) are deleted and aborted; ones begun after it (a live phase) and anything
    outside the prefix (the dataset) stay. The cutoff is set between the two on the store's own clock."""
    location = S3Location(bucket, "weekly")
    outside = location.key("records-held", "old.bin")
    s3.put_object(Bucket=bucket, Key=outside, Body=b"dataset")
    dead, dead_big = location.key(PREFIX, "dead", "a.pt"), location.key(PREFIX, "dead", "big.pt")
    s3.put_object(Bucket=bucket, Key=dead, Body=b"x")
    s3.create_multipart_upload(Bucket=bucket, Key=dead_big)
    time.sleep(2.5)  # the store's timestamps tell the killed phase's from the live one's
    live, live_big = location.key(PREFIX, "live", "a.pt"), location.key(PREFIX, "live", "big.pt")
    s3.put_object(Bucket=bucket, Key=live, Body=b"y")
    live_upload = s3.create_multipart_upload(Bucket=bucket, Key=live_big)["UploadId"]
    prefix = location.key(PREFIX) + "/"
    objects = {o["Key"]: o["LastModified"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]}
    uploads = {u["Key"]: u["Initiated"] for u in s3.list_multipart_uploads(Bucket=bucket, Prefix=prefix)["Uploads"]}
    killed, begun = max(objects[dead], uploads[dead_big]), min(objects[live], uploads[live_big])
    assert begun > killed, (objects, uploads)
    swept = sweep_stale(s3, location, (begun - killed).total_seconds() / 2, now=begun)
    assert swept == {"objects": 1, "uploads": 1}, swept
    left = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=location.key() + "/")["Contents"]]
    assert live in left and outside in left and dead not in left, left
    pending = [u["Key"] for u in s3.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads", [])]
    assert pending == [live_big], pending
    s3.abort_multipart_upload(Bucket=bucket, Key=live_big, UploadId=live_upload)
