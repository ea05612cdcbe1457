"""The emulated ranks' read path over S3 (issue 64): every record of a records dataset staged into a bucket
(bench.suite.staging_s3) read by a ranged GET through boto3, decoded when the workload asks, then dropped,
as bench.loaders.records reads them from files.

Why boto3 GETs in the loader's worker processes: each worker opens its own client (a client is not
safe across fork), so `threads` workers are `threads` connections in flight, as MLPerf Storage's object
readers run them. No client-side cache sits in between: every byte a rank consumed crossed the wire.

The bytes each rank received are counted in a shared counter (`received`), sampled like the file
counters (bench.metrics.sources.s3: `bytes_source` `s3`); a GET that came back short is an error, not a
smaller record (a body cut short is botocore's IncompleteReadError, tried again below; a whole
response of the wrong size is a DatasetError at once). The manifest is the staged prefix's own
`records.json`, its files checked against the verified staging manifest (MANIFEST.s3.json) before any record is read.

A store that drops connections: each GET is tried GET_ATTEMPTS times (GET_BACKOFF_S doubling between
tries), here and not inside boto3, so that every failed try is counted (`errors`, shared by the
workers); the rank's summary carries the count and the verdict makes such a scale INCONCLUSIVE naming
it (its figures hold the store's stalls). A record whose every try failed ends the run (StorageLost),
as a lost mount does: never a silently shorter epoch.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time

import torch
from torch.utils.data import Dataset

from bench.data.location import S3Location, node_s3_client, parse_location
from bench.data.records import RECORDS_MANIFEST
from bench.errors import DatasetError, StorageLost
from bench.loaders.base import LoaderOptions
from bench.loaders.records import RecordsLoader, decode_record


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


GET_ATTEMPTS = 5
GET_BACKOFF_S = 0.5  # before the 2nd try; doubled before each next one (7.5 s over all five)


def _retryable() -> tuple[type[Exception], ...]:
    """What a dropped or refused connection, a timeout or a 5xx raises in botocore."""
    from botocore import exceptions as e

    return (
        e.ClientError,
        e.ConnectionError,  # refused, a connect timeout (botocore's, not the builtin)
        e.ConnectionClosedError,  # reset or closed before the response
        e.IncompleteReadError,
        e.ReadTimeoutError,
        e.ResponseStreamingError,
    )


# What a busy or throttling store answers with, worth another try (besides any 5xx)
BUSY_CODES = frozenset({"SlowDown", "RequestTimeout", "Throttling", "ThrottlingException", "RequestLimitExceeded"})


def _server_side(error: Exception) -> bool:
    """An error the server may not repeat: no response at all (a dropped or refused connection), a 5xx,
    a 429 or a busy store's code; other ClientErrors (403, 404) are answers, never tried again."""
    response = getattr(error, "response", None)
    if not isinstance(response, dict):
        return True
    status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    return status >= 500 or status == 429 or response.get("Error", {}).get("Code") in BUSY_CODES


class _S3Records(Dataset):
    """Sample i: (object, offset, length), read by one ranged GET on this process's own client."""

    def __init__(self, location: S3Location, manifest: dict, decode: bool, received, errors) -> None:
        self.location, self.format, self.decode, self.received = location, manifest["format"], decode, received
        self.errors = errors
        self.samples = [(f["name"], o, n) for f in manifest["files"] for o, n in f["records"]]
        self._client, self._pid = None, None

    def __len__(self) -> int:
        return len(self.samples)

    def _connection(self):
        if self._client is None or self._pid != os.getpid():  # a forked worker opens its own
            self._client, self._pid = node_s3_client(retries=1), os.getpid()  # every try is ours to count
        return self._client

    def _get(self, key: str, offset: int, length: int) -> bytes:
        """One ranged GET, tried up to GET_ATTEMPTS times; each failed try counted in `errors`."""
        retryable = _retryable()
        wait, last = GET_BACKOFF_S, ""
        for attempt in range(GET_ATTEMPTS):
            if attempt:
                time.sleep(wait)
                wait *= 2
            try:
                body = self._connection().get_object(
                    Bucket=self.location.bucket, Key=key, Range=f"bytes={offset}-{offset + length - 1}"
                )["Body"]
                data = body.read()
            except retryable as error:
                if not _server_side(error):
                    raise
                last = f"{type(error).__name__}: {error}"
            else:
                with self.received.get_lock():
                    self.received.value += len(data)
                if len(data) != length:  # a whole response of the wrong size: the object, not the wire
                    raise DatasetError(
                        f"s3://{self.location.bucket}/{key}: a GET of {length} bytes at {offset} returned "
                        f"{len(data)} (the object is not what the manifest says, or the store ignored Range)"
                    )
                return data
            with self.errors.get_lock():
                self.errors.value += 1
        raise StorageLost(
            f"s3://{self.location.bucket}/{key}: {GET_ATTEMPTS} GETs of the record at {offset} failed ({last}): "
            "the store dropped or refused the connections"
        )

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        name, offset, length = self.samples[index]
        data = self._get(self.location.key(name), offset, length)
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
    received = multiprocessing.Value("q", 0)  # shared with the forked workers
    errors = multiprocessing.Value("q", 0)
    loader = RecordsLoader(_S3Records(location, manifest, decode, received, errors), opts, shuffle, prefetch, received)
    loader.dataset_bytes = sum(int(f["bytes"]) for f in manifest["files"])  # the staged objects' bytes
    loader.get_errors = errors  # the GET tries that failed (retried): the summary's storage.s3_get_errors
    return loader
