"""The drop test's known power and its false-alarm guard (issue 54), on draws with fixed seeds.

Counts, not wall-clock: each draw is replayed through `detect.drop_step` (the test the weekly check and
`detect.replay` run beside E-Divisive) and its count is held at what the tuned bounds give, so a change
that costs power or raises false alarms fails here before benchmark section 19 shows it.
"""

import numpy as np

from bench.analysis.history import noise
from bench.analysis.history.detect import drop_step, latest_drop

STEP_AT = 52  # a year of weekly runs before the step


def draw(seed: int, series: int, weeks: int, cv: float, step: float = 0.0, dips: int = 0) -> list[np.ndarray]:
    """`series` weekly histories of lognormal noise `cv`, `step` lower from week STEP_AT, `dips` one-week
    dips of 20-35% (a bad node, a busy storage week) that recover."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(series):
        values = rng.uniform(100, 5000) * np.exp(rng.normal(0, cv, weeks))
        if step:
            values[STEP_AT:] *= 1 - step
        for week in rng.choice(np.arange(12, weeks - 1), size=dips, replace=False) if dips else []:
            values[week] *= 1 - rng.uniform(0.20, 0.35)
        out.append(values)
    return out


def caught_within(series: list[np.ndarray], runs: int) -> int:
    """How many series had their drop confirmed by the test within `runs` runs of the step."""
    return sum(
        any(
            (step := drop_step(values[:t])) is not None and step.index >= STEP_AT - 3
            for t in range(STEP_AT + 1, STEP_AT + runs + 1)
        )
        for values in series
    )


def alarms(values: np.ndarray) -> int:
    """Drops confirmed in a replay of a series without a step (each looked for since the last one, as
    detect.replay does)."""
    since, count = 0, 0
    for t in range(noise.MIN_NOISE_RUNS + 1, len(values) + 1):
        step = drop_step(values[:t], since)
        if step is not None:
            count, since = count + 1, step.index
    return count


def watched_within(series: list[np.ndarray], runs: int) -> int:
    """How many series showed their drop as a two-run `watch` (issue 63: confirmed at the watch bounds,
    noise.WATCH_CONFIRM_Z, not alerted) or alerted it, within `runs` runs of the step."""

    def seen(values: np.ndarray, t: int) -> bool:
        found = latest_drop(values[:t])
        return found is not None and found[0].status != noise.OK and found[0].runs >= 2 and found[1] >= STEP_AT - 3

    return sum(any(seen(values, t) for t in range(STEP_AT + 1, STEP_AT + runs + 1)) for values in series)


def test_a_3pct_drop_at_1pct_noise_is_shown_as_watch_by_its_second_run_in_9_of_10_and_never_alerted():
    # 54 of 60 at issue 54's bounds (now the watch bounds; CONFIRM_Z[2] 3.1 instead of 2.8: 49). Issue 63:
    # a single series alerts only on strong evidence; such a drop shared by a cluster is the pooled test's.
    series = draw(5401, 60, STEP_AT + 2, 0.01, step=0.03)
    assert watched_within(series, runs=2) >= 54
    assert caught_within(series, runs=2) <= 35  # alerted: the draws whose pair fell far (29 of 60 here; 54 before)


def test_a_2pct_drop_at_1pct_noise_is_shown_as_watch_by_its_fourth_run_in_more_than_8_of_10():
    # 51 of 60 (WATCH_CONFIRM_Z[4] 3.1 instead of 2.8: 43).
    assert watched_within(draw(5402, 60, STEP_AT + 4, 0.01, step=0.02), runs=4) >= 51


def test_a_6pct_drop_at_3pct_noise_is_confirmed_by_its_third_run_as_often_as_the_bounds_allow():
    # Shown as watch or alerted: 42 of 60 at issue 54's bounds (now the watch bounds; WATCH_CONFIRM_Z[3] 3.3
    # instead of 3.0: 39). Issue 54's 0.9 is beyond the budget here: a 6% drop at 3% noise is t = 3.4 after
    # three runs on a known spread (benchmark section 19); a cluster that shares it pools it (section 22).
    assert watched_within(draw(5404, 60, STEP_AT + 3, 0.03, step=0.06), runs=3) >= 42


def test_a_5pct_drop_at_1pct_noise_is_alerted_by_its_third_run_in_9_of_10():
    # Issue 63's single-series goal: 8 standard errors by the third run, far past the alert bounds.
    assert caught_within(draw(5403, 60, STEP_AT + 3, 0.01, step=0.05), runs=3) >= 57


def test_two_quiet_years_at_1pct_noise_raise_at_most_the_false_alarm_budget():
    # 0 in 80 series-years at the alert bounds (issue 63: <= 2 per 100 series-years); 3 at issue 54's.
    assert sum(alarms(values) for values in draw(5406, 40, 104, 0.01)) == 0


def test_two_years_at_3pct_noise_with_bad_weeks_raise_at_most_the_false_alarm_budget():
    # 0 in 80 series-years; 5 at issue 54's bounds, 14 at 2.5/2.6/2.5.
    assert sum(alarms(values) for values in draw(5405, 40, 104, 0.03, dips=2)) == 0


def test_two_bad_weeks_in_a_row_confirm_nothing_until_a_third_low_run():
    values = draw(5407, 1, 60, 0.01)[0]
    values[-2:] *= 0.75  # two 25% weeks: an outage or a level, the third week tells
    assert drop_step(values) is None
    assert noise.judge_drop(values[:-2], values[-2:]).status != noise.REGRESSED
    third = np.r_[values, values[-1]]
    step = drop_step(third)
    assert step is not None and step.index == 58 and step.runs == 3


def test_a_bad_week_beside_an_ordinary_low_run_at_3pct_noise_is_no_drop():
    """An 18% bad week and then a run 3.5% low (about one spread) on a 3% series: the verdict's judgement
    of the newer run (no week set aside there) must not read the pair as a level."""
    values = 1000 * np.exp(np.random.default_rng(5410).normal(0, 0.03, 40))
    level = noise._level(values, noise.noise_cv(values))
    judged = noise.next_judgement([*values, level * 0.82], level * 0.965)
    assert judged.status != noise.REGRESSED
    # A pair as low on average that agrees is a level: 11% and 11.5% low (5.2 standard errors) alerted; 11% and
    # 11% (issue 63: under the alert bounds at 3% noise and 40 runs) shown as watch.
    assert noise.next_judgement([*values, level * 0.89], level * 0.89).status == noise.WATCH
    assert noise.next_judgement([*values, level * 0.88], level * 0.885).status == noise.REGRESSED
