"""`bench storage probe` and `bench sizing`: the storage's ceiling, and the GPUs it can feed."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from bench.config.models import ProbingSettings
from bench.config.types import default_of
from bench.errors import ConfigError


def add_parsers(sub) -> None:
    st = sub.add_parser("storage", help="measure the storage under test")
    st_sub = st.add_subparsers(dest="storage_command", required=True)
    p = st_sub.add_parser("probe", help="fio cold-read ceiling of a staged dataset (exit 0, 1 fio failed, 2 bad input)")
    p.add_argument("--path", type=Path, action="append", required=True, help="a staged dataset (repeatable)")
    # the suite's probe settings (the same fio probe after a sweep's last scale)
    p.add_argument(
        "--max-jobs",
        type=int,
        default=default_of(ProbingSettings, "probe_max_jobs"),
        help="parallelism climbs 1, 2, 4, ... up to this (1-256; default %(default)s)",
    )
    p.add_argument(
        "--seconds",
        type=float,
        default=default_of(ProbingSettings, "probe_seconds"),
        help="per level, direct I/O (0.5-600; default %(default)s)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_probe)
    s = sub.add_parser("sizing", help="GPUs the storage can feed, from a results table and a ceiling")
    s.add_argument("results", type=Path, help="CSV with model (or workload), gpus, avg_read_mb_s, peak_read_mb_s")
    s.add_argument("--ceiling-mb-s", type=float, required=True, help="the storage's read ceiling, MB/s")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_sizing)


def _probe(args: argparse.Namespace) -> int:
    from bench.storage.fio_probe import ProbeSettings, probe

    if not 1 <= args.max_jobs <= 256:
        raise ConfigError(f"--max-jobs: {args.max_jobs} must be between 1 and 256")
    if not 0.5 <= args.seconds <= 600:
        raise ConfigError(f"--seconds: {args.seconds} must be between 0.5 and 600")
    result = probe([p.absolute() for p in args.path], ProbeSettings(max_jobs=args.max_jobs, seconds=args.seconds))
    if args.json:
        print(json.dumps(result.as_dict(), allow_nan=False))
    else:
        print(f"{'jobs':>5}{'MB/s':>10}{'MB read':>10}{'s':>7}")
        for lv, tag in [*((lv, "") for lv in result.levels), (result.repeat, "  (the best level again)")]:
            reread = "" if lv["fresh"] else "  (re-read files an earlier read touched: a cache may have served it)"
            print(f"{lv['jobs']:>5}{lv['mb_s']:>10.1f}{lv['bytes'] / 1e6:>10.1f}{lv['seconds']:>7.2f}{tag}{reread}")
        note = "" if result.conclusive else f" (inconclusive: {result.reason})"
        print(f"ceiling {result.ceiling_mb_s:.1f} MB/s, {result.method} reads, bs {result.block_size}{note}")
    return 0


def _sizing(args: argparse.Namespace) -> int:
    from bench.analysis.verdict.sizing import read_sizing_csv, sizing

    if not (math.isfinite(args.ceiling_mb_s) and args.ceiling_mb_s > 0):
        raise ConfigError(f"--ceiling-mb-s: {args.ceiling_mb_s} must be a positive number of MB/s")
    rows = sizing(read_sizing_csv(args.results), args.ceiling_mb_s)
    if args.json:
        print(json.dumps({"ceiling_mb_s": args.ceiling_mb_s, "workloads": rows}, allow_nan=False))
    else:
        print(f"{'workload':<16}{'MB/s/GPU':>10}{'peak':>8}{'GPUs fed':>10}{'peak':>7}{'AU 90%':>8}")
        for r in rows:
            peak = "—" if r["per_gpu_peak_mb_s"] is None else f"{r['per_gpu_peak_mb_s']:.2f}"
            print(
                f"{r['workload']:<16}{r['per_gpu_demand_mb_s']:>10.2f}{peak:>8}{r['supported_gpus']:>10}"
                f"{r['supported_gpus_peak'] if r['supported_gpus_peak'] is not None else '—':>7}"
                f"{r['supported_gpus_au']:>8}"
            )
    return 0
