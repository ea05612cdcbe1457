"""`bench checkpoint`: the checkpoint phase alone, on R ranks of this host (write, then cold restore)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import get_args

from pydantic import ValidationError

from bench.config.types import WORKLOADS, Preset
from bench.errors import ConfigError

PRESETS: tuple[str, ...] = get_args(Preset)
# The spec's fields as the flags that set them, so an error names what the user typed.
FLAGS = {"bytes_per_rank": "--bytes-per-rank", "writes": "--writes", "reads": "--reads", "mode": "--model"}


def add_parsers(sub) -> None:
    c = sub.add_parser(
        "checkpoint",
        help="checkpoint write and cold-restore bandwidth of a store (exit 0, 1 a rank failed, 2 bad input or no room)",
    )
    c.add_argument("--path", type=Path, required=True, help="an existing folder on the store under test")
    what = c.add_mutually_exclusive_group(required=True)
    what.add_argument("--bytes-per-rank", help="each rank's shard per checkpoint: bytes, or 16MiB, 2GB (1 MiB-1 TiB)")
    what.add_argument("--model", choices=WORKLOADS, help="torch.save of this model's and its optimizer's state")
    c.add_argument("--preset", choices=PRESETS, help="the model's size (with --model; default tiny)")
    c.add_argument("--ranks", type=int, default=1, help="ranks on this host, one process each (1-64)")
    # --writes/--reads left out take CheckpointSpec's defaults (MLPerf Storage's counts), read where the spec is
    # built: importing bench.storage.checkpoint here would load it on every `bench` start
    c.add_argument("--writes", type=int, help="checkpoints written, all ranks at once (1-100; default: MLPerf's)")
    c.add_argument("--reads", type=int, help="checkpoints read back cold (1-100; default: MLPerf's)")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=_checkpoint)


def _spec(args: argparse.Namespace):
    """The flags as a CheckpointSpec; a bad value is refused naming its flag."""
    from bench.storage.checkpoint import CheckpointSpec

    data = {"mode": "model" if args.model else "size"}
    data |= {k: v for k, v in (("writes", args.writes), ("reads", args.reads)) if v is not None}
    if args.bytes_per_rank is not None:
        data["bytes_per_rank"] = args.bytes_per_rank
    try:
        return CheckpointSpec.model_validate(data)
    except ValidationError as error:
        lines = []
        for item in error.errors():
            field = str(item["loc"][0]) if item["loc"] else ""
            message = item["msg"].removeprefix("Value error, ").removeprefix(f"{field}: ")
            flag = FLAGS.get(field, field or "--bytes-per-rank")
            if flag == "--bytes-per-rank":
                message += " (allowed: 1 MiB to 1 TiB, as bytes or with a unit: 16MiB, 2GB)"
            lines.append(f"{flag}: {message}")
        raise ConfigError("; ".join(lines)) from None


def _checkpoint(args: argparse.Namespace) -> int:
    from bench.storage.checkpoint_local import MAX_RANKS, CheckpointRanksFailed, run_local

    if not args.path.is_dir():
        raise ConfigError(f"--path: {args.path} is not an existing folder")
    if not 1 <= args.ranks <= MAX_RANKS:
        raise ConfigError(f"--ranks: {args.ranks} must be between 1 and {MAX_RANKS}")
    if args.preset and not args.model:
        raise ConfigError("--preset: only with --model (a size needs no model)")
    spec = _spec(args)
    model = (args.model, args.preset or "tiny") if args.model else None
    path = args.path.absolute()
    head = {
        "path": str(path),
        "mode": spec.mode,
        "model": model[0] if model else None,
        "preset": model[1] if model else None,
        "bytes_per_rank": int(spec.bytes_per_rank) if spec.bytes_per_rank is not None else None,
        "writes": spec.writes,
        "reads": spec.reads,
    }
    try:
        doc = head | {"status": "done"} | run_local(path, spec, args.ranks, model)
    except CheckpointRanksFailed as error:  # what each rank completed, then the error's message and exit 1
        if args.json:
            print(json.dumps(head | error.summary, allow_nan=False))
        raise
    if args.json:
        print(json.dumps(doc, allow_nan=False))
    else:
        _print(doc)
    return 0


def _print(doc: dict) -> None:
    what = f"{doc['model']} {doc['preset']} states" if doc["model"] else f"{doc['bytes_per_rank'] / 2**20:.1f} MiB"
    print(
        f"checkpoint at {doc['path']}: {doc['ranks']} ranks on {doc['nodes']} node(s), {what} per rank, "
        f"{doc['writes']} writes, {doc['reads']} reads"
    )
    print(f"{'phase':<7}{'MB/s':>10}{'MB':>10}{'s':>9}   (a checkpoint lasts as long as its slowest rank)")
    for phase in ("write", "read"):
        p = doc[phase]
        print(f"{phase:<7}{p['mb_s']:>10.1f}{p['bytes'] / 1e6:>10.1f}{p['seconds']:>9.2f}")
    if not doc["read"]["cold"]:
        print(f"not cold: {len(doc['read']['not_cold'])} read(s) found their file in the page cache (see --json)")
    print(f"{'rank':>5}  {'host':<16}{'write MB/s':>11}{'read MB/s':>11}  read from")
    for r in doc["per_rank"]:
        where = "another node" if r["other_node"] else "this node"
        print(
            f"{r['rank']:>5}  {r['host'][:15]:<16}{r['write_mb_s']:>11.1f}{r['read_mb_s']:>11.1f}"
            f"  rank {r['read_from']} ({where})"
        )
    for item in doc["cleanup"]["left"]:
        print(f"left: {item}")
