"""The checkpoint phase on its own (`bench checkpoint`): R ranks on this host, each a process of its own,
so every rank has its own file descriptors, page-cache asks and timing, as a launched rank has.

The suite runs the same `bench.storage.checkpoint.run_rank` inside its launched ranks, meeting through
their `Dist`; here the ranks meet through `LocalSync`: JSON files in a private folder and a
multiprocessing barrier. No pickle of anything a rank sends, no port, nothing on the store under test.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import multiprocessing
import multiprocessing.connection
import signal
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Any

from bench.errors import ConfigError
from bench.safe_fs import open_root, read_bounded, write_atomic
from bench.storage.checkpoint import CheckpointSpaceError, CheckpointSpec, Journal, aggregate, check_space, run_rank
from bench.storage.checkpoint_files import CheckpointError, Created, Naming, States, remove_files, remove_folders

MAX_MESSAGE = 16 << 20  # one rank's record is a few kilobytes per checkpoint
MAX_RANKS = 64
PR_SET_NAME = 15  # prctl(2)


class CheckpointRanksFailed(CheckpointError):
    """A rank failed or was killed: the message is its own error; `summary` what each rank completed
    (bench checkpoint --json prints it)."""

    def __init__(self, message: str, summary: dict) -> None:
        super().__init__(message)
        self.summary = summary


class LocalSync:
    """allgather between the ranks of one `bench checkpoint`: each round every rank writes its JSON to
    `folder` (one name per round and rank), meets the others at `barrier`, then reads theirs. A rank
    that dies breaks the barrier (the parent aborts it), and every other rank stops there."""

    def __init__(self, rank: int, world: int, barrier: Any, folder: Path) -> None:
        self.rank, self.world, self.barrier, self.folder = rank, world, barrier, folder
        self._round = 0

    def allgather(self, obj: Any) -> list:
        self._round += 1
        with open_root(self.folder) as fd:
            write_atomic(fd, f"{self._round}-{self.rank}.json", json.dumps(obj).encode())
        try:
            self.barrier.wait()
        except threading.BrokenBarrierError:
            raise CheckpointError("checkpoint: another rank failed; this rank stopped") from None
        return [
            json.loads(read_bounded(self.folder, f"{self._round}-{r}.json", MAX_MESSAGE)) for r in range(self.world)
        ]


def standalone_states(workload: str, preset: str) -> States:
    """A real model's checkpoint content, as training's rank would save it: the model's weights and
    an SGD-with-momentum state whose buffers exist (one step on random gradients, so they are not
    zeros a compressing store would shrink)."""
    import torch

    from bench.models.registry import build

    torch.manual_seed(0)
    model = build(workload, preset, 64).model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    optimizer.step()
    return {"model_states": {"module": model.state_dict()}, "optim_states": {"optimizer": optimizer.state_dict()}}


def _name_process(rank: int) -> None:
    """`ckpt-rank{r}` as the process's name (ps, top, /proc/<pid>/comm): which process is which rank."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NAME, f"ckpt-rank{rank}".encode(), 0, 0, 0)


def _journal(folder: Path, rank: int) -> Journal:
    """The rank's journal (bench.storage.checkpoint.Journal) as files in the exchange folder, each written
    whole (write_atomic): what the parent removes should this rank be killed."""

    def note(key: str, value: Any) -> None:
        with open_root(folder) as fd:
            write_atomic(fd, f"journal-{rank}-{key}.json", json.dumps(value).encode())

    return note


def _noted(folder: Path, rank: int, key: str) -> Any:
    try:
        return json.loads(read_bounded(folder, f"journal-{rank}-{key}.json", MAX_MESSAGE))
    except (OSError, ValueError):
        return None


def _exit_on_term(signum: int, frame: object) -> None:
    """SIGTERM (the parent stopping ranks) as SystemExit: run_rank's `finally` removes the rank's files."""
    raise SystemExit(128 + signum)


def _rank_main(
    rank: int, world: int, directory: str, spec: dict, model: tuple[str, str] | None, barrier: Any, folder: str
) -> None:
    """One rank's process: run the phase, leave its record (or its error) in the exchange folder."""
    signal.signal(signal.SIGTERM, _exit_on_term)
    _name_process(rank)
    exchange = Path(folder)
    try:
        states = standalone_states(*model) if model else None
        sync = LocalSync(rank, world, barrier, exchange)
        record = run_rank(
            rank, world, Path(directory), CheckpointSpec(**spec), sync, states, None, _journal(exchange, rank)
        )
        result: dict = {"record": record}
    except CheckpointSpaceError as error:
        result = {"error": str(error), "kind": "space"}
    except CheckpointError as error:
        result = {"error": str(error), "kind": "checkpoint"}
    except Exception as error:  # any other: to the parent with its traceback, then exit 1
        result = {"error": f"{type(error).__name__}: {error}", "kind": "internal", "trace": traceback.format_exc()}
    with open_root(exchange) as fd:
        write_atomic(fd, f"result-{rank}.json", json.dumps(result).encode())
    if "error" in result:
        raise SystemExit(1)


def run_local(directory: Path, spec: CheckpointSpec, ranks: int, model: tuple[str, str] | None = None) -> dict:
    """The checkpoint phase on `ranks` processes of this host writing to and reading from `directory`;
    the aggregate of their records (bench.storage.checkpoint.aggregate). model: (workload, preset) for a
    model checkpoint. A rank's failure stops the others and is raised as CheckpointRanksFailed (the
    first, in rank order, that is not a rank stopped by another's failure), after the files and
    folders a killed rank could not remove are removed here (`_failed`)."""
    if not 1 <= ranks <= MAX_RANKS:
        raise ConfigError(f"ranks: {ranks} must be between 1 and {MAX_RANKS}")
    if spec.bytes_per_rank is not None:  # a size is known here: refuse before starting any rank
        check_space(directory, [int(spec.bytes_per_rank)] * ranks, spec.writes)
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter per rank: no state of this one shared
    barrier = ctx.Barrier(ranks)
    with tempfile.TemporaryDirectory(prefix="scalewatch-checkpoint-sync-") as folder:
        procs = [
            ctx.Process(
                target=_rank_main,
                args=(r, ranks, str(directory), spec.model_dump(mode="json"), model, barrier, folder),
                name=f"checkpoint-rank{r}",
            )
            for r in range(ranks)
        ]
        for p in procs:
            p.start()
        try:
            _wait(procs, barrier)
        finally:
            for p in procs:
                if p.is_alive():
                    p.terminate()  # SIGTERM: the rank removes its own files on the way out
                p.join()
        results = [_result(Path(folder), r, p.exitcode) for r, p in enumerate(procs)]
        failures = [r for r in results if "error" in r]
        if not failures:
            return aggregate([r["record"] for r in results])
        first = next((f for f in failures if "another rank failed" not in f["error"]), failures[0])
        if first.get("kind") == "space":
            raise CheckpointSpaceError(first["error"])
        summary = _failed(directory, Path(folder), results, results.index(first))
    if first.get("trace"):
        first["error"] += "\n" + first["trace"]
    raise CheckpointRanksFailed(first["error"], summary)


def _failed(directory: Path, folder: Path, results: list[dict], failed_rank: int) -> dict:
    """After a failed phase: remove what a killed rank left (the files it named, by its journal, while
    they are still the files it wrote), then rank 0's folders when empty; what each rank completed.
    A checkpoint cut short is never counted: a rank journals a write only once its files are named."""
    folders = [Created(**c) for c in _noted(folder, 0, "folders") or []]
    ours = {f.rel for f in folders}  # rank 0's word on them is stale: they are tried again below
    removed, left, per_rank = 0, [], []
    for rank, result in enumerate(results):
        cleanup = _noted(folder, rank, "cleanup")
        if cleanup is None:  # it ended before removing its files: killed
            cleanup = dict(zip(("removed", "left"), remove_files(directory, _left_by(folder, rank)), strict=True))
        removed += cleanup["removed"]
        left += [item for item in cleanup["left"] if item.split(":")[0] not in ours]
        writes = _noted(folder, rank, "writes") or []
        per_rank.append(
            {
                "rank": rank,
                "outcome": "done" if "record" in result else result["error"].split("\n")[0],
                "writes": len(writes),
                "write_bytes": sum(w["bytes"] for w in writes),
            }
        )
    left += remove_folders(directory, folders)
    return {
        "status": "failed",
        "error": results[failed_rank]["error"].split("\n")[0],
        "failed_rank": failed_rank,
        # the contract's keys: no figure of a failed phase; `bytes` is what complete checkpoints wrote
        "write_mb_s": None,
        "read_mb_s": None,
        "bytes": sum(r["write_bytes"] for r in per_rank),
        "ranks": len(results),
        "duration_s": None,
        "per_rank": per_rank,
        "cleanup": {"removed": removed, "left": left},
    }


def _left_by(folder: Path, rank: int) -> list[Created | Naming]:
    """What a killed rank may have left named, by its journal: the files it noted as made, and the one it
    was naming, where it was killed before noting it (row 130): each removed only while still its file."""
    made: list[Created | Naming] = [Created(**c) for c in _noted(folder, rank, "made") or []]
    naming = _noted(folder, rank, "naming")
    if naming is not None and naming["rel"] not in {m.rel for m in made}:
        made.append(Naming(**naming))
    return made


def _wait(procs: list, barrier: Any) -> None:
    """Until every rank has ended; the first that ends in failure breaks the barrier for the rest."""
    pending = {p.sentinel: p for p in procs}
    while pending:
        for sentinel in multiprocessing.connection.wait(list(pending)):
            proc = pending.pop(sentinel)
            proc.join()
            if proc.exitcode != 0:
                barrier.abort()


def _result(folder: Path, rank: int, exitcode: int | None) -> dict:
    try:
        return json.loads(read_bounded(folder, f"result-{rank}.json", MAX_MESSAGE))
    except (OSError, ValueError):
        how = f"killed by {signal.Signals(-exitcode).name}" if exitcode and exitcode < 0 else f"exit {exitcode}"
        return {"error": f"rank {rank} ended without a result ({how})", "kind": "checkpoint"}
