"""Benchmark section 19: small drops on quiet series, caught within a few runs without crying wolf (issue 54).

Weekly histories are drawn with fixed seeds (lognormal noise around a level; a step at week 52 for
the power rows; two years without a step for the false-alarm rows; one-week dips of 20-35% that recover
for the outlier rows) and replayed run by run as the weekly check does (detect.replay). Each row is
counted twice: the detector with the noise model's drop test, and E-Divisive alone (the detector
before issue 54), so the table argues the choice.

The drop test's bounds (bench.analysis.history.noise: CONFIRM_Z, the Student t widening, the agreement and
dip rules) were chosen on calibration draws of these same families, seeds + 100 and 200 series a row, as
the most power at <= 0.08 false alarms per series-year on every false-alarm row; the seeds here were
not used to choose them. On a known spread a one-sided CUSUM (k = 1 spread) sized to the same false
alarms caught no more than the windowed test (0.87 of 3% drops at 1% noise by the second run, 0.83 of
2% by the fourth, 0.66 of 6% at 3% by the third, at 0.07 false alarms per series-year; the windowed
bounds 0.88, 0.82, 0.67 at 0.06), so the windowed test, whose interval and confirming runs an alert can
state, stays. Each power row states the physics: the t statistic of its drop after its runs against the
52 before on a known spread, and the bound that power would need.

Why the targets are missed at the budget (issue 54's second pass): the false alarms come from long
references (30-100 runs back, the reference capped at 52), so a longer-pooled spread buys nothing here;
the per-look tail is what binds. That was first argued by arithmetic; it is now measured. For each power
row with a target, the bound the target needs on a known spread (t - z of the target, _needed) is put
into the detector for real (replay's confirm_z, the same judgement with that one bound lowered, the
others the suite's), and two more rows print the power reached at it on the row's own series and the
false alarms it costs on the quiet series of the same noise level (without a step and with one-week
dips; the value is the higher of the two). On these seeds no goal is met inside the 0.1 budget:
- 3% drops at 1% noise by the second run: the two-run bound 2.88 (from 3.09) reaches 0.88, not 0.9, and
  costs 0.085 false alarms a series-year without a step, 0.105 with dips (over the budget).
- 2% drops at 1% noise by the fourth run: the four-run bound 3.01 reaches 0.71, as the suite's bound
  does (false alarms unchanged, 0.070 / 0.080): this goal is not held by its bound.
- 6% drops at 3% noise by the third run: the three-run bound 2.09 (from 3.35) reaches 0.75 and costs
  0.34 false alarms a series-year, over three times the budget.
Why power falls short of the target even at its bound (a diagnostic of the last look, not part of the
section): the spread is estimated (its error widens z: of the 2% drops' four-run z, 76 of 100 pass
3.01, not 80); every confirming run must be low (EACH_Z) and the runs agree (69 confirmed at the last
look); and in the weekly replay the lower bound's own false alarms in the year before the step restart
the reference (25 of the 3%-noise series, of which 10 then caught the step, against 65 of the 75
others). So lowering a bound alone reaches neither goal at 1% noise inside the budget, and the 3%-noise
goal is beyond it.
Replays share E-Divisive's weekly change points (detect.weekly_steps) between the two columns.

Since issue 63 a single series alerts only on strong evidence (noise.CONFIRM_Z, 3.8: <= 2 false alerts
per 100 series-years on section 12's histories): issue 54's bounds are noise.WATCH_CONFIRM_Z, and a drop
they confirm is shown as `watch` with its size and interval, never sent. The power rows report the share
alerted (no target for one series) and, in their detail, the share shown as watch or alerted, against
issue 54's goal; the false-alarm rows hold the alerts to 0.02 a series-year. The rows "at the bound power
needs" still measure issue 54's question (its goals' own bounds, the others issue 54's) against its 0.1
budget. A small drop that is real moves the other series of its cluster, and section 22 pools them.
"""

from __future__ import annotations

import sys

import numpy as np
from runner import Context, main_for

NUMBER = 19
TITLE = "small drops"
STEP_AT = 52  # one year of history before the step
SERIES = 100  # per row
YEARS = 2  # per false-alarm series


def _power_series(noise: float, step: float, seed: int, runs: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(SERIES):
        values = rng.uniform(100, 5000) * np.exp(rng.normal(0, noise, STEP_AT + runs))
        values[STEP_AT:] *= 1 - step
        out.append(values)
    return out


def _quiet_series(noise: float, seed: int, dips: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(SERIES):
        values = rng.uniform(100, 5000) * np.exp(rng.normal(0, noise, 52 * YEARS))
        for week in rng.choice(np.arange(12, 52 * YEARS - 1), size=dips, replace=False):
            values[week] *= 1 - rng.uniform(0.20, 0.35)
        out.append(values)
    return out


def _caught(job: tuple) -> tuple[int, int, list[int], int]:
    """(with the noise model, E-Divisive alone, with the noise model at each of `bounds`, shown: alerted
    or a two-run `watch` with the suite's bounds): series whose drop was so within `runs` runs."""
    from bench.analysis.history.detect import replay, replay_watches, weekly_steps

    noise, step, seed, runs, bounds = job
    counts, shown = [0] * (2 + len(bounds)), 0
    for values in _power_series(noise, step, seed, runs):
        steps = weekly_steps(values)  # E-Divisive's half, shared by the replays
        variants = [{}, {"noise_model": False}, *({"confirm_z": b} for b in bounds)]
        for k, kwargs in enumerate(variants):
            flagged = replay(values, steps=steps, **kwargs)
            hit = any(f.alerted and f.step.size < 0 and f.step.index >= STEP_AT - 3 for f in flagged)
            counts[k] += hit
            if k == 0:  # issue 63: a drop under the alert bounds is shown as `watch`, never sent
                shown += hit or any(at >= STEP_AT - 3 for at, _, _ in replay_watches(values, flagged))
    return counts[0], counts[1], counts[2:], shown


def _alarms(job: tuple) -> tuple[int, int, list[int]]:
    """(with the noise model, E-Divisive alone, with the noise model at each of `bounds`): change points
    alerted on series without a step."""
    from bench.analysis.history.detect import replay, weekly_steps

    noise, seed, dips, bounds = job
    counts = [0] * (2 + len(bounds))
    for values in _quiet_series(noise, seed, dips):
        steps = weekly_steps(values)  # E-Divisive's half, shared by the replays
        variants = [{}, {"noise_model": False}, *({"confirm_z": b} for b in bounds)]
        for k, kwargs in enumerate(variants):
            counts[k] += sum(f.alerted for f in replay(values, steps=steps, **kwargs))
    return counts[0], counts[1], counts[2:]


def _t(noise: float, step: float, runs: int) -> float:
    """The drop's t after `runs` runs against the STEP_AT before, on a known spread."""
    return step / (noise * (1 / runs + 1 / STEP_AT) ** 0.5)


def _needed(noise: float, step: float, runs: int, target: float) -> tuple[float, dict[int, float]]:
    """(the bound a `target` power needs after `runs` runs, t - z of the target, on the detector's scale:
    _critical's, widened for a spread from STEP_AT runs; the confirm bounds that put it there): the
    bound for `runs` runs set so that its Student t widening at STEP_AT reference runs is that bound,
    the others issue 54's (noise.WATCH_CONFIRM_Z: the alert bounds until issue 63)."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    from bench.analysis.history.noise import WATCH_CONFIRM_Z, _critical

    bound = _t(noise, step, runs) - norm.ppf(target)
    z = brentq(lambda z: _critical(z, STEP_AT) - bound, 0.1, 10.0, xtol=1e-6)
    return bound, {**WATCH_CONFIRM_Z, min(runs, max(WATCH_CONFIRM_Z)): z}


def _physics(noise: float, step: float, runs: int, target: float | None, share: float) -> str:
    """What a known spread allows: the drop's t after `runs` runs against the STEP_AT before, the bound a
    `target` power would need, the detector's bound for that many runs, and the shortfall if any."""
    from scipy.stats import norm

    from bench.analysis.history.noise import CONFIRM_Z, _critical

    t = _t(noise, step, runs)
    bound = _critical(CONFIRM_Z[min(runs, max(CONFIRM_Z))], STEP_AT)
    text = f"t = {t:.2f} after {runs} runs on a known spread, bound {bound:.2f} here"
    if target is None:
        return text
    text += f"; power {target:.1f} needs a bound <= {t - norm.ppf(target):.2f}"
    return text + (f"; short by {target - share:.2f}" if share < target else "")


def _wilson(k: int, n: int) -> str:
    from scipy.stats import binomtest

    low, high = binomtest(k, n).proportion_ci(0.95, method="wilson")
    return f"95% CI {low:.2f}-{high:.2f}"


def _poisson(k: int, years: float) -> str:
    from scipy.stats import chi2

    low = chi2.ppf(0.025, 2 * k) / 2 / years if k else 0.0
    return f"95% CI {low:.3f}-{chi2.ppf(0.975, 2 * k + 2) / 2 / years:.3f}"


POWER = (  # (noise, step, runs after the step, target share alerted within those runs, seed)
    (0.01, 0.02, 4, 0.8, 1801),
    (0.01, 0.03, 2, 0.9, 1802),
    (0.01, 0.05, 2, None, 1803),
    (0.03, 0.06, 3, 0.9, 1804),
)
QUIET = ((0.01, 1811, 0), (0.03, 1812, 0), (0.01, 1813, 2), (0.03, 1814, 2))  # (noise, seed, dips per series)


def small_drops(add) -> None:
    from concurrent.futures import ProcessPoolExecutor

    # Each power goal's own bound (_needed), applied for real: power on the goal's series, false alarms
    # on the quiet series of its noise level.
    needed = {(n, s, runs): _needed(n, s, runs, target) for n, s, runs, target, _ in POWER if target}
    at_noise = {q: [b for (n, _, _), (_, b) in needed.items() if n == q] for q, _, _ in QUIET}
    with ProcessPoolExecutor(max_workers=2) as pool:
        power_jobs = [
            (n, s, seed, runs, [needed[n, s, runs][1]] if target else []) for n, s, runs, target, seed in POWER
        ]
        caught = list(pool.map(_caught, power_jobs))
        alarms = list(pool.map(_alarms, [(n, seed, dips, at_noise[n]) for n, seed, dips in QUIET]))
    for (noise, step, runs, target, seed), (new, old, _, shown) in zip(POWER, caught, strict=True):
        goal = f"issue 54's >= {target:.1f}" if target else "none"
        add(
            "19 small drops",
            f"noise {noise:.0%}: {step:.0%} drops alerted within {runs} runs",
            f"{new / SERIES:.2f}",
            f"target none for one series since issue 63 (alerts on strong evidence; a drop its cluster shares: "
            f"section 22); shown as watch or alerted: {shown} of {SERIES} ({_wilson(shown, SERIES)}; {goal}) "
            f"({new} of {SERIES} alerted; {_wilson(new, SERIES)}; E-Divisive alone: {old} of {SERIES}; "
            f"{_physics(noise, step, runs, target, new / SERIES)}; step at week {STEP_AT}; seed {seed})",
        )
    years = SERIES * YEARS
    for (noise, seed, dips), (new, old, _) in zip(QUIET, alarms, strict=True):
        what = f"with {dips} one-week dips of 20-35% per series" if dips else "without a step"
        add(
            "19 small drops",
            f"noise {noise:.0%}: false alarms per series-year, {what}",
            f"{new / years:.3f}",
            f"target <= 0.02 (issue 63; issue 54's was 0.1) ({new} in {years} series-years; {_poisson(new, years)}; "
            f"E-Divisive alone: {old}; seed {seed})",
        )
    for (noise, step, runs, target, seed), (_, _, at_bound, _) in zip(POWER, caught, strict=True):
        if not target:
            continue
        bound, bounds = needed[noise, step, runs]
        k = min(runs, max(bounds))
        reached = at_bound[0]
        goal = f"{step:.0%} drops within {runs} runs"
        add(
            "19 small drops",
            f"noise {noise:.0%}: {step:.0%} drops alerted within {runs} runs at the bound power {target:.1f} needs",
            f"{reached / SERIES:.2f}",
            f"target >= {target:.1f} ({reached} of {SERIES}; {_wilson(reached, SERIES)}; the {k}-run bound "
            f"{bound:.2f} (confirm_z[{k}] = {bounds[k]:.2f}, widened for a spread from {STEP_AT} runs), the "
            f"others issue 54's (noise.WATCH_CONFIRM_Z); seed {seed})",
        )
        index = at_noise[noise].index(bounds)
        quiet = [(d, sd, a[2][index]) for (n, sd, d), a in zip(QUIET, alarms, strict=True) if n == noise]
        worst = max(c for _, _, c in quiet) / years
        parts = "; ".join(
            f"{'with ' + str(d) + ' one-week dips per series' if d else 'without a step'}: {c} in {years} "
            f"series-years, {c / years:.3f}, {_poisson(c, years)}, seed {sd}"
            for d, sd, c in quiet
        )
        met = reached / SERIES >= target and worst <= 0.1
        add(
            "19 small drops",
            f"noise {noise:.0%}: false alarms per series-year at the bound {goal} need (the higher of without "
            "a step / with dips)",
            f"{worst:.3f}",
            f"target <= 0.1, issue 54's budget ({parts}; {goal} at noise {noise:.0%}: power and budget "
            f"{'both met' if met else 'not both met'} on these seeds)",
        )


def run(ctx: Context) -> None:
    small_drops(ctx.add)


if __name__ == "__main__":
    sys.exit(main_for(NUMBER))
