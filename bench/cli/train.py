"""`bench train`: one training rank, started by the suite's launchers, under horovodrun or srun, or plainly."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.config import CheckpointSpec, TrainConfig, choices_of, default_of, parse


def add_parsers(sub) -> None:
    p = sub.add_parser("train", help="run one training rank (start under horovodrun, srun, or plainly)")
    p.add_argument("--workload", required=True, help="ssd | deeplabv3plus, or an emulated workload's name")
    p.add_argument("--preset", default=default_of(TrainConfig, "preset"), choices=choices_of(TrainConfig, "preset"))
    p.add_argument("--data", type=Path)
    p.add_argument("--synthetic", action="store_true", help="in-memory tensors: the compute upper bound")
    p.add_argument("--batch-size", type=int, default=default_of(TrainConfig, "batch_size"))
    p.add_argument("--image-size", type=int, default=default_of(TrainConfig, "image_size"))
    p.add_argument("--warmup-steps", type=int, default=default_of(TrainConfig, "warmup_steps"))
    group = p.add_mutually_exclusive_group()
    group.add_argument("--steps", type=int)
    group.add_argument("--epochs", type=int)
    p.add_argument("--loader", default=default_of(TrainConfig, "loader"), choices=choices_of(TrainConfig, "loader"))
    p.add_argument("--loader-threads", type=int, default=default_of(TrainConfig, "loader_threads"))
    p.add_argument("--metrics-out", type=Path)
    p.add_argument("--seed", type=int, default=default_of(TrainConfig, "seed"))
    p.add_argument("--lr", type=float, default=default_of(TrainConfig, "lr"))
    p.add_argument(
        "--sample-interval", type=float, default=default_of(TrainConfig, "sample_interval_s"), dest="sample_interval_s"
    )
    p.add_argument("--no-sampler", action="store_false", dest="sampler")
    p.add_argument(
        "--min-measure-s", type=float, help="with --steps: keep going until this many seconds are measured too"
    )
    p.add_argument(
        "--drop-caches",
        action=argparse.BooleanOptionalAction,
        default=default_of(TrainConfig, "drop_caches"),
        help="evict the dataset's pages from the node's page cache before epoch 1 (default: %(default)s)",
    )
    p.add_argument(
        "--warm-cache",
        action="store_true",
        help="read every dataset file once before epoch 1 (needs --no-drop-caches): storage out of the run",
    )
    p.add_argument(
        "--precision",
        choices=choices_of(TrainConfig, "precision"),
        help="autocast dtype; fp16 runs with a GradScaler and needs a CUDA GPU (default: "
        f"{default_of(TrainConfig, 'precision')})",
    )
    p.add_argument("--amp", action="store_true", help="alias: bf16 where the device supports it, else fp16")
    p.add_argument(
        "--compile",
        choices=choices_of(TrainConfig, "compile"),
        help="torch.compile the model, or replay it as CUDA graphs (GPU, fixed shapes); compile time is warm-up",
    )
    p.add_argument(
        "--independent",
        action="store_true",
        help="no gradient collective between the ranks: each trains alone on its slot (the node's ceiling)",
    )
    p.add_argument(
        "--backend",
        default=default_of(TrainConfig, "backend"),
        choices=choices_of(TrainConfig, "backend"),
        help="distributed backend; auto: Horovod where it imports (or horovodrun started us), else torch DDP",
    )
    p.add_argument(
        "--bind",
        default=default_of(TrainConfig, "bind"),
        choices=choices_of(TrainConfig, "bind"),
        help="auto: ranks started unpinned (horovodrun, torchrun, srun) split this node's allowed cores by local rank",
    )
    p.add_argument("--run-nonce", help="set by the launchers: ties the summary to one submit")
    _checkpoint_flags(p)
    _emulation_flags(p)
    p.set_defaults(func=_cmd_train)


def _checkpoint_flags(p) -> None:
    """The checkpoint phase's flags (bench.config.CheckpointSpec) and the saves during training."""
    c = p.add_argument_group("checkpoint phase (after the measured steps) and saves during them")
    c.add_argument(
        "--checkpoint-mode",
        choices=choices_of(CheckpointSpec, "mode"),
        help="each rank writes a shard, then reads one back",
    )
    c.add_argument("--checkpoint-bytes", help="size mode: each rank's shard per checkpoint (1 MiB-1 TiB)")
    c.add_argument("--checkpoint-writes", type=int, help="checkpoints written (default: MLPerf's)")
    c.add_argument("--checkpoint-reads", type=int, help="checkpoints read back cold (default: MLPerf's)")
    c.add_argument("--checkpoint-every-steps", type=int, help="save model and optimizer every N measured steps")
    c.add_argument("--checkpoint-dir", type=Path, help="the folder on the store under test they are written to")


def _emulation_flags(p) -> None:
    """An emulated accelerator's flags (bench/workloads): set by the suite from a workload file."""
    emu = p.add_argument_group("emulated accelerator (bench/workloads): real reads, a timed wait per batch")
    emu.add_argument("--accelerator-s", type=float, help="seconds per batch the emulated accelerator computes")
    emu.add_argument("--accelerator", help="the profile's name, recorded with the results")
    emu.add_argument("--gradient-bytes", type=int, help="gradient bytes allreduced per emulated step")
    emu.add_argument("--record-format", choices=choices_of(TrainConfig, "record_format"))
    emu.add_argument("--decode", action="store_true", help="decode each record after reading it")
    emu.add_argument("--no-shuffle", action="store_false", dest="shuffle")
    emu.add_argument("--prefetch", type=int, help="batches each reader thread keeps ahead")


CHECKPOINT_FLAGS = {"checkpoint_mode": "mode", "checkpoint_bytes": "bytes_per_rank"}
CHECKPOINT_FLAGS |= {"checkpoint_writes": "writes", "checkpoint_reads": "reads"}


def _cmd_train(args: argparse.Namespace) -> int:
    fields = {k: v for k, v in vars(args).items() if k not in ("command", "func") and v is not None}
    for key in ("data", "metrics_out", "checkpoint_dir"):
        if key in fields:
            fields[key] = fields[key].absolute()
    spec = {name: fields.pop(flag) for flag, name in CHECKPOINT_FLAGS.items() if flag in fields}
    if spec:
        spec.setdefault("mode", "size")
        fields["checkpoint"] = spec
    cfg = parse(TrainConfig, fields, prefix="--")
    from bench.train.runner import run_rank

    summary = run_rank(cfg)
    if summary is not None:
        print(json.dumps({k: summary[k] for k in ("workload", "ranks", "images_per_s", "epoch_time_s")}))
    return 0
