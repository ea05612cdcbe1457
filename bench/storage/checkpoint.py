"""Checkpoint write and restore bandwidth: every rank writes its own shard, then reads one another rank
wrote, cold, and the phase is as fast as its slowest rank (MLPerf Storage's checkpointing, issue 40).

Why: training writes checkpoints to the storage it reads from, in bursts that stall every GPU, and a
restart reads them back. A store that reads well and writes badly passes every read-only benchmark.

What a rank does (`run_rank`), with every rank meeting at the same points through `Sync.allgather`:
- `writes` times, all ranks at once: its shard in `global_step{i}/`, named as DeepSpeed names a ZeRO
  shard (`zero_pp_rank_{dp}_mp_rank_00_model_states.pt`, `..._optim_states.pt`). `model`: torch.save of
  the model's and the optimizer's state; a size: DLIO's ZeRO-3 split, 1/7 model states (2 bytes per
  fp16 parameter) and 6/7 optimizer states (12: fp32 master weights and Adam's two moments), raw bytes
  that neither compression nor deduplication can shrink.
- Writes go through the page cache with an fsync every FLUSH_BYTES and at each file's end, timed up to
  that last fsync: the time is the store's, never memory's. Fsync per chunk, not O_DIRECT: torch.save
  writes through the cache (so a real checkpoint does too), O_DIRECT needs aligned buffers that some
  file systems refuse, and with at most FLUSH_BYTES dirty per rank no background flusher writes a
  rank's pages: the rank's own fsync does, so a cgroup-v1 blkio write limit on the rank holds them.
  Measured on an ext4 loop device: 2 ranks x 16 MiB under a shared 4.00 MB/s limit, 3.98-3.99 MB/s;
  one rank x 96 MiB under 16.0 MB/s, 15.1 (dd there: O_DIRECT 16.2, buffered with one fsync 14.6).
- `reads` times, all ranks at once: the shard of the rank `read_partners` picks (on another node where
  there is one, so the writer's page cache cannot serve it), evicted first as the dataset is (fsync,
  fadvise DONTNEED, bench.data.pagecache) and checked with cachestat (mincore on older kernels): a read
  is `cold` when at most EVICTION_LEFT_MAX of it was resident when it started. A storage server's own
  cache is out of a client's reach: a NAS that still holds the checkpoint serves it, as it would a
  restart soon after a save.
- Then it removes the files it created, and only those: each is tracked by name, inode, size and
  change time, and removed only while its name still holds that file; rank 0 removes the folders it
  made when they are empty. A file is named only once it is complete (bench.storage.checkpoint_files),
  so a killed rank leaves no cut-short shard; what it had named is in its `Journal`, for another
  process to remove (bench checkpoint's parent does, bench.storage.checkpoint_local).

Every file is created and opened relative to its folder's descriptor with O_NOFOLLOW|O_EXCL
(bench.safe_fs): a planted link redirects no write, no read and no removal. Before anything is
written, rank 0 checks the store's free space and every rank refuses together, naming the sizes.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from bench.config.checkpoint import MAX_BYTES_PER_RANK, MIN_BYTES_PER_RANK, CheckpointSpec, parse_setting
from bench.errors import ConfigError
from bench.metrics.sources.pagecache import cache_domain
from bench.storage.checkpoint_files import (
    KINDS,
    CheckpointError,
    Created,
    Naming,
    Pattern,
    Shard,
    States,
    make_folders,
    read_shard,
    remove_files,
    remove_folders,
    residency_method,
    size_split,
    write_shard,
)

FILE_OVERHEAD = 64 << 10  # a file's metadata and block rounding, and torch.save's zip records
MB = 1e6


class CheckpointSpaceError(ConfigError):
    """The checkpoint cannot fit on the store: refused before anything is written; names the sizes."""


# Where a rank notes, as it goes, what another process must remove should it be killed (a killed process
# cannot clean up after itself): journal(key, JSON-able value), the latest value per key kept. Keys:
# "folders" (rank 0's), "made" (its named files, each as soon as it is named), "naming" (the file it is
# about to name: a rank killed between the naming and "made" leaves it), "writes" (its complete
# checkpoints), "cleanup" (once it removed its files). bench.storage.checkpoint_local keeps it in files.
Journal = Callable[[str, Any], None]


def _no_journal(key: str, value: Any) -> None:
    """The suite's ranks: a killed rank ends its whole run, whose launcher reports it."""


class Sync(Protocol):
    """Where ranks meet: every rank's JSON-able `obj`, in rank order (bench.train.dist.Dist has it)."""

    def allgather(self, obj: Any) -> list: ...


def state_bytes(obj: Any) -> int:
    """Tensor bytes in a (nested) state: what torch.save will write, less its small records."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.nelement() * obj.element_size()
    if isinstance(obj, Mapping):
        return sum(state_bytes(v) for v in obj.values())
    if isinstance(obj, list | tuple):
        return sum(state_bytes(v) for v in obj)
    return 0


def read_partners(domains: list[str]) -> list[int]:
    """The rank whose shard each rank reads: one shift k for all (rank r reads r+k), so every shard is
    read exactly once, with the k that puts the most readers in another cache domain (another node);
    the first such k on a tie. One rank alone reads its own shard (evicted, so still cold)."""
    world = len(domains)
    best_k, best = 0, -1
    for k in range(1, world):
        other = sum(domains[r] != domains[(r + k) % world] for r in range(world))
        if other > best:
            best_k, best = k, other
        if other == world:
            break
    return [(r + best_k) % world for r in range(world)]


def free_space(directory: Path) -> int:
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def space_needed(per_rank: list[int], writes: int) -> int:
    """Bytes every checkpoint of every rank takes at once (all stay until the reads are done), with
    FILE_OVERHEAD per file and 1% for the file system's own blocks."""
    data = writes * sum(per_rank)
    return data + data // 100 + writes * len(per_rank) * len(KINDS) * FILE_OVERHEAD


def check_space(directory: Path, per_rank: list[int], writes: int) -> None:
    """Refuse, naming the sizes, a checkpoint that cannot fit on `directory`'s file system."""
    need, free = space_needed(per_rank, writes), free_space(directory)
    if need > free:
        raise CheckpointSpaceError(
            f"not enough free space: {writes} writes x {len(per_rank)} rank(s) x {_size(max(per_rank))} per rank "
            f"need {_size(need)} at {directory}, but {_size(free)} is free there; lower bytes_per_rank or writes, "
            "or free space"
        )


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError


def _agree_on_folders(
    rank: int, directory: Path, spec: CheckpointSpec, per_rank: list[int], sync: Sync, folders: list[Created],
    journal: Journal,
) -> tuple[str, int]:  # fmt: skip
    """(root folder, data seed), decided by rank 0 for all: it checks the free space and makes the
    folders (into `folders`, as it goes, and then the journal); every rank refuses together when it could not."""
    plan: dict = {}
    if rank == 0:
        try:
            check_space(directory, per_rank, spec.writes)
            try:
                make_folders(directory, spec.writes, folders)
            finally:
                journal("folders", [vars(c) for c in folders])
            plan = {"root": folders[0].rel, "seed": secrets.randbits(63)}
        except CheckpointSpaceError as error:
            plan = {"refused": str(error)}
        except (OSError, CheckpointError) as error:
            plan = {"failed": f"{directory}: cannot make the checkpoint folders ({error})"}
    plan = sync.allgather(plan if rank == 0 else None)[0]
    if "refused" in plan:
        raise CheckpointSpaceError(plan["refused"])
    if "failed" in plan:
        raise CheckpointError(plan["failed"])
    return plan["root"], plan["seed"]


def shard_sizes(rank: int, world: int, spec: CheckpointSpec, states: States | None) -> dict[str, int]:
    """Each kind's bytes in this rank's shard (a size's DLIO split, or its model's state), after checking
    the rank and, in model mode, that the states are there: the same on files and in a bucket."""
    if not 0 <= rank < world:
        raise ConfigError(f"rank: {rank} is not between 0 and world-1 ({world - 1})")
    if spec.mode == "model" and (states is None or set(states) != set(KINDS)):
        raise ConfigError(f"checkpoint: model mode needs the rank's states ({', '.join(KINDS)})")
    if spec.mode == "size":
        return size_split(int(spec.bytes_per_rank))
    assert states is not None
    return {k: state_bytes(states[k]) for k in KINDS}


def run_rank(
    rank: int,
    world: int,
    directory: Path,
    spec: CheckpointSpec,
    sync: Sync,
    states: States | None = None,
    host: str | None = None,
    journal: Journal = _no_journal,
) -> dict:
    """This rank's part of the checkpoint phase on `directory` (shared by all ranks); its record (see
    docs/schemas.md). Every rank of `world` calls it at once with the same spec; `states` (model
    mode): this rank's {"model_states", "optim_states"}. Collective: a rank that fails leaves the
    others waiting in `sync`, whose own failure handling ends them (a dead peer breaks a collective)."""
    sizes = shard_sizes(rank, world, spec, states)
    me = {"host": host or socket.gethostname(), "domain": cache_domain(directory), "bytes": sum(sizes.values())}
    peers = sync.allgather(me)
    partner = read_partners([p["domain"] for p in peers])[rank]
    folders: list[Created] = []  # rank 0's
    made: list[Created] = []  # this rank's files, each added as it is created
    writes: list[dict] = []
    reads: list[dict] = []
    finished = False

    def _note_made(files: list[Created]) -> None:  # each file as soon as it is named
        journal("made", [vars(c) for c in files])

    def _note_naming(intent: Naming) -> None:  # each file just before it is named
        journal("naming", vars(intent))

    try:
        root, seed = _agree_on_folders(rank, directory, spec, [p["bytes"] for p in peers], sync, folders, journal)
        model = spec.mode == "model"
        shard = Shard(sizes, None if model else Pattern(seed, rank), states if model else None)
        for step in range(spec.writes):
            sync.allgather(None)  # a checkpoint is a burst: every rank starts it together
            writes.append(write_shard(directory, root, step, rank, shard, made, _note_made, _note_naming))
            journal("writes", writes)  # complete checkpoints only: one cut short is never in `writes`
        written = {f["rel"]: f for files in sync.allgather([vars(c) for c in made]) for f in files}
        for i in range(spec.reads):
            step = i % spec.writes
            reads.append(read_shard(directory, root, step, partner, written, model, lambda: sync.allgather(None)))
        sync.allgather(None)  # every read done before any rank removes its files
        finished = True
    finally:
        removed, left = remove_files(directory, made)
        journal("cleanup", {"removed": removed, "left": left})
        if finished:
            sync.allgather(None)  # every rank's files removed: the folders can go
        if rank == 0:
            left += remove_folders(directory, folders)
    return {
        "rank": rank,
        "host": me["host"],
        "domain": me["domain"],
        "read_from": partner,
        "other_node": peers[partner]["domain"] != me["domain"],
        "residency": residency_method(),
        "writes": writes,
        "reads": reads,
        "cleanup": {"removed": removed, "left": left},
    }


def _mb_s(nbytes: float, seconds: float) -> float:
    return nbytes / seconds / MB if seconds > 0 else 0.0


def _phase(per_rank: list[list[dict]]) -> dict:
    """One phase over all ranks: each checkpoint's bytes are every rank's, its seconds the slowest
    rank's (all started together); the phase's MB/s is its bytes over the sum of those seconds."""
    rounds = []
    for i in range(len(per_rank[0])):
        entries = [(rank, items[i]) for rank, items in enumerate(per_rank)]
        slowest, worst = max(entries, key=lambda e: e[1]["seconds"])
        nbytes = sum(e["bytes"] for _, e in entries)
        rounds.append(
            {
                "step": worst["step"],
                "bytes": nbytes,
                "seconds": worst["seconds"],
                "mb_s": _mb_s(nbytes, worst["seconds"]),
                "slowest_rank": slowest,
            }
        )
    nbytes, seconds = sum(r["bytes"] for r in rounds), sum(r["seconds"] for r in rounds)
    return {"bytes": nbytes, "seconds": seconds, "mb_s": _mb_s(nbytes, seconds), "checkpoints": rounds}


def aggregate(records: list[dict]) -> dict:
    """The phase over every rank's `run_rank` record: write and read MB/s in aggregate, per checkpoint
    and per rank, whether every read was cold, and what cleanup left."""
    if not records:
        raise CheckpointError("checkpoint: no rank record to aggregate")
    ranked = sorted(records, key=lambda r: r["rank"])
    write, read = _phase([r["writes"] for r in ranked]), _phase([r["reads"] for r in ranked])
    not_cold = [
        {"rank": r["rank"], "step": x["step"], "resident_before": x["resident_before"]}
        for r in ranked
        for x in r["reads"]
        if not x["cold"]
    ]
    read |= {
        "cold": not not_cold,
        "not_cold": not_cold,
        "storage_bytes": sum(x["storage_bytes"] for r in ranked for x in r["reads"]),
        "other_node_share": sum(r["other_node"] for r in ranked) / len(ranked),
    }
    per_rank = []
    for r in ranked:
        wb, ws = sum(x["bytes"] for x in r["writes"]), sum(x["seconds"] for x in r["writes"])
        rb, rs = sum(x["bytes"] for x in r["reads"]), sum(x["seconds"] for x in r["reads"])
        per_rank.append(
            {
                "rank": r["rank"],
                "host": r["host"],
                "read_from": r["read_from"],
                "other_node": r["other_node"],
                "write_bytes": wb,
                "write_seconds": ws,
                "write_mb_s": _mb_s(wb, ws),
                "read_bytes": rb,
                "read_seconds": rs,
                "read_mb_s": _mb_s(rb, rs),
                "cold": all(x["cold"] for x in r["reads"]),
            }
        )
    return {
        # the CLI's contract (issue 40): aggregate write and read MB/s, bytes written, the phase's duration
        "write_mb_s": write["mb_s"],
        "read_mb_s": read["mb_s"],
        "bytes": write["bytes"],
        "duration_s": write["seconds"] + read["seconds"],
        "ranks": len(ranked),
        "nodes": len({r["domain"] for r in ranked}),
        "residency": next((r["residency"] for r in ranked if r["residency"]), None),
        "write": write,
        "read": read,
        "per_rank": per_rank,
        "cleanup": {
            "removed": sum(r["cleanup"]["removed"] for r in ranked),
            "left": [item for r in ranked for item in r["cleanup"]["left"]],
        },
    }


__all__ = [
    "MAX_BYTES_PER_RANK",
    "MIN_BYTES_PER_RANK",
    "CheckpointError",
    "CheckpointSpaceError",
    "CheckpointSpec",
    "aggregate",
    "parse_setting",
    "run_rank",
]
