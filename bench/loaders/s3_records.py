"""The emulated ranks' read path over S3 (issue 64): every record of a records dataset staged into a bucket
(bench.suite.staging_s3) read by a ranged GET through boto3, decoded when the workload asks, then dropped,
as bench.loaders.records reads them from files.

The GETs, their byte and error counters and their retries are bench.loaders.s3_get's (CountedGets),
shared with the image models' reader.
"""

from __future__ import annotations

import json

import torch
from torch.utils.data import Dataset

from bench.data.location import S3Location, node_s3_client, parse_location
from bench.data.records import RECORDS_MANIFEST
from bench.errors import DatasetError
from bench.loaders.base import LoaderOptions
from bench.loaders.records import RecordsLoader, decode_record
from bench.loaders.s3_get import CountedGets


def load_s3_records(client, location: S3Location, fmt: str | None) -> dict:
    """The staged prefix's records manifest, every file in it listed by the verified staging manifest
    with the same size (a DatasetError naming the object otherwise)."""
    from botocore.exceptions import ClientError

    from bench.data.stage_s3 import load_s3_manifest

    staged = load_s3_manifest(client, location)["files"]
    try:
        body = client.get_object(Bucket=location.bucket, Key=location.key(RECORDS_MANIFEST))["Body"]
        manifest = json.loads(body.read())
    except (ClientError, ValueError) as error:
        raise DatasetError(f"{location.url}/{RECORDS_MANIFEST}: not a readable records manifest ({error})") from None
    if fmt is not None and manifest.get("format") != fmt:
        found = manifest.get("format")
        raise DatasetError(f"{location.url}/{RECORDS_MANIFEST}: format {found}, the workload declares {fmt}")
    for entry in manifest.get("files", []):
        name = entry.get("name")
        if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
            raise DatasetError(f"{location.url}/{RECORDS_MANIFEST}: file name {name!r} is not an object of this prefix")
        if staged.get(name, {}).get("size") != entry.get("bytes"):
            raise DatasetError(
                f"{location.url}/{name}: listed in {RECORDS_MANIFEST} with {entry.get('bytes')} bytes but staged "
                f"with {staged.get(name, {}).get('size', 'none')}"
            )
    return manifest


class _S3Records(Dataset):
    """Sample i: (object, offset, length), read by one ranged GET (bench.loaders.s3_get.CountedGets)."""

    def __init__(self, gets: CountedGets, manifest: dict, decode: bool) -> None:
        self.gets, self.format, self.decode = gets, manifest["format"], decode
        self.samples = [(f["name"], o, n) for f in manifest["files"] for o, n in f["records"]]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        name, offset, length = self.samples[index]
        data = self.gets.get(name, offset, length, what="record")
        if self.decode:
            decode_record(self.format, data)
        return {"bytes": torch.tensor(len(data)), "index": torch.tensor(index)}


def s3_records_loader(
    url: str, opts: LoaderOptions, fmt: str | None, decode: bool, shuffle: bool, prefetch: int
) -> RecordsLoader:
    """The staged records under `url` (s3://BUCKET/PREFIX), read by ranged GETs with the node's own
    credentials (bench.data.location.node_s3_client). Its `received` counts the bytes
    this rank's GETs brought back, all workers together."""
    location = parse_location(url)
    assert isinstance(location, S3Location)
    manifest = load_s3_records(node_s3_client(), location, fmt)
    gets = CountedGets(location)
    loader = RecordsLoader(_S3Records(gets, manifest, decode), opts, shuffle, prefetch, gets.received)
    loader.dataset_bytes = sum(int(f["bytes"]) for f in manifest["files"])  # the staged objects' bytes
    loader.get_errors = gets.errors  # the GET tries that failed (retried): the summary's storage.s3_get_errors
    return loader
