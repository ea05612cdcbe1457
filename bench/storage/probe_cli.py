"""One node's storage probe as the suite starts it on each node (bench.suite.node_probe): the climb, or
this node's share of a multi-node level, over a staged dataset's folder (fio: bench.storage.fio_probe) or
its prefix in a bucket (ranged GETs: bench.storage.s3_probe). JSON on stdout.

Why a module of its own: the entry point picks the backend by the storage kind, and each backend's module
stays free of the other (the S3 probe shares the file probe's climb rules and result type)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from bench.config.models import ProbingSettings
from bench.config.types import default_of
from bench.errors import BenchError, DatasetError
from bench.storage.fio_probe import ProbeSettings, node_name, probe, probe_share
from bench.storage.s3_probe import main_s3


def _share_of(text: str | None) -> tuple[int, int] | None:
    """--share I/N, or 'slurm' (SLURM_PROCID of SLURM_NTASKS); None for the one-node climb."""
    if text is None:
        return None
    if text == "slurm":
        return int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
    share, of = (int(x) for x in text.split("/"))
    return share, of


def main(argv: list[str] | None = None) -> int:
    """One node's probe, as bench.suite.node_probe starts it on each node: JSON on stdout; on bad input or a
    failed read, one line on stderr and exit 2 (not a staged dataset, unreadable) or 1 (fio failed)."""
    began = time.time()  # after the imports: the lead time the suite gives nodes before a start-at

    p = argparse.ArgumentParser(prog="python -m bench.storage.probe_cli")
    p.add_argument("--path", action="append", required=True, help="a staged dataset's folder, or s3://BUCKET/PREFIX")
    p.add_argument("--max-jobs", type=int, default=default_of(ProbingSettings, "probe_max_jobs"))
    p.add_argument("--seconds", type=float, default=default_of(ProbingSettings, "probe_seconds"))
    p.add_argument("--share", help="I/N: this node's disjoint share; 'slurm' takes it from SLURM_PROCID/NTASKS")
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--start-at", type=float)
    args = p.parse_args(argv)
    settings = ProbeSettings(max_jobs=args.max_jobs, seconds=args.seconds)
    try:
        # this node's clock at process start and at report: the suite checks them against its own
        # (bench.suite.node_probe.judge_level) and takes its lead time from their difference
        share = _share_of(args.share)
        if any(path.startswith("s3://") for path in args.path):  # a bucket: ranged GETs
            doc = main_s3(args.path, args.max_jobs, args.seconds, share, args.offset, args.jobs, args.start_at)
        elif share is None:
            doc = probe([Path(p) for p in args.path], settings).as_dict()
        else:
            doc = probe_share([Path(p) for p in args.path], settings, *share, args.offset, args.jobs, args.start_at)
        stamps = {"process_started_at": began, "reported_at": time.time()}
        if share is None:
            doc["extra"] |= stamps
        else:
            doc |= stamps
    except DatasetError as error:
        print(f"{node_name()}: {error}", file=sys.stderr)
        return 2
    except BenchError as error:
        print(f"{node_name()}: {error}", file=sys.stderr)
        return 1
    print(json.dumps(doc, allow_nan=False), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
