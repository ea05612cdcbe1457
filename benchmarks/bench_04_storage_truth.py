"""Benchmark section 4: storage bytes reported vs true bytes on a cold epoch; MB/s vs fio and a blkio throttle."""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

from runner import (
    BLKIO,
    Context,
    fio_mb_s,
    main_for,
    median,
    release,
    throttle,
    train,
)

NUMBER = 4
TITLE = "storage truth"


def storage_truth(tmp: Path, r: int, add) -> None:
    from bench.data.generate import GenerateSpec, generate

    big = tmp / "big"
    generate(GenerateSpec("coco", big, images=240, min_side=700, max_side=900, seed=6))
    true_bytes = sum(f.stat().st_size for f in (big / "images").iterdir())
    io_args = [
        "--workload",
        "ssd",
        "--data",
        str(big),
        "--epochs",
        "1",
        "--batch-size",
        "8",
        "--drop-caches",
        "--sample-interval",
        "0.25",
    ]
    train(["--workload", "ssd", "--data", str(big), "--steps", "2"])
    cold = [train(io_args)["epochs"][0] for _ in range(r)]
    add(
        "4 truth",
        "storage bytes reported / true bytes (cold epoch)",
        f"{statistics.median(e['bytes_from_storage'] for e in cold) / true_bytes:.4f}",
        "target within 0.98-1.02",
    )
    fio = median(lambda: fio_mb_s(big / "images"), r)
    harness = statistics.median(e["avg_read_mb_s"] for e in cold)
    add(
        "4 truth",
        "harness epoch-1 MB/s / fio MB/s, same files, unthrottled",
        f"{harness / fio:.3f}",
        f"({harness:.0f} vs {fio:.0f} MB/s: the loader, not the disk, is the limit here)",
    )
    if (BLKIO / "blkio.throttle.read_bps_device").exists():
        st = os.stat(big)
        device, rate = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}", 20 * 2**20
        group, prefix = throttle(device, rate)
        try:
            throttled = statistics.median(train(io_args, prefix)["epochs"][0]["avg_read_mb_s"] for _ in range(r))
            fio_t = median(lambda: fio_mb_s(big / "images", prefix), r)
        finally:
            release(group, device)
        add(
            "4 truth",
            "harness MB/s / blkio throttle (20 MiB/s)",
            f"{throttled / (rate / 1e6):.3f}",
            "target within 0.90-1.10",
        )
        add("4 truth", "harness MB/s / fio MB/s, both under the throttle", f"{throttled / fio_t:.3f}")


def run(ctx: Context) -> None:
    storage_truth(ctx.tmp, ctx.repeats, ctx.add)


if __name__ == "__main__":
    sys.exit(main_for(NUMBER))
