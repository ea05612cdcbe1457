"""Benchmark section 12: change points users can trust, on labelled histories never used in tuning."""

from __future__ import annotations

import sys
import time

from runner import (
    Context,
    main_for,
)

NUMBER = 12
TITLE = "change points"
# The weekly alerts' false-alarm budget: issue 63's 2 per 100 series-years, with an online precision of at
# least 0.9 (what a team keeps reading: at issue 54's 0.1 per series-year a team with 100 series got 8-10
# false alerts a year, and a third of the alerts on realistic histories were wrong). Issue 54 had spent
# 10 per 100 on 3% drops at 1% noise by their second run, a bound near 3 standard errors looked at every
# week; a single series now alerts only past noise.CONFIRM_Z (3.8), its smaller drops shown as `watch`,
# and a small drop that is real moves the other series of its cluster, which the pooled test alerts
# (section 22). This section's first target was 1 per 100, set for E-Divisive alone.
FALSE_ALARMS_PER_100 = 2
PRECISION = 0.9  # online: alerts sent that were a planted step (issue 63)


def _detection_scores(series) -> tuple:
    """(offline score, online score, replay seconds): online counts what the weekly check sends."""
    from labelled_history import score

    from bench.analysis.history.detect import find_steps, replay

    off = score(series, {s.name: [(c.index, c.index) for c in find_steps(s.values)] for s in series})
    t = time.perf_counter()
    on = score(series, {s.name: [(f.step.index, f.flagged_at) for f in replay(s.values) if f.alerted] for s in series})
    return off, on, time.perf_counter() - t


def _detection_rows(add, label: str, what: str, off, on, replay_s: float, targeted: str = "all") -> None:
    from scipy.stats import binomtest, chi2

    def wilson(k: int, n: int) -> str:
        low, high = binomtest(k, n).proportion_ci(0.95, method="wilson") if n else (float("nan"),) * 2
        return f"95% CI {low:.3f}-{high:.3f}"

    add(
        label,
        f"offline precision, {what}",
        f"{off.precision:.3f}",
        f"target >= 0.95 ({off.false_alarms} false of {off.detected}; {wilson(off.true_positive, off.detected)})",
    )
    add(
        label,
        f"offline recall, targeted steps ({targeted})",
        f"{off.recall:.3f}",
        f"target >= 0.95 ({off.targeted_found} of {off.targeted}; {wilson(off.targeted_found, off.targeted)})",
    )
    quick = sum(d <= 3 for d in on.delays)
    add(
        label,
        "online: targeted steps alerted within 3 runs after the step",
        f"{on.within(3):.3f}",
        f"target >= 0.90 ({quick} of {on.targeted}; {wilson(quick, on.targeted)}; within 2: {on.within(2):.3f}; "
        f"ever alerted: {on.recall:.3f})",
    )
    add(
        label,
        "online precision: alerts sent that were a planted step",
        f"{on.precision:.3f}",
        f"target >= {PRECISION} ({on.true_positive} of {on.detected}; {wilson(on.true_positive, on.detected)})",
    )
    k, years = on.false_alarms, on.series_years / 100  # exact Poisson interval for k alerts
    fa_low = chi2.ppf(0.025, 2 * k) / 2 / years if k else 0.0
    fa_high = chi2.ppf(0.975, 2 * k + 2) / 2 / years
    add(
        label,
        "online: false alarms per 100 series-years",
        f"{on.false_alarms_per_100_series_years:.2f}",
        f"target <= {FALSE_ALARMS_PER_100} ({k} in {on.series_years:.0f} series-years; "
        f"95% CI {fa_low:.2f}-{fa_high:.2f}); "
        f"replay {replay_s:.0f} s",
    )


def detection(
    add,
    n_series: int = 400,
    seeds: tuple[int, ...] = (60, 61, 62, 63),
    real_seeds: tuple[int, ...] = tuple(range(300, 320)),
    scored_seeds: tuple[int, ...] = tuple(range(200, 220)),
) -> None:
    """Precision, recall and online delay on labelled histories, on seeds never used in tuning (0-4,
    20-21, 30-33, 40-43 and 50-53 of the plain family and 100-119 of the realistic one were).
    `real_seeds` were never scored before the detector they report; `scored_seeds` were the realistic
    held-out set of an earlier detector (scored, never tuned on), reported beside them."""
    from concurrent.futures import ProcessPoolExecutor

    from labelled_history import (
        NOISE_TARGET,
        STEP_TARGET,
        labelled_histories,
        realistic_histories,
    )

    def realistic(seeds: tuple[int, ...]) -> tuple[list, str]:
        """The realistic family's series for `seeds`, and the rows' description of them."""
        series = [s for seed in seeds for s in realistic_histories(seed=seed)]
        return series, (
            f"{len(series)} realistic series x 2 years (2 one-week dips of 20-35% each, 5 drifts and 20 steps of "
            f"7-15% per 40 series, noise 1.5-3%, 5% weeks missing; seeds {seeds[0]}-{seeds[-1]})"
        )

    series = [s for seed in seeds for s in labelled_histories(n_series // len(seeds), weeks=156, seed=seed)]
    (real, real_what), (scored, scored_what) = realistic(real_seeds), realistic(scored_seeds)
    # The families replay in two processes at once (each replay's seconds are its own process's).
    with ProcessPoolExecutor(max_workers=2) as pool:
        plain, fresh, earlier = pool.map(_detection_scores, [series, real, scored])
    what = (
        f"{len(series)} labelled series x 3 years (noise 1-3%, steps 5-15%, drifts, 5% weeks missing; seeds "
        f"{seeds[0]}-{seeds[-1]})"
    )
    _detection_rows(add, "12 detect", what, *plain, targeted=f">= {STEP_TARGET:.0%} in noise <= {NOISE_TARGET:.0%}")
    _detection_rows(add, "12 dips", real_what, *fresh)
    _detection_rows(add, "12 dips, earlier held-out", scored_what, *earlier)


def run(ctx: Context) -> None:
    detection(ctx.add)


if __name__ == "__main__":
    sys.exit(main_for(NUMBER))
