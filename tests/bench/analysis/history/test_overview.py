"""The overview's lines and a two-run comparison, from frames as the store returns them (pure pandas).

The Chromium tests (tests/airflow/test_history_dashboard.py) see `regressed`, `change`, `stale` and `ok`
on a real store; `inconclusive` and `annotated`, the order between all six, the noise flags and the
comparison's intervals are pinned here."""

from __future__ import annotations

import pandas as pd
import pytest

from bench.analysis.history.compare import compare_runs
from bench.analysis.history.overview import (
    NEEDS_ATTENTION,
    STATUSES,
    overview_lines,
    rollup,
    series_id,
    series_key,
)

NOW = pd.Timestamp("2026-12-05T12:00:00", tz="UTC")
NOISE = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 99.8, 100.1]


def _series(workload: str, values: list[float], last_verdict: str = "pass", weeks_ago: int = 0, gpus: int = 1):
    n = len(values)
    stamps = [(NOW - pd.Timedelta(weeks=weeks_ago + n - 1 - i)).isoformat() for i in range(n)]
    return pd.DataFrame(
        {
            "dag_id": "d",
            "suite_run_id": [f"{workload}-{gpus}-{i}" for i in range(n)],
            "cluster": "c",
            "workload": workload,
            "gpus": gpus,
            "config_key": "k",
            "started_at": stamps,
            "accepted": [True] * (n - 1) + [last_verdict == "pass"],
            "verdict": ["pass"] * (n - 1) + [last_verdict],
            "throughput_img_s": values,
            "scaling_efficiency": [0.9] * n,
        }
    )


def test_each_status_from_the_regression_floor_change_points_and_annotations():
    recent = pd.concat(
        [
            _series("ssd", [*NOISE, 80.0]),  # 20% under a floor that noise puts at 10%: regressed
            _series("deeplabv3plus", [*NOISE, 100.0], "inconclusive"),
            _series("ssd", [*NOISE, 100.3], gpus=2),  # a change point among the shown runs: change
            _series("ssd", [*NOISE, 100.3], gpus=4),  # its change point annotated: annotated
            _series("ssd", [*NOISE, 100.3], weeks_ago=3, gpus=8),  # no run for three weeks: stale
            _series("ssd", [*NOISE, 101.0], gpus=16),
        ]
    )
    change = {"cluster": "c", "workload": "ssd", "config_key": "k", "metric": "throughput_img_s", "state": "pending"}
    at = recent[recent["gpus"] == 2]["started_at"].iloc[4]
    changes = pd.DataFrame([change | {"gpus": 2, "changed_at": at}, change | {"gpus": 4, "changed_at": at}])
    notes = pd.DataFrame([change | {"gpus": 4, "changed_at": at, "kind": "expected", "note": "n"}])
    lines = overview_lines(recent, changes, notes, NOW)
    assert [(line["workload"], line["gpus"], line["status"]) for line in lines] == [
        ("ssd", 1, "regressed"),
        ("deeplabv3plus", 1, "inconclusive"),
        ("ssd", 2, "change"),
        ("ssd", 8, "stale"),
        ("ssd", 4, "annotated"),
        ("ssd", 16, "ok"),
    ]
    worst = lines[0]
    assert worst["latest_img_s"] == 80.0 and worst["delta_prev"] == pytest.approx(80.0 / 100.1 - 1)
    assert worst["delta_baseline"] == pytest.approx(80.0 / 100.05 - 1)  # the median of the 8 runs before
    assert worst["outside_noise"] == {"delta_prev": True, "delta_baseline": True}
    assert lines[-1]["outside_noise"] == {"delta_prev": False, "delta_baseline": False}
    assert lines[1]["latest_img_s"] == 100.1  # an inconclusive run's figures are not shown as the latest
    (rolled,) = rollup(lines)
    assert rolled.pop("pooled")["status"] == "ok"  # issue 63: the cluster's pooled status (test_overview_pooled)
    assert rolled.pop("storage") is None  # issue 64: no line carries its run's store here (test_overview_storage)
    assert rolled == {
        "cluster": "c",
        "series": 6,
        "counts": dict.fromkeys((s for s in STATUSES if s not in ("missed_bound", "no_result", "watch")), 1),
        "worst": "regressed",
    }
    assert set(NEEDS_ATTENTION) == {"regressed", "missed_bound", "no_result", "inconclusive", "change", "stale"}
    assert series_key(worst["id"]) == {"cluster": "c", "workload": "ssd", "gpus": 1, "config_key": "k"}
    with pytest.raises(ValueError, match="is not a series id"):
        series_key("bm90IGEgbGlzdA")


def test_a_failed_run_says_what_happened_regressed_only_under_its_floor():
    """Issue 49: a scale that missed its bound while it ran above its history is `missed_bound` with its
    cause and node; a run with no figure is `no_result`; only a figure under the floor is `regressed`."""
    missed = _series("ssd", [*NOISE, 108.6], "fail", gpus=2).assign(bottleneck="", slow_node="")
    missed.loc[missed.index[-1], ["bottleneck", "slow_node"]] = ["node", "10.0.0.3"]
    no_figure = _series("ssd", [*NOISE, float("nan")], "fail", gpus=4)
    under = _series("ssd", [*NOISE, 80.0], "fail", gpus=8)
    lines = overview_lines(pd.concat([missed, no_figure, under]), None, None, NOW)
    by_gpus = {line["gpus"]: line for line in lines}
    assert (by_gpus[2]["status"], by_gpus[2]["cause"]) == ("missed_bound", "node (10.0.0.3)")
    assert by_gpus[4]["status"] == "no_result" and by_gpus[4]["cause"] == ""
    assert by_gpus[8]["status"] == "regressed"
    assert [line["gpus"] for line in lines] == [8, 2, 4]  # worst first


def test_a_comparison_names_the_scales_outside_noise_and_the_environment_change():
    a = _series("ssd", [100.0]).assign(throughput_ci_low=98.0, throughput_ci_high=102.0)
    b = _series("ssd", [88.0]).assign(throughput_ci_low=86.5, throughput_ci_high=89.5)
    wobble = _series("ssd", [101.0], gpus=2)
    out = compare_runs(
        pd.concat([a, _series("ssd", [100.0], gpus=2)]),
        pd.concat([b, wobble]),
        {"nccl": "2.21.5"},
        {"nccl": "2.23.4"},
        {("c", "ssd", 1, "k"): NOISE, ("c", "ssd", 2, "k"): NOISE},
        {("c", "ssd", 1, "k"): 0.1, ("c", "ssd", 2, "k"): 0.1},  # b's config: the suite's default
    )
    one, two = (s["changes"][0] for s in out["scales"])
    assert one["delta"] == pytest.approx(-0.12) and one["interval_from"] == "runs"
    assert one["ci_low"] < -0.12 < one["ci_high"] < 0 and one["outside_noise"] is True
    assert two["interval_from"] == "history" and two["ci_low"] < 0 < two["ci_high"] and two["outside_noise"] is False
    assert out["environment_changes"] == [{"field": "nccl", "before": "2.21.5", "after": "2.23.4"}]
    assert series_id("c", "ssd", 1, "k/with/slashes").isascii()
    history = {("c", "ssd", 1, "k"): NOISE}
    loose = compare_runs(a, b, None, None, history, {("c", "ssd", 1, "k"): 0.15})  # b's config: 15% for it
    assert loose["scales"][0]["tolerance_used"] == 0.15 and loose["scales"][0]["changes"][0]["outside_noise"] is False
    # a scale run b no longer has: b's config set no tolerance for it, and none is made up
    gone = compare_runs(
        pd.concat([a, _series("ssd", [100.0], gpus=4)]), b, None, None, history, {("c", "ssd", 1, "k"): 0.15}
    )
    four = next(s for s in gone["scales"] if s["gpus"] == 4)
    assert (four["in"], four["tolerance_used"], four["changes"]) == ("a", None, [])
    for gpus in (0, 4097, 10**30, True):  # bounded as a sweep's gpus: a huge one overflowed the store's integer
        with pytest.raises(ValueError, match="gpus" if gpus is not True else "is not a series id"):
            series_key(series_id("c", "ssd", gpus, "k"))


def test_a_storage_ceiling_line_in_the_overview_form():
    from bench.analysis.history.overview import CEILING, ceiling_lines

    ceilings = [*(v * 5 for v in NOISE), 300.0]  # 500 MB/s for eight weeks, then 300: under the floor
    probes = pd.DataFrame(
        {
            "suite_run_id": [f"r{i}" for i in range(len(ceilings))],
            "cluster": "c",
            "probed_at": [(NOW - pd.Timedelta(weeks=len(ceilings) - 1 - i)).isoformat() for i in range(len(ceilings))],
            "paths": '["/data/coco"]',
            "sample_bytes": 1e9,
            "ceiling_mb_s": ceilings,
            "accepted": [True] * (len(ceilings) - 1) + [False],  # a regressed probe is stored not accepted
        }
    )
    (line,) = ceiling_lines(probes.assign(conclusive=True), NOW)  # conclusive, not accepted: it regressed
    assert (line["workload"], line["config_key"], line["figure"], line["status"]) == (
        CEILING,
        "/data/coco",
        "ceiling_mb_s",
        "regressed",
    )
    assert line["latest_mb_s"] == 300.0 and line["outside_noise"]["delta_baseline"] is True
    assert line["latest_img_s"] is None and line["latest_efficiency"] is None and line["spark"][-1] == 300.0
    (unsure,) = ceiling_lines(probes.assign(conclusive=[True] * (len(ceilings) - 1) + [False]), NOW)
    assert unsure["status"] == "inconclusive" and unsure["latest_mb_s"] == NOISE[-1] * 5  # not judged
    (steady,) = ceiling_lines(probes.assign(conclusive=True, accepted=True, ceiling_mb_s=[*ceilings[:-1], 501.0]), NOW)
    assert steady["status"] == "ok" and steady["outside_noise"] == {"delta_prev": False, "delta_baseline": False}


def test_checkpoint_lines_judged_by_the_regression_floor_in_the_overview_form():
    """A series with checkpoint figures gets a write and a read line in the throughput rows' form: its
    last write 40% under a floor its noise puts at 10% is `regressed` (stored not accepted: the run failed
    on it, still judged), its steady reads `ok`; a series without the figures gets none, and the
    checkpoint lines leave the series' own line and the roll-up's series count as they were."""
    from bench.analysis.history.overview import checkpoint_lines

    ckpt = _series("ssd", [*NOISE, 100.2], "FAILED").assign(
        ckpt_write_mb_s=[v * 4 for v in NOISE] + [240.0], ckpt_read_mb_s=[v * 6 for v in NOISE] + [601.0]
    )
    plain = _series("ssd", [*NOISE, 100.3], gpus=2)  # no checkpoint phase: no checkpoint line
    recent = pd.concat([ckpt, plain])
    write, read = checkpoint_lines(recent, None, NOW)
    assert (write["figure"], write["gpus"], write["status"]) == ("ckpt_write_mb_s", 1, "regressed")
    assert write["latest_mb_s"] == 240.0 and write["delta_baseline"] == pytest.approx(240.0 / (100.05 * 4) - 1)
    assert write["outside_noise"] == {"delta_prev": True, "delta_baseline": True} and write["spark"][-1] == 240.0
    assert write["id"] == series_id("c", "ssd", 1, "k") and write["latest_img_s"] is None
    assert (read["figure"], read["status"], read["latest_mb_s"]) == ("ckpt_read_mb_s", "ok", 601.0)
    assert read["outside_noise"] == {"delta_prev": False, "delta_baseline": False}
    steady = checkpoint_lines(recent.assign(ckpt_write_mb_s=recent["ckpt_write_mb_s"].replace(240.0, 401.0)), None, NOW)
    assert [line["status"] for line in steady] == ["ok", "ok"]
    unsure = ckpt.assign(verdict=["pass"] * 8 + ["inconclusive"])  # the newest write is not judged
    assert checkpoint_lines(unsure, None, NOW)[0]["status"] == "inconclusive"
    assert checkpoint_lines(plain, None, NOW) == []
    series = overview_lines(recent, None, None, NOW)
    assert [line["figure"] for line in series] == ["throughput_img_s"] * 2
    assert rollup([*series, write, read])[0]["series"] == 2  # two series, and their checkpoint lines counted
    assert series[1]["status"] == "ok" and rollup([series[1], write])[0]["worst"] == "regressed"


def test_a_line_judges_the_figure_its_runs_check_judged_the_better_of_two_runs():
    """A scale whose first run fell 20% under its floor, ran again (`confirm_regressions`) and passed on
    the second is `ok` at the second run's images/s, as its verdict said, not `regressed` at the first's;
    the same for a checkpoint figure, whose better of two runs is stored (`ckpt_*_checked`)."""
    from bench.analysis.history.overview import checkpoint_lines

    confirmed = _series("ssd", [*NOISE, 80.0]).assign(
        repeat_img_s=[None] * 8 + [100.4],
        ckpt_write_mb_s=[v * 4 for v in NOISE] + [240.0],
        ckpt_write_checked=[v * 4 for v in NOISE] + [401.0],
    )
    (line,) = overview_lines(confirmed, None, None, NOW)
    assert (line["status"], line["latest_img_s"], line["spark"][-1]) == ("ok", 100.4, 100.4)
    assert line["outside_noise"] == {"delta_prev": False, "delta_baseline": False}
    (write,) = checkpoint_lines(confirmed, None, NOW)
    assert (write["status"], write["latest_mb_s"], write["spark"][-1]) == ("ok", 401.0, 401.0)
    both_under = confirmed.assign(repeat_img_s=[None] * 8 + [81.0], ckpt_write_checked=None)
    assert overview_lines(both_under, None, None, NOW)[0]["status"] == "regressed"  # both runs under it
    assert checkpoint_lines(both_under, None, NOW)[0]["status"] == "regressed"  # stored before: the first's


def test_a_passing_run_whose_read_was_too_short_says_inconclusive_beside_its_status():
    """Issue 49 item 3: the latest run passed, its epoch-1 read too short for a rate: the line keeps its
    status (the scale was judged on its other figures) and says the read figure is INCONCLUSIVE, why
    included; a valid read, or a run that read nothing (synthetic data), says nothing."""
    note = "epoch-1 reads lasted 4.3s, under 5s: too short for a rate"
    short = _series("ssd", [*NOISE, 100.3]).assign(avg_read_mb_s=5.0, bandwidth_valid=True, bandwidth_note="")
    short.loc[short.index[-1], ["bandwidth_valid", "bandwidth_note"]] = [False, note]
    valid = _series("ssd", [*NOISE, 100.3], gpus=2).assign(avg_read_mb_s=5.0, bandwidth_valid=True, bandwidth_note="")
    synthetic = _series("ssd", [*NOISE, 100.3], gpus=4).assign(
        avg_read_mb_s=float("nan"), bandwidth_valid=False, bandwidth_note="no dataset read (synthetic data)"
    )
    lines = {line["gpus"]: line for line in overview_lines(pd.concat([short, valid, synthetic]), None, None, NOW)}
    assert lines[1]["status"] == "ok"
    assert lines[1]["inconclusive_figure"] == f"epoch-1 read rate INCONCLUSIVE — {note}"
    assert lines[2]["inconclusive_figure"] == "" and lines[4]["inconclusive_figure"] == ""
