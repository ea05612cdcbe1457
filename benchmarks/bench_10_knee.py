"""Benchmark section 10: a blkio throttle between what 1 and 2 ranks read; projected vs measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
from runner import (
    BIN,
    Context,
    main_for,
    release,
    throttle,
)

NUMBER = 10
TITLE = "storage knee"


def storage_knee(tmp: Path, add) -> None:
    """A blkio throttle at 1.25 x what one rank reads: the projection says 1 GPU; what do 2 ranks get?"""
    from bench.data.generate import GenerateSpec, generate

    src = tmp / "knee-src" / "coco"
    generate(GenerateSpec("coco", src, images=1200, min_side=256, max_side=320, seed=9))
    per_image = sum(p.stat().st_size for p in (src / "images").iterdir()) / 1200
    home = tmp / "knee"
    home.mkdir()
    cfg = home / "cfg.json"
    cfg.write_text(
        json.dumps(
            {
                "workloads": ["ssd"],
                "gpus": [1, 2],
                "dataset_path": str(home / "data"),
                "stage_from": str(src.parent),
                "probe_max_jobs": 2,
                "probe_seconds": 1.0,
                "min_scaling_efficiency": 0.7,
                "min_bandwidth_efficiency": 0.0,
                "max_step_time_spread": 100,
                "epochs": 1,
                "batch_size": 8,
                "image_size": 128,
                "evict_dataset": True,
                "confirm_causes": False,
            }
        )
    )

    def sweep(run_id: str, prefix: str = "") -> pd.DataFrame:
        cmd = [
            str(BIN / "bench"),
            "sweep",
            "--config",
            str(cfg),
            "--results-url",
            f"sqlite:///{home / 'r.db'}",
            "--suite-run-id",
            run_id,
        ]
        if prefix:
            cmd = ["sh", "-c", f'{prefix} && exec "$@"', "sh", *cmd]
        subprocess.run(cmd, cwd=home, capture_output=True, text=True, timeout=900)
        return pd.read_csv(home / "scalewatch-home" / "runs" / run_id / "results.csv").set_index("gpus")

    free = sweep("free")
    rate = int(1.25 * free.loc[1, "throughput_img_s"] * per_image)
    st = os.stat(home)
    group, prefix = throttle(f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}", rate)
    try:
        knee = sweep("knee", prefix)
    finally:
        release(group, f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    sized = knee[knee["supported_gpus"].notna()]
    projected = int(sized["supported_gpus"].iloc[0]) if not sized.empty else None
    allowed = rate / per_image
    add(
        "10 knee",
        "2-rank images/s under the throttle / what the throttle allows",
        f"{knee.loc[2, 'throughput_img_s'] / allowed:.3f}",
        f"target within 0.90-1.10; projected supported GPUs {projected} (knee between 1 and 2); "
        f"2-rank bottleneck: {knee.loc[2, 'bottleneck']}; unthrottled 2-rank: {free.loc[2, 'bottleneck'] or 'none'}",
    )


def run(ctx: Context) -> None:
    storage_knee(ctx.tmp, ctx.add)


if __name__ == "__main__":
    sys.exit(main_for(NUMBER))
