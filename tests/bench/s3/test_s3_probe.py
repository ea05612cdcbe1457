"""The read ceiling over S3 (bench.storage.s3_probe) against a real Ceph RGW: a blkio read throttle on
the OSD's device is what the probe finds, and a GET that fails makes the figure inconclusive."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from subprocess import PIPE

import pytest

from bench.data.location import S3Location, credentials_from_env, s3_client
from bench.data.stage_s3 import stage_to_s3
from bench.storage.s3_probe import METHOD, S3ProbeSettings, probe_s3
from tests.infra.ceph_rgw import osd_throttle

pytestmark = pytest.mark.slow
THROTTLE = 20 << 20  # bytes/s on the OSD's device


def _staged(s3, bucket: str, tmp_path, objects: int, size: int) -> S3Location:
    source = tmp_path / "src"
    source.mkdir()
    for i in range(objects):
        (source / f"{i:04d}.bin").write_bytes(os.urandom(size))
    loc = S3Location(bucket, "probe")
    stage_to_s3(s3, source, loc)
    return loc


@pytest.mark.rates
def test_the_ceiling_over_s3_is_a_blkio_read_throttle_on_the_osd(rgw, s3, bucket, tmp_path):
    """288 MB of 6 MiB objects (fresh ranges for every level at ~21 MB/s); the OSD's device held at
    20 MiB/s: the probe's ceiling is within 10% of it, its levels fresh, the result conclusive."""
    loc = _staged(s3, bucket, tmp_path, objects=48, size=6 << 20)
    creds = credentials_from_env(rgw.env())
    with osd_throttle(rgw, THROTTLE, "read"):
        result = probe_s3(lambda: s3_client(creds), [loc], S3ProbeSettings(max_streams=4, seconds=2.0))
    assert result.conclusive, result.reason
    assert result.method == METHOD and result.block_size == 4 << 20
    assert all(lv["fresh"] for lv in result.levels), result.levels
    want = THROTTLE / 1e6
    assert abs(result.ceiling_mb_s - want) / want < 0.10, (result.ceiling_mb_s, result.levels, result.repeat)


def test_a_failed_get_makes_the_probe_inconclusive_naming_the_count(rgw, s3, bucket, tmp_path):
    """An object the manifest lists is gone from the store: its GETs fail, are counted and named, and the
    ceiling is not called (never a silently shorter read)."""
    loc = _staged(s3, bucket, tmp_path, objects=8, size=256 << 10)
    s3.delete_object(Bucket=bucket, Key=loc.key("0003.bin"))
    creds = credentials_from_env(rgw.env())
    result = probe_s3(lambda: s3_client(creds), [loc], S3ProbeSettings(max_streams=2, seconds=0.5))
    assert not result.conclusive
    assert "GET(s) failed" in result.reason and "0003.bin" in result.reason and "NoSuchKey" in result.reason


def test_each_nodes_share_of_a_level_reads_disjoint_ranges_over_one_window(rgw, s3, bucket, tmp_path):
    """Two nodes' shares of a multi-node level, started as bench.suite.node_probe starts them (the probe's
    entry point, the nodes' own AWS variables, one start time): each result passes the suite's node-result
    check, the shares are 0 and 1 of 2, and the bytes both report are what the server sent for their GETs
    (the manifest each node read besides: under 2%)."""
    from bench.suite.node_probe import NodeOutput, ShareDoc, node_doc

    loc = _staged(s3, bucket, tmp_path, objects=24, size=1 << 20)
    before = rgw.usage_bytes_sent()
    start_at = time.time() + 3.0
    argv = [sys.executable, "-P", "-m", "bench.storage.probe_cli", "--path", loc.url, "--seconds", "1"]
    argv += ["--offset", "5", "--jobs", "2", "--start-at", str(start_at)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | rgw.env()
    procs = [subprocess.Popen([*argv, "--share", f"{i}/2"], env=env, cwd="/", stdout=PIPE, stderr=PIPE, text=True)
             for i in range(2)]  # fmt: skip
    docs = []
    for i, proc in enumerate(procs):
        out, err = proc.communicate(timeout=120)
        docs.append(node_doc(NodeOutput(f"node{i}", proc.returncode, out, err), model=ShareDoc))
    assert sorted((d["share"], d["of"]) for d in docs) == [(0, 2), (1, 2)], docs
    assert all(d["method"] == "s3-ranged-GET" and d["bytes"] > 0 and d["started_at"] >= start_at for d in docs), docs
    read = sum(d["bytes"] for d in docs)
    sent = rgw.usage_bytes_sent_settled(before + read) - before
    assert sent == pytest.approx(read, rel=0.02), (sent, read)
