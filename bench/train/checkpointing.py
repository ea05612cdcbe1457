"""Checkpoints in training (issue 40): the checkpoint phase after a scale's measured steps, on the
scale's own ranks, and the saves during the measured steps, whose time is what a slow store costs
training (`ckpt_stall_share`).

Both write to `TrainConfig.checkpoint_dir`, the store under test, and remove what they wrote. With
both off (the default) nothing here runs: the loop only asks `rank.stall is not None`.

The phase is collective (`bench.data.checkpoint.run_rank` meets the other ranks between its steps).
A rank that fails inside it tells the others once, at their next meeting point, and every rank leaves
the phase there: all ranks then reach the summary's gather together, and the scale's training figures
are kept with the phase's failure beside them (docs/faults.md). Only a rank that dies outright (killed)
leaves the others waiting, as it would in training.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.config import TrainConfig
from bench.data.checkpoint_files import CheckpointError


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
    from bench.data.checkpoint import run_rank

    assert cfg.checkpoint is not None and cfg.checkpoint_dir is not None
    try:
        cfg.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        held = states(model, optimizer) if cfg.checkpoint.mode == "model" else None
        record = run_rank(dist.rank, dist.size, cfg.checkpoint_dir, cfg.checkpoint, AgreedSync(dist), held, dist.host)
        return {"record": record}
    except PeerFailed as error:
        return {"error": str(error), "peer": True}
    except Exception as error:  # this rank's own failure (no room, a write refused, a shard not ours): told once
        why = f"{type(error).__name__}: {error}"
        dist.allgather({"failed": why})
        return {"error": why, "peer": False}


class Stall:
    """Saves during the measured steps: every `checkpoint_every_steps` measured steps each rank
    torch.saves its model and optimizer state into a folder of its own on the store, fsyncs it, and
    meets the other ranks (so a checkpoint lasts as long as its slowest rank, as a synchronous save
    does); the file is removed after (not timed). The save is kept out of the step times (images/s
    and the step-time spread stay training's); its share of the measured time with it is the stall."""

    def __init__(self, cfg: TrainConfig, dist, model, optimizer) -> None:
        assert cfg.checkpoint_dir is not None
        cfg.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        self.every, self.dist, self.model, self.optimizer = cfg.checkpoint_every_steps, dist, model, optimizer
        self.folder = Path(tempfile.mkdtemp(prefix=f"scalewatch-stall-rank{dist.rank}-", dir=cfg.checkpoint_dir))
        self.saves, self.seconds, self.bytes = 0, 0.0, 0

    def due(self, measured_steps: int) -> bool:
        return measured_steps > 0 and measured_steps % self.every == 0

    def save(self) -> float:
        """One save, all ranks; the clock after it (the next step starts there)."""
        import torch

        start = time.perf_counter()
        path = self.folder / f"step{self.saves}.pt"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "wb", closefd=False) as out:
                torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}, out)
                out.flush()
            os.fsync(fd)
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        self.dist.barrier()  # the slowest rank's save is every rank's stall
        end = time.perf_counter()
        path.unlink()
        self.saves, self.seconds, self.bytes = self.saves + 1, self.seconds + end - start, size
        return time.perf_counter()

    def close(self) -> None:
        """Remove this rank's save folder (a save interrupted between its write and its removal included)."""
        for leftover in self.folder.glob("step*.pt"):
            leftover.unlink(missing_ok=True)
        self.folder.rmdir()

    def report(self, measured_s: float) -> dict:
        total = measured_s + self.seconds
        return {
            "every_steps": self.every,
            "saves": self.saves,
            "seconds": self.seconds,
            "bytes": self.bytes,
            "share": self.seconds / total if total > 0 else None,
        }


def summary_block(cfg: TrainConfig, ranks: list[dict]) -> dict:
    """The run summary's `checkpoint` from every rank's {"phase", "stall"}: the phase aggregated
    (bench.data.checkpoint.aggregate) with its `status` (done, failed, off) and `error`, and the stall
    (`share`: the largest rank's, each rank's saves over its measured time with them)."""
    from bench.data.checkpoint import aggregate

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
    return out
