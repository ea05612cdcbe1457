"""`bench sweep`: the whole suite without Airflow (stage, launch each scale, evaluate, store, report)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.config import SweepConfig, parse
from bench.errors import ConfigError


def add_parsers(sub) -> None:
    s = sub.add_parser("sweep", help="run the suite once end to end (exit 0 pass, 1 scaling fails)")
    s.add_argument("--config", type=Path, help="JSON file with SweepConfig fields; flags override it")
    s.add_argument("--workloads", help="comma list of ssd,deeplabv3plus")
    s.add_argument("--gpus", help="comma list of rank counts, e.g. 1,2")
    s.add_argument("--launcher", choices=("local", "ssh", "slurm"))
    s.add_argument("--dataset-path", type=Path)
    s.add_argument("--dataset-images", type=int)
    s.add_argument("--steps", type=int)
    s.add_argument("--batch-size", type=int)
    s.add_argument("--image-size", type=int)
    s.add_argument("--loader", choices=("dali", "torch"))
    s.add_argument("--results-url", help="results store (default $SCALEWATCH_RESULTS_URL, then SQLite)")
    s.add_argument("--output-dir", type=Path)
    s.add_argument("--suite-run-id")
    s.add_argument("--min-scaling-efficiency", type=float)
    s.set_defaults(func=_sweep)


# The embedded default's bound, from measurement with rank slots on a 2-core CPU machine (docs/benchmarks.md).
DEFAULT_MIN_SCALING_EFFICIENCY = 0.7


def defaults(base: Path) -> dict:
    """The embedded default: CPU, local launcher, small synthetic dataset, SQLite."""
    return {
        "workloads": ["ssd", "deeplabv3plus"],
        "gpus": [1, 2],
        "launcher": "local",
        "dataset_path": str(base / "data"),
        "dataset_images": 1536,
        "output_dir": str(base / "runs"),
        "thresholds": {
            "min_scaling_efficiency": DEFAULT_MIN_SCALING_EFFICIENCY,
            "min_bandwidth_efficiency": 0.4,
        },
        "cpus_per_rank": 1,
        # No differential reruns in the embedded default: one failing workload's four reruns add about 80 s
        # on two cores (docs/benchmarks.md). Suites and --config files have them on.
        "confirm_causes": False,
        "train": {
            "workload": "ssd",
            "steps": 20,
            "min_measure_s": 10.0,
            "warmup_steps": 2,
            "batch_size": 8,
            "image_size": 128,
            "loader": "dali",
            "loader_threads": 1,
            "sample_interval_s": 0.25,
            "data": str(base / "data"),
        },
    }


def _sweep(args: argparse.Namespace) -> int:
    from bench.pipeline import sweep

    base = Path.cwd() / "scalewatch-home"
    fields = defaults(base)
    if args.config:
        try:
            fields |= json.loads(args.config.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise ConfigError(f"--config {args.config}: {error}") from None
    train = dict(fields.get("train", {}))
    for flag in ("workloads", "gpus"):
        value = getattr(args, flag)
        if value is not None:
            items = [v.strip() for v in value.split(",") if v.strip()]
            try:
                fields[flag] = [int(v) for v in items] if flag == "gpus" else items
            except ValueError:
                raise ConfigError(f"--gpus: {value!r} must be a comma list of whole numbers") from None
    for flag in ("launcher", "dataset_images"):
        if getattr(args, flag) is not None:
            fields[flag] = getattr(args, flag)
    for flag in ("dataset_path", "output_dir"):
        if getattr(args, flag) is not None:
            fields[flag] = str(getattr(args, flag).absolute())
    for flag in ("steps", "batch_size", "image_size", "loader"):
        if getattr(args, flag) is not None:
            train[flag] = getattr(args, flag)
    if args.min_scaling_efficiency is not None:
        fields["thresholds"] = {
            **fields.get("thresholds", {}),
            "min_scaling_efficiency": args.min_scaling_efficiency,
        }
    train["data"] = fields["dataset_path"]
    fields["train"] = train
    cfg = parse(SweepConfig, fields, prefix="")
    import os

    store_url = args.results_url or os.environ.get("SCALEWATCH_RESULTS_URL") or f"sqlite:///{base / 'results.db'}"
    outcome = sweep(cfg, store_url, args.suite_run_id, log=lambda m: print(m, file=sys.stderr))
    print(json.dumps(outcome, indent=2))
    print(f"verdict: {'PASSED' if outcome['passed'] else 'FAILED'}; report: {outcome['report']}")
    return 0 if outcome["passed"] else 1
