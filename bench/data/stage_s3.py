"""Staging a dataset into a bucket: the store checked first, then every file uploaded (multipart, in
parallel, through boto3's transfer manager), verified by listing, and a manifest object written last.

Why the ETag is the check: the server computes it from the bytes it received (the MD5 of a single-part
object; for a multipart one, the MD5 of its parts' MD5s and the part count), so an object whose listed
size and ETag equal what this process computes from its own file holds exactly that file's bytes. The
ETag a multipart upload's completion returns is not trusted (Ceph RGW 16 returns an empty one): the
listing after the upload is. A re-staging lists first and skips every object already there and
correct; the manifest (`S3_MANIFEST`), written last, says the prefix is a complete, verified copy.

Nothing is written before `check_store` has passed: an endpoint that does not answer, a bucket that
does not exist, credentials the server refuses or a prefix holding objects scalewatch did not write
are refused, naming the setting and what the server said (never a key).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.data.location import (
    ENV_ENDPOINT,
    ENV_KEY,
    MARKER,
    S3Location,
    StoreRefused,
)
from bench.errors import StagingError

S3_MANIFEST = "MANIFEST.s3.json"
PART = 8 << 20  # multipart threshold and part size: the ETag of a local file is computed with the same
CONCURRENCY = 8
MANIFEST_VERSION = 1
_CREDENTIAL_CODES = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403"}


@dataclass(frozen=True)
class S3StageResult:
    files: int
    bytes: int
    copied: int
    skipped: int
    manifest: str  # the manifest's s3:// URL


def _server_said(error: Exception) -> tuple[str, str]:
    """(code, message) of a botocore error, as the server sent them."""
    response = getattr(error, "response", None) or {}
    err = response.get("Error", {})
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode", "")
    code = str(err.get("Code") or status or type(error).__name__)
    return code, f"{status} {code}: {err.get('Message') or error}".strip()


def check_store(client, location: S3Location) -> None:
    """Refuses, before anything is written, a store the suite cannot use (StoreRefused naming the setting
    and what the server said): the endpoint, the credentials, the bucket, then foreign objects."""
    from botocore.exceptions import ClientError, EndpointConnectionError

    try:
        client.list_buckets()
    except EndpointConnectionError as error:
        raise StoreRefused(f"{ENV_ENDPOINT}: {location.endpoint} does not answer ({error})") from None
    except ClientError as error:
        code, said = _server_said(error)
        if code in _CREDENTIAL_CODES:
            raise StoreRefused(f"{ENV_KEY}: the server refused the credentials ({said})") from None
        raise StoreRefused(f"{ENV_ENDPOINT}: {location.endpoint} answered {said}") from None
    except Exception as error:  # a timeout, a reset: the endpoint is not an S3 server that answers
        raise StoreRefused(f"{ENV_ENDPOINT}: {location.endpoint} does not answer ({error})") from None
    _check_bucket(client, location)
    _check_prefix(client, location)


def _check_bucket(client, location: S3Location) -> None:
    from botocore.exceptions import ClientError

    try:
        client.head_bucket(Bucket=location.bucket)
    except ClientError as error:
        code, said = _server_said(error)
        if code in ("404", "NoSuchBucket"):
            raise StoreRefused(
                f"dataset_path: bucket {location.bucket!r} does not exist on {location.endpoint} ({said}); "
                "create it first (scalewatch creates no buckets)"
            ) from None
        raise StoreRefused(f"dataset_path: bucket {location.bucket!r}: {said}") from None


def _check_prefix(client, location: S3Location) -> None:
    """A prefix with objects and no MARKER holds someone else's data: refused, naming a few."""
    keys = [k for k, _, _ in list_objects(client, location, limit=1000)]
    if not keys or location.key(MARKER) in keys:
        return
    listing = ", ".join(repr(k) for k in keys[:3])
    raise StoreRefused(
        f"dataset_path: {location.url} holds {len(keys)}{'+' if len(keys) >= 1000 else ''} object(s) "
        f"scalewatch did not write (e.g. {listing}); give an empty prefix or one scalewatch staged"
    )


def list_objects(client, location: S3Location, limit: int | None = None) -> Iterator[tuple[str, int, str]]:
    """(key, size, ETag without quotes) of every object under the prefix (a folder: `prefix/`)."""
    prefix = f"{location.prefix}/" if location.prefix else ""
    seen = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=location.bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            yield obj["Key"], int(obj["Size"]), obj.get("ETag", "").strip('"')
            seen += 1
            if limit is not None and seen >= limit:
                return


def expected_etag(path: Path, part: int = PART) -> tuple[str, str]:
    """(ETag the server computes for this file uploaded with `part`-byte parts, its sha256)."""
    sha, parts, whole = hashlib.sha256(), [], hashlib.md5()  # S3's ETag is MD5, not a security check
    size = path.stat().st_size
    with open(path, "rb") as f:
        while chunk := f.read(part):
            sha.update(chunk)
            parts.append(hashlib.md5(chunk).digest())
            whole.update(chunk)
    if size < part:
        return whole.hexdigest(), sha.hexdigest()
    return f"{hashlib.md5(b''.join(parts)).hexdigest()}-{len(parts)}", sha.hexdigest()


def local_files(source: Path) -> list[tuple[str, Path]]:
    """(relative name, path) of the regular files under source, hidden names skipped; a link is refused."""
    out = []
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source)
        if any(part.startswith(".") for part in rel.parts) or rel.name == S3_MANIFEST:
            continue
        if path.is_symlink():
            raise StagingError(f"{path}: is a symbolic link; staging uploads no links")
        if path.is_file():
            out.append((rel.as_posix(), path))
    if not out:
        raise StagingError(f"{source}: no files to stage")
    return out


def claim_prefix(client, location: S3Location) -> None:
    """Writes MARKER under the prefix (after check_store): the prefix is scalewatch's from now on."""
    client.put_object(Bucket=location.bucket, Key=location.key(MARKER), Body=b"scalewatch\n")


def stage_to_s3(client, source: Path, location: S3Location, concurrency: int = CONCURRENCY) -> S3StageResult:
    """Uploads source's files under the location's prefix, skipping objects already there and correct,
    verifies every one by listing (size and server ETag), then writes the manifest object last."""
    files = local_files(source)
    want = {rel: (path, path.stat().st_size, *expected_etag(path)) for rel, path in files}
    there = {k: (size, etag) for k, size, etag in list_objects(client, location)}
    todo = [rel for rel, (_, size, etag, _) in want.items() if there.get(location.key(rel)) != (size, etag)]
    if todo:
        _upload(client, location, {rel: want[rel][0] for rel in todo}, concurrency)
    _verify(client, location, want)
    manifest = {
        "version": MANIFEST_VERSION,
        "files": {rel: {"size": size, "etag": etag, "sha256": sha} for rel, (_, size, etag, sha) in want.items()},
    }
    client.put_object(
        Bucket=location.bucket, Key=location.key(S3_MANIFEST), Body=json.dumps(manifest, sort_keys=True).encode()
    )
    return S3StageResult(
        files=len(want),
        bytes=sum(v[1] for v in want.values()),
        copied=len(todo),
        skipped=len(want) - len(todo),
        manifest=f"s3://{location.bucket}/{location.key(S3_MANIFEST)}",
    )


def _upload(client, location: S3Location, paths: dict[str, Path], concurrency: int) -> None:
    """Every file at once through one transfer manager: parts of large files and small files in parallel."""
    from boto3.s3.transfer import TransferConfig
    from s3transfer.manager import TransferManager

    config = TransferConfig(
        multipart_threshold=PART, multipart_chunksize=PART, max_concurrency=concurrency, use_threads=True
    )
    failed = []
    with TransferManager(client, config) as manager:
        futures = {rel: manager.upload(str(path), location.bucket, location.key(rel)) for rel, path in paths.items()}
        for rel, future in futures.items():
            try:
                future.result()
            except Exception as error:  # each failure is named below, none hidden
                failed.append(f"{rel}: {_server_said(error)[1]}")
    if failed:
        raise StagingError(
            f"{location.url}: {len(failed)} upload(s) failed ({'; '.join(failed[:3])}); nothing recorded as staged"
        )


def _verify(client, location: S3Location, want: dict[str, tuple]) -> None:
    """Every file's object listed with its size and the ETag its bytes give: else StagingError naming it."""
    there = {k: (size, etag) for k, size, etag in list_objects(client, location)}
    bad = []
    for rel, (_, size, etag, _) in want.items():
        got = there.get(location.key(rel))
        if got != (size, etag):
            bad.append(f"{rel} (want {size} B etag {etag}, server lists {got or 'nothing'})")
    if bad:
        raise StagingError(f"{location.url}: {len(bad)} object(s) failed verification: {'; '.join(bad[:3])}")


def load_s3_manifest(client, location: S3Location) -> dict:
    """The staged prefix's manifest; a prefix without one is not a staged dataset (DatasetError)."""
    from botocore.exceptions import ClientError

    from bench.data.dataset import inside
    from bench.errors import DatasetError

    try:
        body = client.get_object(Bucket=location.bucket, Key=location.key(S3_MANIFEST))["Body"].read()
    except ClientError as error:
        raise DatasetError(f"{location.url}: not a staged dataset ({_server_said(error)[1]})") from None
    where = f"{location.url}/{S3_MANIFEST}"
    try:
        doc = json.loads(body)
    except ValueError as error:
        raise DatasetError(f"{where}: not valid JSON ({error})") from None
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, dict):
        raise DatasetError(f"{where}: 'files' must be an object of {{name: {{size, etag, sha256}}}}")
    for name, entry in files.items():
        if not inside(name):
            raise DatasetError(f"{where}: file name {name!r} is not an object of this prefix")
        size = entry.get("size") if isinstance(entry, dict) else None
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise DatasetError(f"{where}: {name}: size {size!r} is not a byte count")
    return doc
