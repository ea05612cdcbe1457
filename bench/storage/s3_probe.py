"""The store's read ceiling over S3: parallel ranged GETs of the staged dataset's own objects, cold, at
1, 2, 4, ... streams, the same climb and result as the file probe (bench.storage.fio_probe).

Why its own client and not fio: Debian's fio has no S3 engine (its http engine, before 3.41, reads no
existing object and returns a 404 as zeros), so the probe issues the GETs itself, through the same
maintained client the suite stages with (boto3), one connection per stream. Each stream reads a disjoint
share of the sample, and each level starts after the ranges the levels before it read, so a server-side
cache (BlueStore's buffer cache, RGW's) serves none of it while the sample lasts; a level that came back
to ranges read before is marked `fresh: false` and a repeat so marked is not taken for the ceiling.

A GET that fails is counted, never dropped: any failure makes the result inconclusive, naming the count.
The bytes a level counts are the bytes the bodies held, checked against each response's Content-Length.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass

from bench.data.location import S3Location
from bench.storage.fio_probe import (
    MIN_LEVEL_S,
    PLATEAU_GAIN,
    ProbeError,
    ProbeResult,
    levels_for,
    node_name,
    share_doc,
    too_short,
)

MAX_RANGE = 4 << 20  # RGW stores objects in 4 MiB stripes: a larger range is several backend reads anyway
MIN_RANGE = 64 << 10
METHOD = "s3 ranged GET"


@dataclass(frozen=True)
class S3ProbeSettings:
    max_streams: int = 16
    seconds: float = 3.0  # per level
    max_objects: int = 4096


def fitted_range(sizes: list[int]) -> int:
    """The largest power of two at or below the median object size, 64 KiB to 4 MiB: one GET reads a
    small object whole, a large one in stripes."""
    median = max(1, int(statistics.median(sizes)))
    size = 1 << (median.bit_length() - 1)
    return max(MIN_RANGE, min(MAX_RANGE, size))


def sample_objects(client, locations: list[S3Location], max_objects: int) -> list[tuple[str, str, int]]:
    """(bucket, key, size) of the staged datasets' files, from their manifests (a prefix without one is
    not a staged dataset: DatasetError), evenly spaced to at most max_objects."""
    from bench.data.stage_s3 import load_s3_manifest
    from bench.errors import DatasetError

    objects = []
    for loc in locations:
        listed = load_s3_manifest(client, loc)["files"]
        objects += [(loc.bucket, loc.key(rel), int(e["size"])) for rel, e in sorted(listed.items()) if e["size"] > 0]
    if not objects:
        raise DatasetError(f"{', '.join(loc.url for loc in locations)}: the staged dataset lists no objects")
    if len(objects) > max_objects:
        step = len(objects) / max_objects
        objects = [objects[int(i * step)] for i in range(max_objects)]
    return objects


def ranges_of(objects: list[tuple[str, str, int]], block: int) -> list[tuple[str, str, int, int]]:
    """(bucket, key, first byte, last byte) of every `block`-sized range of every object, in order."""
    return [(b, k, off, min(size, off + block) - 1) for b, k, size in objects for off in range(0, size, block)]


class _Ranges:
    """The sample's ranges and which this probe has read: each level starts after the last one's reads."""

    def __init__(self, ranges: list[tuple[str, str, int, int]]) -> None:
        self.ranges = ranges
        self.start = 0
        self.seen: set[int] = set()

    def shares(self, streams: int) -> list[list[int]]:
        n = len(self.ranges)
        order = [(self.start + i) % n for i in range(n)]
        return [order[s::streams] for s in range(streams)]

    def consume(self, done: list[list[int]]) -> bool:
        """Marks the ranges the streams read; True when none had been read before."""
        touched = {i for share in done for i in share}
        fresh = not touched & self.seen
        self.seen |= touched
        if touched:
            last = max((i - self.start) % len(self.ranges) for i in touched)
            self.start = (self.start + last + 1) % len(self.ranges)
        return fresh


def _stream(client, ranges: list, share: list[int], deadline: float, out: dict) -> None:
    """One stream: GETs its share's ranges in order until the deadline; bytes, reads and failures to out."""
    for i in share:
        if time.monotonic() >= deadline:
            break
        bucket, key, first, last = ranges[i]
        try:
            response = client.get_object(Bucket=bucket, Key=key, Range=f"bytes={first}-{last}")
            body = response["Body"].read()
        except Exception as error:  # counted and named in the result, never dropped
            out["errors"].append(f"{key}: {type(error).__name__}: {error}"[:300])
            continue
        if len(body) != last - first + 1:
            out["errors"].append(f"{key}: short read ({len(body)} of {last - first + 1} bytes)")
        out["bytes"] += len(body)
        out["done"].append(i)


def read_level(clients: list, sample: _Ranges, streams: int, seconds: float) -> dict:
    """One level: `streams` threads, each on its own client connection and its own share, for `seconds`."""
    shares = sample.shares(streams)
    outs = [{"bytes": 0, "done": [], "errors": []} for _ in range(streams)]
    deadline = time.monotonic() + seconds
    started = time.monotonic()
    threads = [
        threading.Thread(target=_stream, args=(clients[s], sample.ranges, shares[s], deadline, outs[s]))
        for s in range(streams)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    nbytes = sum(o["bytes"] for o in outs)
    errors = [e for o in outs for e in o["errors"]]
    fresh = sample.consume([o["done"] for o in outs])
    mb_s = nbytes / elapsed / 1e6 if elapsed > 0 else 0.0
    return {"jobs": streams, "mb_s": mb_s, "bytes": nbytes, "seconds": elapsed, "fresh": fresh, "errors": errors}


def _climb(clients: list, sample: _Ranges, settings: S3ProbeSettings) -> list[dict]:
    """Levels at 1, 2, 4, ... streams until two doublings add less than PLATEAU_GAIN."""
    levels: list[dict] = []
    stalled = 0
    for streams in levels_for(settings.max_streams, len(sample.ranges)):
        best = max((lv["mb_s"] for lv in levels), default=0.0)
        level = read_level(clients, sample, streams, settings.seconds)
        levels.append(level)
        stalled = stalled + 1 if best and level["mb_s"] < best * (1 + PLATEAU_GAIN) else 0
        if stalled >= 2:
            break
    return levels


def _reason(ceiling: dict, levels: list[dict]) -> str:
    """Why the figure cannot be stood behind ('' when it can): failed GETs, or too short a read."""
    errors = [e for lv in levels for e in lv["errors"]]
    if errors:
        return f"{len(errors)} GET(s) failed during the probe (first: {errors[0]}): the store dropped reads"
    if too_short(ceiling["seconds"]):
        return (
            f"the best level read {ceiling['bytes'] / 1e6:.1f} MB in {ceiling['seconds']:.2f} s "
            f"(under {MIN_LEVEL_S:.0f} s): too little data to call a sustained ceiling; stage a larger dataset"
        )
    return ""


def probe_s3(make_client, locations: list[S3Location], settings: S3ProbeSettings = S3ProbeSettings()) -> ProbeResult:
    """Sustained cold GET MB/s of the staged objects at 1, 2, 4, ... streams, then the best level once
    more; the ceiling is the better of the two (the repeat only when fresh, or the first was not).
    `make_client()` returns a new S3 client (one per stream: no stream waits on another's connection)."""
    objects = sample_objects(make_client(), locations, settings.max_objects)
    block = fitted_range([s for _, _, s in objects])
    sample = _Ranges(ranges_of(objects, block))
    clients = [make_client() for _ in range(settings.max_streams)]
    levels = _climb(clients, sample, settings)
    top = max(levels, key=lambda lv: lv["mb_s"])
    repeat = read_level(clients, sample, top["jobs"], settings.seconds)
    fair = repeat["fresh"] or not top["fresh"]
    ceiling = max(top, repeat, key=lambda lv: lv["mb_s"]) if fair else top
    reason = _reason(ceiling, [*levels, repeat])
    import boto3

    return ProbeResult(
        paths=[loc.url for loc in locations],
        ceiling_mb_s=float(ceiling["mb_s"]),
        levels=levels,
        repeat=repeat,
        block_size=block,
        sample_files=len(objects),
        sample_bytes=sum(s for _, _, s in objects),
        method=METHOD,
        conclusive=not reason,
        reason=reason,
        fio_version="",
        extra={"next_offset": sample.start, "host": node_name(), "client": f"boto3 {boto3.__version__}"},
    )


def probe_s3_share(
    make_client,
    locations: list[S3Location],
    settings: S3ProbeSettings,
    share: int,
    of: int,
    offset: int,
    streams: int,
    start_at: float | None,
) -> dict:
    """One node's part of a multi-node level over S3 (bench.storage.fio_probe.probe_share's document):
    `streams` GET streams over every `of`-th range of the sample from `offset` on (disjoint from the other
    nodes', none read by the climb before), started at `start_at` and read for `settings.seconds`.
    `next_offset` counts ranges, as the climb's does."""
    objects = sample_objects(make_client(), locations, settings.max_objects)
    ranges = ranges_of(objects, fitted_range([s for _, _, s in objects]))
    rotated = ranges[offset % len(ranges) :] + ranges[: offset % len(ranges)]
    mine = rotated[share::of]
    if not mine:
        raise ProbeError(f"share {share} of {of}: no ranges left in a sample of {len(ranges)}")
    sample = _Ranges(mine)
    clients = [make_client() for _ in range(streams)]
    if start_at is not None:
        time.sleep(max(0.0, start_at - time.time()))
    started = time.time()
    level = read_level(clients, sample, streams, settings.seconds)
    if level["errors"]:
        errors = level["errors"]
        raise ProbeError(f"share {share} of {of}: {len(errors)} GET(s) failed (first: {errors[0]})")
    consumed = sample.start or len(mine)
    read = {k: v for k, v in level.items() if k != "errors"}
    return share_doc(read, (share, of), started, start_at, "s3-ranged-GET", (offset + consumed * of) % len(ranges))


def main_s3(
    urls: list[str],
    max_streams: int,
    seconds: float,
    share: tuple[int, int] | None = None,
    offset: int = 0,
    streams: int = 1,
    start_at: float | None = None,
) -> dict:
    """bench.storage.probe_cli.main's S3 branch: the climb, or one node's share, of the staged datasets at
    `urls` (s3://BUCKET/PREFIX), with this node's own credentials (bench.data.location.node_s3_client)."""
    from bench.data.location import node_s3_client, parse_location

    locations = [parse_location(u) for u in urls]
    settings = S3ProbeSettings(max_streams=max_streams, seconds=seconds)
    make_client = node_s3_client
    if share is None:
        return probe_s3(make_client, locations, settings).as_dict()
    return probe_s3_share(make_client, locations, settings, share[0], share[1], offset, streams, start_at)
