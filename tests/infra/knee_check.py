"""Issue 14's storage knee, run for real: a cgroup-v1 blkio throttle between what 1 and 2 ranks read
(`throttle_x` x one rank's unthrottled read rate), and `bench sweep` at 1 and 2 ranks under it, each run
one epoch of a staged dataset that is evicted before every run, with the differential reruns on.

What it shows: the projection (the storage ceiling the probe read under the throttle, over the largest
per-GPU demand) puts the knee at 1 GPU; the 2-rank scale fails, lands at what the throttle allows and is
named for the store; its warm-cache rerun takes the throttle out. Judged against linear: against the node
ceiling (at most ~1.7x one rank on these 2 cores) a throttle above what 1 rank reads leaves 2 ranks at
>= 0.65 of it, too near the bound to assert.

Used by tests/bench/analysis/verdict/test_bottleneck.py (once: the mechanism) and benchmark section 10
(repeated: the figures; docs/benchmarks.md, 10). The epoch cannot be shorter: the throttled 2-rank scale
must read for MIN_BANDWIDTH_WINDOW_S (5 s) to carry a valid storage rate, and it reads the epoch at 1.1 x
what one rank reads (~7 s for 1,200 images at 150 images/s, the fastest one rank read here). What made the
test take 6-10 minutes was the free sweep: a full sweep (node ceiling, probe, and the differential reruns
whenever 2 ranks missed the bound) at every attempt; it is now the two epoch-long runs it needs.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from bench.data.generate import GenerateSpec, generate
from tests.conftest import BENCH
from tests.infra.faults import blkio_read_throttle


@dataclass(frozen=True)
class KneeSetup:
    images: int = 1200  # one epoch per run: 1 rank reads it in ~12 s here
    # The throttle, as a multiple of what 1 rank reads: 2 ranks then reach at most 0.55 of linear, a clear
    # failure even when the throttled run's 1 rank is 15% slower than the free one (at 1.25 x, one CI run
    # scored 2 ranks a borderline pass).
    throttle_x: float = 1.1
    # Unthrottled, 2 ranks must read this much above the throttle (i.e. scale >= 0.715), so that a
    # warm-cache rerun, which runs like the free run, wins back at least half of the 0.7 bound's shortfall
    # even on a noisier moment and the differential rerun confirms storage. At >= 0.66 one CI run's warm
    # rerun fell short, and the synthetic one (no decode on these 2 shared cores) named input_cpu.
    headroom: float = 1.3
    # This machine's 2-core ceiling moves with the host's load: the free sweep is taken again (at most this
    # many times in all) until 2 ranks read clearly more than the throttle will allow.
    attempts: int = 4
    seed: int = 9


FULL = KneeSetup()


class NoKnee(RuntimeError):
    """2 ranks never read enough above the throttle here to show the knee."""


@dataclass
class Knee:
    setup: KneeSetup
    per_image: float  # bytes of one image of the dataset
    rate: int  # the throttle, bytes/s
    free: pd.DataFrame  # the unthrottled sweep that set the throttle (1 and 2 ranks)
    knee: pd.DataFrame  # the sweep under the throttle: scales, ceilings, probe, differential reruns
    outcome: dict  # `bench sweep`'s JSON for the throttled sweep
    attempts: int  # free sweeps taken

    @property
    def allowed_img_s(self) -> float:
        """What the throttle lets through, in images/s."""
        return self.rate / self.per_image

    @staticmethod
    def row(frame: pd.DataFrame, gpus: int) -> pd.Series:
        return frame[frame["gpus"] == gpus].iloc[0]


def sweep(home: Path, run_id: str, config: dict, prefix: str = "") -> tuple[dict, pd.DataFrame]:
    """`bench sweep --config` (optionally inside a shell prefix: a cgroup), its JSON and results.csv."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / f"{run_id}.json"
    path.write_text(json.dumps(config))
    cmd = [BENCH, "sweep", "--config", str(path), "--results-url", f"sqlite:///{home / 'r.db'}"]
    cmd += ["--suite-run-id", run_id]
    if prefix:
        cmd = ["sh", "-c", f'{prefix} && exec "$@"', "sh", *cmd]
    done = subprocess.run(cmd, cwd=home, capture_output=True, text=True, timeout=900)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"bench sweep {run_id} exited {done.returncode}: {done.stderr[-3000:]}")
    outcome = json.loads(done.stdout[: done.stdout.rindex("}") + 1])
    return outcome, pd.read_csv(home / "scalewatch-home" / "runs" / run_id / "results.csv")


def knee_config(data: Path, src: Path) -> dict:
    """The throttled sweep's settings, by the names a suite file uses."""
    return {
        "workloads": ["ssd"],
        "gpus": [1, 2],
        "dataset_path": str(data),
        "stage_from": str(src),
        "epochs": 1,
        "min_measure_s": 0.0,
        "warmup_steps": 2,
        "batch_size": 8,
        "image_size": 128,
        "evict_dataset": True,
        "probe_max_jobs": 2,
        "probe_seconds": 1.0,
        "confirm_causes": True,  # the warm-cache and synthetic reruns, for real
        "ideal": "linear",
        "min_scaling_efficiency": 0.7,
        "min_bandwidth_efficiency": 0.0,
        "max_step_time_spread": 100.0,
    }


def run_knee(root: Path, setup: KneeSetup = FULL) -> Knee:
    """Generate and stage the dataset, find what 1 and 2 ranks read unthrottled, throttle the store between
    the two and sweep again under the throttle."""
    src = root / "src" / "coco"
    generate(GenerateSpec("coco", src, images=setup.images, min_side=256, max_side=320, seed=setup.seed))
    per_image = sum(p.stat().st_size for p in (src / "images").iterdir()) / setup.images
    cfg = knee_config(root / "data", src.parent)
    # The free sweep only sets the throttle and shows the unthrottled cause: no node ceiling, probe or
    # reruns. Its runs read the whole epoch, as the throttled sweep's warm rerun does: 2 ranks' rate over a
    # shorter window said too little about whether that rerun would scale (one of two benchmark repeats
    # with 40-step free runs named the 2-rank cause `undetermined`: its warm rerun fell short).
    free_cfg = cfg | {"confirm_causes": False, "ceilings": False, "probe_storage": False}
    home = root / "home"
    for attempt in range(1, setup.attempts + 1):
        _, free = sweep(home, f"free{attempt}", free_cfg)
        d1 = Knee.row(free, 1)["throughput_img_s"] * per_image
        d2 = Knee.row(free, 2)["throughput_img_s"] * per_image
        rate = int(setup.throttle_x * d1)
        if d2 >= setup.headroom * rate:
            break
    else:
        raise NoKnee(
            f"2 ranks never read {setup.headroom - 1:.0%} above {setup.throttle_x} x 1 rank here in "
            f"{setup.attempts} sweeps ({d1 / 1e6:.1f} vs {d2 / 1e6:.1f} MB/s): the machine is too loaded"
        )
    with blkio_read_throttle(root, rate) as prefix:
        outcome, knee = sweep(home, "knee", cfg, prefix=prefix)
    return Knee(setup, per_image, rate, free, knee, outcome, attempt)
