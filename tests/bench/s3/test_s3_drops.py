"""A store that drops connections mid-epoch (issue 64, bad input): the real Ceph RGW behind a proxy that
resets every connection for a while (tests/infra/drop_proxy.py), as a gateway or load balancer does. A
short drop: every GET is tried again, the epoch reads every record (never a silently shorter epoch), the
failed tries are counted and the scale is INCONCLUSIVE naming the count. A drop longer than the tries
last: the run fails naming the record and the count, as a lost mount does."""

from __future__ import annotations

import json
import os
import subprocess

import pandas as pd
import pytest

from bench.analysis.verdict.rules import measurement_problems
from bench.config.models import Thresholds
from bench.data.location import S3Location
from bench.data.records import RecordsSpec, generate_records
from bench.data.stage_s3 import stage_to_s3
from bench.loaders.s3_get import GET_ATTEMPTS
from tests.conftest import BENCH
from tests.infra.drop_proxy import drop_proxy

pytestmark = pytest.mark.slow

FILES, PER_FILE, RECORD = 64, 16, 16 << 10  # 1,024 records, 16 MiB


def _train(rgw, data: str, endpoint: str, out) -> subprocess.CompletedProcess:
    """One emulated rank reading the bucket through `endpoint` (the proxy), its node's own keys."""
    args = ["--workload", "held", "--data", data, "--accelerator-s", "0.02", "--batch-size", "4"]
    args += ["--epochs", "1", "--warmup-steps", "2", "--loader-threads", "2", "--backend", "ddp"]
    args += ["--metrics-out", str(out), "--sample-interval", "0.2"]
    env = os.environ | rgw.env() | {"AWS_ENDPOINT_URL": endpoint}
    return subprocess.run([BENCH, "train", *args], capture_output=True, text=True, timeout=300, env=env)


def _staged(s3, bucket: str, tmp_path) -> str:
    generate_records(RecordsSpec("raw", FILES, PER_FILE, RECORD, seed=5), tmp_path / "src")
    loc = S3Location(bucket, "weekly/records-held")
    stage_to_s3(s3, tmp_path / "src", loc)
    return f"s3://{bucket}/{loc.prefix}"


def test_a_short_drop_is_retried_counted_and_makes_the_scale_inconclusive(rgw, s3, bucket, tmp_path):
    data = _staged(s3, bucket, tmp_path)
    with drop_proxy(rgw.endpoint) as proxy:
        dropper = proxy.drop_when(forwarded=4 << 20, seconds=1.0)  # a quarter into the epoch, 1 s
        done = _train(rgw, data, proxy.endpoint, tmp_path / "m")
        dropper.join(timeout=5)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert proxy.resets > 0
    summary = json.loads((tmp_path / "m" / "summary.json").read_text())
    errors, epoch = summary["storage"].get("s3_get_errors"), summary["epochs"][0]
    assert errors and errors > 0, summary["storage"]
    # every record read, every byte of it: the drop cost time, never records
    assert epoch["images"] == FILES * PER_FILE and epoch["bytes_consumed"] == FILES * PER_FILE * RECORD, epoch
    # the verdict's door: such a scale's figures are not the store's steady state
    row = {"valid": True, "throughput_img_s": summary["images_per_s"], "storage_errors": errors}
    row |= {"measured_s": summary["measured_s"], "min_measure_s": 0.0, "step_time_spread": 0.1}
    (why,) = measurement_problems(pd.DataFrame([row]), Thresholds())
    assert why.startswith(f"the store failed {errors} GET(s) that the ranks tried again"), why
    clean = measurement_problems(pd.DataFrame([row | {"storage_errors": 0}]), Thresholds())
    assert clean.tolist() == [""]


def test_a_drop_longer_than_the_tries_fails_the_run_naming_the_record(rgw, s3, bucket, tmp_path):
    data = _staged(s3, bucket, tmp_path)
    with drop_proxy(rgw.endpoint) as proxy:
        proxy.drop_when(forwarded=4 << 20, seconds=30.0)
        done = _train(rgw, data, proxy.endpoint, tmp_path / "m")
    assert done.returncode != 0, (proxy.resets, proxy.forwarded, proxy.dropped_at, done.stdout[-500:])
    assert f"{GET_ATTEMPTS} GETs of the record at" in done.stderr, done.stderr[-3000:]
    assert "the store dropped or refused the connections" in done.stderr
    assert not (tmp_path / "m" / "summary.json").exists()  # no valid summary of a run cut short


def test_only_a_store_that_did_not_answer_or_was_busy_is_tried_again():
    """A 403 or 404 is the store's answer: never tried again, never counted as a drop."""
    from botocore.exceptions import ClientError, ConnectionClosedError

    from bench.loaders.s3_get import server_side as _server_side

    def answered(status: int, code: str) -> ClientError:
        return ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject")

    assert _server_side(ConnectionClosedError(endpoint_url="http://x"))
    assert _server_side(answered(503, "ServiceUnavailable")) and _server_side(answered(429, "TooManyRequests"))
    assert _server_side(answered(400, "RequestTimeout")) and _server_side(answered(503, "SlowDown"))
    assert not _server_side(answered(403, "AccessDenied")) and not _server_side(answered(404, "NoSuchKey"))
