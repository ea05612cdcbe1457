"""Benchmark section 8: the embedded default's bound, bench sweep with the embedded default run back to back."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from runner import (
    BIN,
    Context,
    main_for,
)

NUMBER = 8
TITLE = "default bound"


def default_sweep_efficiencies(tmp: Path, runs: int) -> dict[str, list[float]]:
    """`bench sweep` with the embedded default, `runs` times: each sweep is one interleaved 1 -> 2 rank pair
    per workload through the same code path as README command 1 (local launcher, rank slots, 10 s windows)."""
    home = tmp / "bound"
    home.mkdir(exist_ok=True)
    found: dict[str, list[float]] = {}
    for i in range(runs):
        done = subprocess.run(
            [
                str(BIN / "bench"),
                "sweep",
                "--results-url",
                f"sqlite:///{home / 'results.db'}",
                "--suite-run-id",
                f"bound-{i}",
            ],
            cwd=home,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if done.returncode not in (0, 1):  # 1: a scale below the bound is a figure too
            raise RuntimeError(done.stderr[-2000:])
        frame = pd.read_csv(home / "scalewatch-home" / "runs" / f"bound-{i}" / "results.csv")
        for row in frame[frame["gpus"] == 2].itertuples():
            found.setdefault(row.workload, []).append(float(row.scaling_efficiency))
        print(f"  bound run {i}: " + ", ".join(f"{w} {v[-1]:.3f}" for w, v in found.items()), flush=True)
    return found


def default_bound(tmp: Path, add, runs: int = 10) -> None:
    from scipy import stats

    for workload, values in default_sweep_efficiencies(tmp, runs).items():
        a = np.array(values)
        h = stats.t.ppf(0.975, len(a) - 1) * a.std(ddof=1) / np.sqrt(len(a))
        add(
            "8 bound",
            f"{workload}: embedded default 1 -> 2 ranks scaling efficiency",
            f"{np.median(a):.3f}",
            f"mean 95% CI [{a.mean() - h:.3f}, {a.mean() + h:.3f}]; min {a.min():.3f}, max {a.max():.3f}; "
            f"{len(a)} sweeps",
        )


def run(ctx: Context) -> None:
    default_bound(ctx.tmp, ctx.add)


if __name__ == "__main__":
    sys.exit(main_for(NUMBER))
