"""The overview's `watch` and noise-model `regressed` (issue 54): the same judgement as the verdict's
(regression_floor, noise.next_judgement), on series drawn with a fixed seed."""

import numpy as np
import pandas as pd

from bench.analysis.history.overview import NEEDS_ATTENTION, STATUSES, overview_lines
from tests.bench.analysis.history.test_overview import NOW, _series


def quiet(seed: int, runs: int = 14) -> list[float]:
    return list(1000 * np.exp(np.random.default_rng(seed).normal(0, 0.01, runs)))


def test_one_low_run_is_watch_two_are_regressed_and_a_short_series_is_neither():
    base = quiet(54)
    level = float(np.mean(base))
    recent = pd.concat(
        [
            _series("ssd", [*base, level * 0.97]),  # one run 3% low on a 1% series: suspected
            # confirmed by the second: its verdict failed (the verdict reads 55 runs, the overview 16)
            _series("ssd", [*base[1:], level * 0.97, level * 0.97], "fail", gpus=2).assign(
                failed_expectations=lambda f: ["[]"] * (len(f) - 1) + ['["ExpectThroughputNotRegressed"]']
            ),
            _series("ssd", [*base[:5], level * 0.97], gpus=4),  # too few runs: the fixed tolerance, ok
            _series("ssd", [*base, level * 1.002], gpus=8),
        ]
    )
    status = {line["gpus"]: line["status"] for line in overview_lines(recent, now=NOW)}
    assert status == {1: "watch", 2: "regressed", 4: "ok", 8: "ok"}
    assert "watch" in STATUSES and "watch" not in NEEDS_ATTENTION  # shown, never alerted
