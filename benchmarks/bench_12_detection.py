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


def detection(add, n_series: int = 400, seeds: tuple[int, ...] = (50, 51, 52, 53)) -> None:
    """Precision, recall and online delay on labelled histories; seeds never used in tuning (0-4, 20-21,
    30-33 and 40-43 were). Online counts what the weekly check sends: alerts, not recorded changes."""
    from bench.analysis.history.detect import find_steps, replay
    from bench.analysis.history.labelled_history import labelled_histories, score

    series = [s for seed in seeds for s in labelled_histories(n_series // len(seeds), weeks=156, seed=seed)]
    off = score(series, {s.name: [(c.index, c.index) for c in find_steps(s.values)] for s in series})
    t = time.perf_counter()
    on = score(series, {s.name: [(f.step.index, f.flagged_at) for f in replay(s.values) if f.alerted] for s in series})
    replay_s = time.perf_counter() - t
    what = (
        f"{len(series)} labelled series x 3 years (noise 1-3%, steps 5-15%, drifts, 5% weeks missing; seeds "
        f"{'-'.join(str(s) for s in (seeds[0], seeds[-1]))}, never used in tuning)"
    )
    add(
        "12 detect",
        f"offline precision, {what}",
        f"{off.precision:.3f}",
        f"target >= 0.95 ({off.false_alarms} false of {off.detected})",
    )
    add(
        "12 detect",
        "offline recall, steps >= 6% in noise <= 3%",
        f"{off.recall:.3f}",
        f"target >= 0.95 ({off.targeted_found} of {off.targeted})",
    )
    from scipy.stats import binomtest, chi2

    quick = sum(d <= 3 for d in on.delays)
    low, high = binomtest(quick, on.targeted).proportion_ci(0.95, method="wilson")
    add(
        "12 detect",
        "online: steps >= 6% alerted within 3 runs after the step",
        f"{on.within(3):.3f}",
        f"target >= 0.90 ({quick} of {on.targeted}; 95% CI {low:.3f}-{high:.3f}; within 2: {on.within(2):.3f}; "
        f"ever alerted: {on.recall:.3f})",
    )
    k, years = on.false_alarms, on.series_years / 100  # exact Poisson interval for k alerts
    fa_low = chi2.ppf(0.025, 2 * k) / 2 / years if k else 0.0
    fa_high = chi2.ppf(0.975, 2 * k + 2) / 2 / years
    add(
        "12 detect",
        "online: false alarms per 100 series-years",
        f"{on.false_alarms_per_100_series_years:.2f}",
        f"target <= 1 ({k} in {on.series_years:.0f} series-years; 95% CI {fa_low:.2f}-{fa_high:.2f}); "
        f"replay {replay_s:.0f} s",
    )


def run(ctx: Context) -> None:
    detection(ctx.add)


if __name__ == "__main__":
    sys.exit(main_for(NUMBER))
