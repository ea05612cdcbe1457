"""Emulated ranks reading their records over S3 (issue 64 item 3-4) from a real Ceph RGW: every record by a
ranged GET, the bytes each rank received counted (`bytes_source` `s3`) and cross-checked against the
server's own count (RGW's usage log) within 2%; a records manifest that does not match the staged
objects is refused before any record is read."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import torch

from bench.config.models import SweepConfig, TrainConfig
from bench.data.location import S3Location
from bench.data.records import RECORDS_MANIFEST, RecordsSpec, generate_records
from bench.data.stage_s3 import stage_to_s3
from bench.errors import ConfigError, DatasetError
from bench.loaders.base import Shard
from bench.loaders.registry import build_loader
from bench.loaders.s3_records import load_s3_records
from bench.metrics.schema import validate_summary
from tests.conftest import BENCH

FILES, PER_FILE, RECORD = 32, 4, 64 << 10  # 8 MiB of records, 128 of them


def _staged(s3, bucket: str, tmp_path) -> tuple[S3Location, dict]:
    manifest = generate_records(RecordsSpec("raw", FILES, PER_FILE, RECORD, seed=3), tmp_path / "src")
    loc = S3Location(bucket, "weekly/records-held")
    stage_to_s3(s3, tmp_path / "src", loc)
    return loc, manifest


@pytest.mark.slow
def test_an_emulated_rank_reads_its_records_over_s3_and_the_server_counts_the_same_bytes(rgw, s3, bucket, tmp_path):
    loc, manifest = _staged(s3, bucket, tmp_path)
    records = sum(n for f in manifest["files"] for _, n in f["records"])
    before = rgw.usage_bytes_sent()
    args = ["--workload", "held", "--data", f"s3://{bucket}/{loc.prefix}", "--accelerator-s", "0.005"]
    args += ["--batch-size", "4", "--epochs", "1", "--warmup-steps", "0", "--loader-threads", "2"]
    args += ["--metrics-out", str(tmp_path / "m"), "--sample-interval", "0.2", "--backend", "ddp"]
    env = os.environ | rgw.env()  # the node's own AWS variables: the rank reads its endpoint and keys there
    done = subprocess.run([BENCH, "train", *args], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = json.loads((tmp_path / "m" / "summary.json").read_text())
    validate_summary(summary)
    storage, epoch = summary["storage"], summary["epochs"][0]
    assert storage["bytes_source"] == "s3" and not storage["cache_risk"], storage
    assert storage["dataset_bytes"] == sum(f["bytes"] for f in manifest["files"]), storage
    # every record once, every byte of it over the wire: what the rank consumed is what its GETs received
    assert epoch["bytes_consumed"] == records and epoch["bytes_from_storage"] == pytest.approx(records, rel=0.001)
    assert storage["bandwidth_note"] in (
        "",
        f"epoch-1 reads lasted {epoch['seconds']:.1f}s, under 5s: too short for a rate",
    )
    # the server's own count of what it sent for GETs: the records plus the two manifests the rank read
    sent = rgw.usage_bytes_sent_settled(before + records) - before
    assert sent == pytest.approx(epoch["bytes_from_storage"], rel=0.02), (sent, epoch["bytes_from_storage"])


def test_a_records_manifest_that_does_not_match_the_staged_objects_is_refused(rgw, s3, bucket, tmp_path):
    loc, manifest = _staged(s3, bucket, tmp_path)
    assert len(load_s3_records(s3, loc, "raw")["files"]) == FILES
    with pytest.raises(DatasetError, match="format raw, the workload declares npz"):
        load_s3_records(s3, loc, "npz")
    manifest["files"][5]["bytes"] += 1  # an object that is not the size the staging verified
    s3.put_object(Bucket=bucket, Key=loc.key(RECORDS_MANIFEST), Body=json.dumps(manifest).encode())
    with pytest.raises(DatasetError, match=f"{manifest['files'][5]['name']}: listed in records.json"):
        load_s3_records(s3, loc, "raw")
    manifest["files"][5]["name"] = "../other/x.bin"  # a name that climbs out of the prefix
    s3.put_object(Bucket=bucket, Key=loc.key(RECORDS_MANIFEST), Body=json.dumps(manifest).encode())
    with pytest.raises(DatasetError, match="is not an object of this prefix"):
        load_s3_records(s3, loc, "raw")


def test_what_cannot_read_a_bucket_is_refused_naming_the_field(tmp_path):
    ok = TrainConfig(workload="held", data="s3://bench-data/weekly", accelerator_s=0.01, epochs=1)
    assert ok.data == "s3://bench-data/weekly"
    with pytest.raises(ValueError, match="bucket 'Bad_Bucket'"):
        TrainConfig(workload="held", data="s3://Bad_Bucket/x", accelerator_s=0.01, epochs=1)
    with pytest.raises(ValueError, match="warm_cache: s3://bench-data/weekly is an S3 location"):
        warm = {"warm_cache": True, "drop_caches": False}
        TrainConfig(workload="held", data="s3://bench-data/weekly", accelerator_s=0.01, epochs=1, **warm)
    # a suite: an image model reads a bucket through the torch loader (DALI's S3 reader counts no bytes)
    suite = {"dataset_path": "s3://bench-data/weekly", "output_dir": tmp_path / "out"}
    image_model = {"workloads": ("ssd",), "gpus": (1,), **suite}
    with pytest.raises(ValueError, match=r"loader: dali; dataset_path s3://bench-data/weekly is an S3 location"):
        SweepConfig(train=TrainConfig(workload="ssd", data="s3://bench-data/weekly/coco", steps=4), **image_model)
    torch_read = TrainConfig(workload="ssd", data="s3://bench-data/weekly/coco", steps=4, loader="torch")
    assert SweepConfig(train=torch_read, loader="torch", **image_model).resolved_ideal() == "linear"
    with pytest.raises(ValueError, match="stage_on: node stages onto a node's file system"):
        train = TrainConfig(workload="unet3d-h100", data="s3://bench-data/weekly/x", accelerator_s=0.01, steps=4)
        SweepConfig(workloads=("unet3d-h100",), gpus=(1,), train=train, stage_on="node", **suite)
    # an S3 connection names where the worker stages a bucket: beside a folder it is a mistake, named
    with pytest.raises(ValueError, match="aws_conn_id: names the S3 connection 'sw_s3', but dataset_path"):
        train = TrainConfig(workload="unet3d-h100", data=tmp_path / "d", accelerator_s=0.01, steps=4)
        SweepConfig(
            workloads=("unet3d-h100",),
            gpus=(1,),
            train=train,
            dataset_path=tmp_path,
            output_dir=tmp_path / "out",
            aws_conn_id="sw_s3",
        )
    # the rank's door says the same to a hand-run `bench train --data s3://... --loader dali` of a real model
    rank = TrainConfig(workload="ssd", data="s3://bench-data/weekly", epochs=1, loader="dali")
    refused = r"--loader dali: --data s3://bench-data/weekly is an S3 location; .* --loader torch"
    with pytest.raises(ConfigError, match=refused):
        build_loader(rank, None, Shard(0, 1), torch.device("cpu"))
