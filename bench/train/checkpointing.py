"""Checkpoints in training (issue 40): the checkpoint phase after a scale's measured steps, on the
scale's own ranks, and the saves during the measured steps, whose time is what a slow store costs
training (`ckpt_stall_share`).

Both write to `TrainConfig.checkpoint_dir`, the store under test (a folder, or a bucket's prefix:
bench.storage.checkpoint_s3), and remove what they wrote. With
both off (the default) nothing here runs: the loop only asks `rank.stall is not None`.

The phase is collective (`bench.storage.checkpoint.run_rank` meets the other ranks between its steps).
A rank that fails inside it tells the others once, at their next meeting point, and every rank leaves
the phase there: all ranks then reach the summary's gather together, and the scale's training figures
are kept with the phase's failure beside them (docs/faults.md). Only a rank that dies outright (killed)
leaves the others waiting, as it would in training.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Any

from bench.config.models import TrainConfig
from bench.data.location import is_s3, node_s3_client, parse_location
from bench.safe_fs import CREATE_FLAGS, lstat_at, open_dir
from bench.storage.checkpoint_files import REFUSAL, CheckpointError, Created, fresh_folder


class PeerFailed(CheckpointError):
    """Another rank's checkpoint phase failed: this one stopped at the meeting point where it heard."""


class AgreedSync:
    """`Dist.allgather` for `run_rank`, with a failure shared: each message is {"ok": obj} or, from a
    rank that failed, {"failed": why}; any failure ends the phase on every rank at the same round."""

    def __init__(self, dist) -> None:
        self.dist = dist

    def allgather(self, obj: Any) -> list:
        got = self.dist.allgather({"ok": obj})
        failed = [f"rank {r}: {m['failed']}" for r, m in enumerate(got) if "failed" in m]
        if failed:
            raise PeerFailed("; ".join(failed))
        return [m["ok"] for m in got]


def states(model, optimizer) -> dict:
    """What a rank's model-mode shard holds: its model's and its optimizer's state (DeepSpeed's split)."""
    return {"model_states": {"module": model.state_dict()}, "optim_states": {"optimizer": optimizer.state_dict()}}


def phase(cfg: TrainConfig, dist, model, optimizer) -> dict:
    """This rank's checkpoint phase: {"record": run_rank's record} or {"error": why, "peer": whether
    another rank's failure stopped it}. Every rank returns at the same meeting point."""
    from bench.storage.checkpoint import run_rank

    assert cfg.checkpoint is not None and cfg.checkpoint_dir is not None
    try:
        held = states(model, optimizer) if cfg.checkpoint.mode == "model" else None
        if is_s3(cfg.checkpoint_dir):  # shards as objects in the suite's bucket (bench.storage.checkpoint_s3)
            from bench.storage.checkpoint_s3 import PARALLEL_PARTS, run_rank_s3

            location, client = parse_location(cfg.checkpoint_dir), node_s3_client(pool=PARALLEL_PARTS + 2)
            sync = AgreedSync(dist)
            record = run_rank_s3(dist.rank, dist.size, location, cfg.checkpoint, sync, client, held, dist.host)
            return {"record": record}
        cfg.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        record = run_rank(dist.rank, dist.size, cfg.checkpoint_dir, cfg.checkpoint, AgreedSync(dist), held, dist.host)
        return {"record": record}
    except PeerFailed as error:
        return {"error": str(error), "peer": True}
    except Exception as error:  # this rank's own failure (no room, a write refused, a shard not ours): told once
        why = f"{type(error).__name__}: {error}"
        dist.allgather({"failed": why})
        return {"error": why, "peer": False}


class _Saves:
    """What the loop asks of the saves during the measured steps, on files or in a bucket."""

    every: int
    saves: int
    seconds: float
    bytes: int
    left: list[str]

    def due(self, measured_steps: int) -> bool:
        return measured_steps > 0 and measured_steps % self.every == 0

    def report(self, measured_s: float) -> dict:
        total = measured_s + self.seconds
        return {
            "every_steps": self.every,
            "saves": self.saves,
            "seconds": self.seconds,
            "bytes": self.bytes,
            "share": self.seconds / total if total > 0 else None,
            "left": self.left,
        }


class Stall(_Saves):
    """Saves during the measured steps: every `checkpoint_every_steps` measured steps each rank
    torch.saves its model and optimizer state into a folder of its own on the store, fsyncs it, and
    meets the other ranks (so a checkpoint lasts as long as its slowest rank, as a synchronous save
    does); the file is removed after (not timed). The save is kept out of the step times (images/s
    and the step-time spread stay training's); its share of the measured time with it is the stall.

    The store is shared: whoever can rename entries in it could swap our folder for a link to theirs.
    So the folder is made fresh and held open (O_DIRECTORY|O_NOFOLLOW, checked: ours, empty), every
    file is created and removed relative to that descriptor, a file is removed only while its name
    still holds the file we wrote (`Created.matches`), and the folder is removed through its parent's
    descriptor only while its name still holds our folder: a swapped-in link is neither written
    through nor emptied (docs/faults.md row 129)."""

    def __init__(self, cfg: TrainConfig, dist, model, optimizer) -> None:
        assert cfg.checkpoint_dir is not None
        cfg.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        self.every, self.dist, self.model, self.optimizer = cfg.checkpoint_every_steps, dist, model, optimizer
        self.saves, self.seconds, self.bytes = 0, 0.0, 0
        self.pending: list[Created] = []  # saves written and not yet removed (a save cut short included)
        self.left: list[str] = []  # what close() did not remove, and why
        self.top = os.open(cfg.checkpoint_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            self.name, self.fd = _own_folder(self.top, cfg.checkpoint_dir, f"scalewatch-stall-rank{dist.rank}-")
        except BaseException:
            os.close(self.top)
            raise
        self.folder = cfg.checkpoint_dir / self.name
        self.ino = os.fstat(self.fd).st_ino

    def save(self) -> float:
        """One save, all ranks; the clock after it (the next step starts there)."""
        import torch

        start = time.perf_counter()
        name = f"step{self.saves}.pt"
        fd = os.open(name, CREATE_FLAGS, 0o600, dir_fd=self.fd)
        try:
            with os.fdopen(fd, "wb", closefd=False) as out:
                torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}, out)
                out.flush()
            os.fsync(fd)
        finally:  # the file as we leave it, written or cut short: the only file close() may remove by that name
            wrote = Created.of(name, os.fstat(fd))
            self.pending.append(wrote)
            os.close(fd)
        self.dist.barrier()  # the slowest rank's save is every rank's stall
        end = time.perf_counter()
        self.left += _remove_own(self.fd, self.folder, [wrote])
        self.pending.remove(wrote)
        self.saves, self.seconds, self.bytes = self.saves + 1, self.seconds + end - start, wrote.size
        return time.perf_counter()

    def close(self) -> None:
        """Remove this rank's save folder (a save interrupted between its write and its removal included):
        our files in it while they are ours, then the folder through its parent while its name is ours."""
        try:
            self.left += _remove_own(self.fd, self.folder, self.pending)
            self.pending = []
            st = lstat_at(self.top, self.name)
            if st is None or not stat.S_ISDIR(st.st_mode) or st.st_ino != self.ino:
                self.left.append(f"{self.folder}: no longer the folder this rank made; left as it is")
            else:
                try:
                    os.rmdir(self.name, dir_fd=self.top)
                except OSError as error:  # someone else's file in it: not ours to remove
                    self.left.append(f"{self.folder}: not removed ({error.strerror or error})")
        finally:
            os.close(self.fd)
            os.close(self.top)


class S3Stall(_Saves):
    """Saves during the measured steps into the suite's bucket: every `checkpoint_every_steps` measured
    steps each rank uploads torch.save of its model and optimizer state (multipart, verified by HEAD,
    bench.storage.checkpoint_s3.save_s3) under a random name of its own and meets the other ranks; the
    object is deleted after (not timed), as Stall removes its file."""

    def __init__(self, cfg: TrainConfig, dist, model, optimizer) -> None:
        from bench.storage.checkpoint_s3 import PARALLEL_PARTS

        assert cfg.checkpoint_dir is not None
        self.every, self.dist, self.model, self.optimizer = cfg.checkpoint_every_steps, dist, model, optimizer
        self.saves, self.seconds, self.bytes = 0, 0.0, 0
        self.location = parse_location(cfg.checkpoint_dir)
        self.client = node_s3_client(pool=PARALLEL_PARTS + 2)
        self.tag = f"stall-rank{dist.rank}-{os.urandom(6).hex()}"
        self.left: list[str] = []
        self.pending: list[dict] = []  # saves uploaded (or cut short) and not yet deleted

    def save(self) -> float:
        """One save, all ranks; the clock after it (the next step starts there)."""
        from bench.storage.checkpoint_s3 import delete_own, save_s3, stall_key

        start = time.perf_counter()
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}
        saved = {"key": stall_key(self.location, f"{self.tag}/step{self.saves}.pt")}
        self.pending.append(saved)  # before the upload: one cut short may still have completed
        size = save_s3(self.client, self.location.bucket, saved["key"], state)
        self.dist.barrier()  # the slowest rank's save is every rank's stall
        end = time.perf_counter()
        self.left += delete_own(self.client, self.location.bucket, [saved])[1]
        self.pending.remove(saved)
        self.saves, self.seconds, self.bytes = self.saves + 1, self.seconds + end - start, size
        return time.perf_counter()

    def close(self) -> None:
        """Delete a save the rank was in when it failed (its upload may have completed); the others were
        deleted right after they were made."""
        from bench.storage.checkpoint_s3 import delete_own

        self.left += delete_own(self.client, self.location.bucket, self.pending)[1]
        self.pending = []


def stall_of(cfg: TrainConfig, dist, model, optimizer) -> Stall | S3Stall:
    """The saves during the measured steps on the store under test: files, or objects in a bucket."""
    if is_s3(cfg.checkpoint_dir):
        return S3Stall(cfg, dist, model, optimizer)
    return Stall(cfg, dist, model, optimizer)


def _own_folder(top: int, directory: Path, prefix: str) -> tuple[str, int]:
    """(name, descriptor) of a fresh folder of this process in `top`: made under a random name never
    there before, opened without following a link, and checked to be a folder this user owns, empty."""
    name = fresh_folder(top, directory, prefix, 0o700, "a save folder")
    fd = open_dir(top, name, directory / name, REFUSAL)
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or os.listdir(fd):
        os.close(fd)
        raise CheckpointError(f"{directory / name}: not the folder this rank just made; not written to")
    return name, fd


def _remove_own(fd: int, folder: Path, files: list[Created]) -> list[str]:
    """Remove each of our files in the held folder `fd` while its name still holds the file we wrote;
    what was left and why (nothing else is ever removed)."""
    left = []
    for item in files:
        st = lstat_at(fd, item.rel)
        if st is None:
            continue
        if not stat.S_ISREG(st.st_mode) or not item.matches(st):
            left.append(f"{folder / item.rel}: no longer the file this rank wrote; left as it is")
            continue
        try:
            os.unlink(item.rel, dir_fd=fd)
        except OSError as error:
            left.append(f"{folder / item.rel}: not removed ({error.strerror or error})")
    return left


def summary_block(cfg: TrainConfig, ranks: list[dict]) -> dict:
    """The run summary's `checkpoint` from every rank's {"phase", "stall"}: the phase aggregated
    (bench.storage.checkpoint.aggregate) with its `status` (done, failed, off) and `error`, and the stall
    (`share`: the largest rank's, each rank's saves over its measured time with them; `left`: every
    rank's)."""
    from bench.storage.checkpoint import aggregate

    out: dict = {"status": "off", "error": None}
    if cfg.checkpoint is not None:
        out |= cfg.checkpoint.model_dump(mode="json")
        phases = [r.get("phase") or {"error": "no phase record", "peer": False} for r in ranks]
        errors = [p for p in phases if "error" in p]
        if errors:
            own = [p for p in errors if not p.get("peer")] or errors
            out |= {"status": "failed", "error": own[0]["error"]}
        else:
            out |= {"status": "done", **aggregate([p["record"] for p in phases])}
    stalls = [r["stall"] for r in ranks if r.get("stall")]
    out["stall"] = max(stalls, key=lambda s: s["share"] or 0.0) if stalls else None
    if out["stall"] is not None:  # what any rank's saves left on the store, not only the slowest rank's
        out["stall"] = {**out["stall"], "left": [item for s in stalls for item in s.get("left", [])]}
    return out
