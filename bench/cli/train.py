"""`bench train`: one training rank, started by the suite's launchers, under horovodrun or srun, or plainly."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from bench.config.checkpoint import CheckpointSpec
from bench.config.models import TrainConfig
from bench.config.types import choices_of, default_of, parse
from bench.errors import ConfigError
from bench.launch.train_spec import SHA256_RE, read_train_spec


def add_parsers(sub) -> None:
    # No flag holds a default of its own: a flag not given is absent (SUPPRESS) and TrainConfig fills it
    # in, so the model is the one place a default is written, and --spec can tell what else was given.
    p = sub.add_parser(
        "train",
        help="run one training rank (start under horovodrun, srun, or plainly)",
        argument_default=argparse.SUPPRESS,
    )
    p.add_argument(
        "--spec",
        type=Path,
        help="the rank's settings as a TrainConfig JSON file (the launchers' train.json); no other flag but --backend",
    )
    p.add_argument(
        "--spec-sha256",
        type=_sha256,
        help="with --spec: the file's expected sha256 (the launchers pass it; a file swapped since is refused)",
    )
    p.add_argument("--workload", help="ssd | deeplabv3plus, or an emulated workload's name")
    p.add_argument("--preset", choices=choices_of(TrainConfig, "preset"))
    p.add_argument("--data", help="the dataset's folder, or s3://BUCKET/PREFIX (a dataset staged into a bucket)")
    p.add_argument("--synthetic", action="store_true", help="in-memory tensors: the compute upper bound")
    p.add_argument("--batch-size", type=int)
    p.add_argument("--image-size", type=int)
    p.add_argument("--warmup-steps", type=int)
    group = p.add_mutually_exclusive_group()
    group.add_argument("--steps", type=int)
    group.add_argument("--epochs", type=int)
    p.add_argument("--loader", choices=choices_of(TrainConfig, "loader"))
    p.add_argument("--loader-threads", type=int)
    p.add_argument("--metrics-out", type=Path)
    p.add_argument("--seed", type=int)
    p.add_argument("--lr", type=float)
    p.add_argument("--sample-interval", type=float, dest="sample_interval_s")
    p.add_argument("--no-sampler", action="store_false", dest="sampler")
    p.add_argument(
        "--min-measure-s", type=float, help="with --steps: keep going until this many seconds are measured too"
    )
    p.add_argument(
        "--drop-caches",
        action=argparse.BooleanOptionalAction,
        help="evict the dataset's pages from the node's page cache before epoch 1 (default: "
        f"{default_of(TrainConfig, 'drop_caches')})",
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
        choices=choices_of(TrainConfig, "backend"),
        help="distributed backend; auto: Horovod where it imports (or horovodrun started us), else torch DDP",
    )
    p.add_argument(
        "--bind",
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
    c.add_argument(
        "--checkpoint-dir", help="the folder on the store under test they are written to, or s3://BUCKET/PREFIX"
    )


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


def _sha256(value: str) -> str:
    if not re.fullmatch(SHA256_RE, value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a sha256 (64 lowercase hex digits)")
    return value


def train_config(args: argparse.Namespace) -> TrainConfig:
    """The rank's settings from `bench train`'s arguments: the spec file, or the flags a person typed."""
    fields = {k: v for k, v in vars(args).items() if k not in ("command", "func") and v is not None}
    return _from_spec(fields) if "spec" in fields else _from_flags(fields)


def _cmd_train(args: argparse.Namespace) -> int:
    cfg = train_config(args)
    from bench.train.runner import run_rank

    summary = run_rank(cfg)
    if summary is not None:
        print(json.dumps({k: summary[k] for k in ("workload", "ranks", "images_per_s", "epoch_time_s")}))
    return 0


def _from_spec(fields: dict) -> TrainConfig:
    """The launchers' way: the worker's model, read back; `--backend` is the one flag beside it (the rank
    wrapper adds the backend the launcher resolved for every rank)."""
    others = sorted(set(fields) - {"spec", "spec_sha256", "backend"})
    if others:
        flags = ", ".join("--" + k.replace("_", "-") for k in others)
        raise ConfigError(f"--spec: the settings are the file's; {flags} given beside it (only --backend may be)")
    cfg = read_train_spec(fields["spec"], fields.get("spec_sha256"))
    if "backend" in fields:
        cfg = parse(TrainConfig, cfg.model_dump(exclude_unset=True) | {"backend": fields["backend"]}, prefix="--")
    return cfg


def _from_flags(fields: dict) -> TrainConfig:
    if "spec_sha256" in fields:
        raise ConfigError("--spec-sha256: checks a --spec file; give --spec too")
    for key in ("data", "metrics_out", "checkpoint_dir"):
        if key in fields and not str(fields[key]).startswith("s3://"):
            fields[key] = Path(fields[key]).absolute()
    spec = {name: fields.pop(flag) for flag, name in CHECKPOINT_FLAGS.items() if flag in fields}
    if spec:
        spec.setdefault("mode", "size")
        fields["checkpoint"] = spec
    return parse(TrainConfig, fields, prefix="--")
