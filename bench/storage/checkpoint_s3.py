"""Checkpoint write and restore over S3 (issue 64 item 6): the checkpoint phase of bench.storage.checkpoint
with its shards as objects in the suite's bucket, and the saves during training as PUTs.

What a rank does (`run_rank_s3`), meeting the other ranks at the same points as on files:
- `writes` times, all ranks at once: its shard (the same bytes as on files: DeepSpeed's names, a size's
  raw never-repeating blocks or the model's torch.save) uploaded under a fresh prefix rank 0 picks
  (`<dataset prefix>/scalewatch-checkpoints/<random>/global_step{i}/...`), multipart in MULTIPART_CHUNK
  parts with PARALLEL_PARTS in flight, as a checkpoint writer does; timed to the upload's completion.
- Each object is verified after the write: HEAD's size must be what was sent. Its ETag is not relied on:
  the Ceph RGW this is tested against (16.2) returns an empty ETag on CompleteMultipartUpload, so the
  content is verified by the reader instead (sha256 of what was sent, shared through the meeting, against
  sha256 of what the restore received). A mismatch is a CheckpointError, never a figure.
- `reads` times, all ranks at once: the shard of the rank `read_partners` picks (another node where
  there is one), by GET; every read is cold on the client (nothing here caches), while the store's own
  cache is out of reach, as it is for a NAS.
- Then it deletes the objects it wrote, and only those (by the keys it made; the prefix is random, so no
  one else's object is there).

The node's own credentials (bench.data.location.node_s3_client); the worker's keys never reach a rank.
"""

from __future__ import annotations

import hashlib
import io
import secrets
import socket
import time
from collections.abc import Callable
from typing import Any

from bench.config.checkpoint import CheckpointSpec
from bench.data.location import S3Location
from bench.storage.checkpoint_files import (
    CHUNK,
    KINDS,
    CheckpointError,
    Pattern,
    Shard,
    States,
    shard_names,
    step_folder,
)

MULTIPART_CHUNK = 8 << 20  # bytes per part (s3transfer's default), and the threshold for multipart
PARALLEL_PARTS = 4  # parts in flight per rank, as a checkpoint writer's upload does
PREFIX = "scalewatch-checkpoints"


def transfer_config():
    """Multipart upload above MULTIPART_CHUNK, PARALLEL_PARTS parts at once, on threads."""
    from boto3.s3.transfer import TransferConfig

    return TransferConfig(
        multipart_threshold=MULTIPART_CHUNK,
        multipart_chunksize=MULTIPART_CHUNK,
        max_concurrency=PARALLEL_PARTS,
        use_threads=True,
    )


class _HashedStream(io.RawIOBase):
    """A shard's bytes as a readable stream, hashed as the upload reads them: a size shard's pattern is
    generated as it goes (no shard-sized buffer), a model's states are torch.saved once into memory."""

    def __init__(self, shard: Shard, kind: str) -> None:
        self.sha = hashlib.sha256()
        self.sent = 0
        if shard.states is not None:
            import torch

            held = io.BytesIO()
            torch.save(shard.states[kind], held)
            self._source: Callable[[int], bytes] = io.BytesIO(held.getvalue()).read
        else:
            assert shard.pattern is not None
            self._left, self._pattern, self._pending = shard.sizes[kind], shard.pattern, b""
            self._source = self._from_pattern

    def _from_pattern(self, n: int) -> bytes:
        while len(self._pending) < n and self._left > 0:
            chunk = bytes(self._pattern.chunk(min(CHUNK, self._left)))
            self._left -= len(chunk)
            self._pending += chunk
        out, self._pending = self._pending[:n], self._pending[n:]
        return out

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        data = self._source(n if n is not None and n >= 0 else 1 << 62)
        self.sha.update(data)
        self.sent += len(data)
        return data


def _key(root: str, step: int, rank: int, kind: str) -> str:
    return f"{root}/{step_folder(step)}/{shard_names(rank)[kind]}"


def _stored(client, bucket: str, key: str, sent: int) -> int:
    """The object's size by HEAD right after its upload, which must be what was sent (the ETag is not
    relied on: empty on this RGW's multipart completion); a CheckpointError naming the object otherwise."""
    size = int(client.head_object(Bucket=bucket, Key=key)["ContentLength"])
    if size != sent:
        raise CheckpointError(f"s3://{bucket}/{key}: the store holds {size} bytes after a write of {sent}")
    return size


def write_shard_s3(client, bucket: str, root: str, step: int, rank: int, shard: Shard, made: list[dict]) -> dict:
    """One checkpoint of this rank: each kind uploaded (multipart), timed to completion, then verified
    by HEAD (its size); each object's key, size and sha256 go to `made` as soon as it is complete."""
    config = transfer_config()
    total, seconds = 0, 0.0
    for kind in KINDS:
        key = _key(root, step, rank, kind)
        stream = _HashedStream(shard, kind)
        start = time.perf_counter()
        try:
            client.upload_fileobj(stream, bucket, key, Config=config)
        finally:  # an upload cut short may have completed: the key is ours to delete either way
            made.append({"key": key, "step": step, "bytes": stream.sent, "sha256": stream.sha.hexdigest()})
        seconds += time.perf_counter() - start
        total += _stored(client, bucket, key, stream.sent)
    return {"step": step, "bytes": total, "seconds": seconds}


def read_shard_s3(client, bucket: str, objects: list[dict], step: int) -> dict:
    """Another rank's checkpoint by GET, timed, each object's size and sha256 checked against its writer's."""
    total, seconds = 0, 0.0
    for obj in objects:
        sha, got = hashlib.sha256(), 0
        start = time.perf_counter()
        body = client.get_object(Bucket=bucket, Key=obj["key"])["Body"]
        for chunk in body.iter_chunks(CHUNK):
            sha.update(chunk)
            got += len(chunk)
        seconds += time.perf_counter() - start
        if got != obj["bytes"] or sha.hexdigest() != obj["sha256"]:
            raise CheckpointError(
                f"s3://{bucket}/{obj['key']}: restored {got} bytes that are not the {obj['bytes']} written "
                "(size or sha256 differs)"
            )
        total += got
    cold = {"resident_before": 0, "cold": True, "storage_bytes": total}  # nothing on the client caches
    return {"step": step, "bytes": total, "seconds": seconds, **cold}


def delete_own(client, bucket: str, made: list[dict]) -> tuple[int, list[str]]:
    """Delete the objects this rank wrote, by their keys; (how many, what was left and why)."""
    removed, left = 0, []
    for obj in made:
        try:
            client.delete_object(Bucket=bucket, Key=obj["key"])
            removed += 1
        except Exception as error:  # the store's own refusal: named, the phase's figures stand
            left.append(f"s3://{bucket}/{obj['key']}: not deleted ({type(error).__name__}: {error})")
    return removed, left


# Every object the phase or a save writes is deleted within minutes of its write (delete_own, S3Stall):
# one older than this under PREFIX, or a multipart upload begun before it, is what a killed rank left.
STALE_AFTER_S = 24 * 3600


def sweep_stale(client, location: S3Location, older_than_s: float = STALE_AFTER_S, now=None) -> dict[str, int]:
    """What killed ranks left under `location`'s PREFIX (a rank killed mid-phase deletes nothing, and an
    unfinished multipart upload keeps its parts, billed, until aborted): objects modified and uploads
    begun more than `older_than_s` before `now` (the store's clock, read from what it lists), deleted and
    aborted one by one (DeleteObjects' checksum rules differ between stores). {objects, uploads}."""
    from datetime import UTC, datetime, timedelta

    cutoff = (now or datetime.now(UTC)) - timedelta(seconds=older_than_s)
    prefix, bucket = location.key(PREFIX) + "/", location.bucket
    stale = [
        obj["Key"]
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for obj in page.get("Contents", [])
        if obj["LastModified"] < cutoff
    ]
    for key in stale:
        client.delete_object(Bucket=bucket, Key=key)
    uploads = [
        (up["Key"], up["UploadId"])
        for page in client.get_paginator("list_multipart_uploads").paginate(Bucket=bucket, Prefix=prefix)
        for up in page.get("Uploads", [])
        if up["Initiated"] < cutoff
    ]
    for key, upload_id in uploads:
        client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
    return {"objects": len(stale), "uploads": len(uploads)}


def run_rank_s3(
    rank: int,
    world: int,
    location: S3Location,
    spec: CheckpointSpec,
    sync,
    client,
    states: States | None = None,
    host: str | None = None,
) -> dict:
    """This rank's part of the checkpoint phase in `location`'s bucket, the record run_rank gives on files
    (docs/schemas.md; `residency` None: nothing on the client caches). Collective, as run_rank."""
    from bench.storage.checkpoint import read_partners, shard_sizes

    sizes = shard_sizes(rank, world, spec, states)
    me = {"host": host or socket.gethostname(), "bytes": sum(sizes.values())}
    peers = sync.allgather(me)
    partner = read_partners([p["host"] for p in peers])[rank]
    plan = sync.allgather({"root": location.key(PREFIX, secrets.token_hex(8)), "seed": secrets.randbits(63)})[0]
    model = spec.mode == "model"
    shard = Shard(sizes, None if model else Pattern(plan["seed"], rank), states if model else None)
    made: list[dict] = []
    writes: list[dict] = []
    reads: list[dict] = []
    try:
        for step in range(spec.writes):
            sync.allgather(None)  # a checkpoint is a burst: every rank starts it together
            writes.append(write_shard_s3(client, location.bucket, plan["root"], step, rank, shard, made))
        written = sync.allgather(made)[partner]
        for i in range(spec.reads):
            step = i % spec.writes
            sync.allgather(None)
            mine = [o for o in written if o["step"] == step]
            reads.append(read_shard_s3(client, location.bucket, mine, step))
        sync.allgather(None)  # every read done before any rank deletes its objects
    finally:
        removed, left = delete_own(client, location.bucket, made)
    return {
        "rank": rank,
        "host": me["host"],
        "domain": me["host"],
        "read_from": partner,
        "other_node": peers[partner]["host"] != me["host"],
        "residency": None,
        "writes": writes,
        "reads": reads,
        "cleanup": {"removed": removed, "left": left},
    }


def stall_key(location: S3Location, name: str) -> str:
    """The object key of a save during training, under the checkpoints' prefix."""
    return location.key(PREFIX, name)


def save_s3(client, bucket: str, key: str, state: Any) -> int:
    """One save during training (the stall): torch.save of `state` uploaded as `key`, multipart, verified
    by HEAD; its size."""
    import torch

    held = io.BytesIO()
    torch.save(state, held)
    size = held.tell()
    held.seek(0)
    client.upload_fileobj(held, bucket, key, Config=transfer_config())
    return _stored(client, bucket, key, size)
