"""The differential rules on their own: which rerun removes a drop, and how that confirms or corrects the
cause the step-time rules named. The real reruns run in test_bottleneck.py's throttled knee."""

from __future__ import annotations

import pandas as pd
import pytest

from bench.analysis.verdict.differential import add_differential, removed_by, rerun_plan, scales_to_confirm


def bound(gpus: int) -> float:
    return 0.7


def frame(eff2: float, cause: str, oversubscribed: bool = False) -> pd.DataFrame:
    common = {"workload": "ssd", "state": "COMPLETED", "valid": True, "baseline_gpus": 1, "oversubscribed": False}
    return pd.DataFrame(
        [
            common | {"gpus": 1, "throughput_img_s": 100.0, "scaling_efficiency": 1.0, "bottleneck": ""},
            common
            | {
                "gpus": 2,
                "throughput_img_s": 200.0 * eff2,
                "scaling_efficiency": eff2,
                "bottleneck": cause,
                "bottleneck_evidence": "data wait 40% of step time (3% at 1)",
                "oversubscribed": oversubscribed,
            },
        ]
    )


def reruns(warm: tuple[float, float], synthetic: tuple[float, float], valid: bool = True) -> pd.DataFrame:
    rows = []
    for variant, (one, two) in (("warm", warm), ("synthetic", synthetic)):
        rows += [
            {"workload": "ssd", "gpus": 1, "variant": variant, "valid": True, "throughput_img_s": one},
            {"workload": "ssd", "gpus": 2, "variant": variant, "valid": valid, "throughput_img_s": two},
        ]
    return pd.DataFrame(rows)


def never(row):
    raise AssertionError("no re-diagnosis expected")


def test_only_scales_below_their_bound_are_rerun_with_their_baseline():
    assert scales_to_confirm(frame(0.9, ""), bound) == []
    assert scales_to_confirm(frame(0.5, "storage", oversubscribed=True), bound) == []  # contended by design
    plan = rerun_plan(frame(0.5, "storage"), bound)
    assert plan == [
        {"workload": "ssd", "gpus": 1, "variant": "warm"},
        {"workload": "ssd", "gpus": 2, "variant": "warm"},
        {"workload": "ssd", "gpus": 1, "variant": "synthetic"},
        {"workload": "ssd", "gpus": 2, "variant": "synthetic"},
    ]


@pytest.mark.parametrize(
    ("cold", "warm", "synthetic", "removed"),
    [
        (0.5, 0.95, 0.97, "warm"),  # storage out, the scale scales
        (0.5, 0.55, 0.95, "synthetic"),  # only without decode does it
        (0.5, 0.55, 0.56, "neither"),  # not input-side
        (0.5, 0.59, 0.61, "synthetic"),  # half the 0.2 shortfall won back is enough
    ],
)
def test_the_rerun_that_wins_back_half_the_shortfall_removes_the_drop(cold, warm, synthetic, removed):
    assert removed_by(cold, warm, synthetic, 0.7) == removed


def test_a_warm_rerun_that_scales_confirms_storage():
    out = add_differential(frame(0.5, "storage"), reruns((100, 190), (150, 290)), bound, never)
    two = out[out["gpus"] == 2].iloc[0]
    assert two["bottleneck"] == "storage" and two["cause_check"] == "confirmed"
    assert two["rerun_removed"] == "warm"
    assert two["warm_efficiency"] == pytest.approx(0.95) and two["synthetic_efficiency"] == pytest.approx(290 / 300)
    assert two["fetch_stall"] == pytest.approx(1 - 100 / 190)  # cold 100 img/s at 2 vs warm 190
    assert two["prep_stall"] == pytest.approx(1 - 190 / 290)
    assert "0.95 warm cache" in two["bottleneck_evidence"] and two["bottleneck_evidence"].startswith("data wait")


def test_a_rule_that_blamed_storage_is_corrected_when_only_synthetic_data_scales():
    out = add_differential(frame(0.5, "storage"), reruns((100, 110), (150, 290)), bound, never)
    two = out[out["gpus"] == 2].iloc[0]
    assert two["bottleneck"] == "input_cpu" and two["cause_check"].startswith("corrected from storage")
    assert two["bottleneck_evidence"].startswith("corrected from storage")


def test_a_drop_neither_rerun_removes_is_not_input_side():
    seen = []

    def rediagnose(row):
        seen.append(int(row["gpus"]))
        return "communication", "exposed communication 35% of step time on every rank"

    out = add_differential(frame(0.5, "storage"), reruns((100, 110), (150, 160)), bound, rediagnose)
    two = out[out["gpus"] == 2].iloc[0]
    assert seen == [2] and two["bottleneck"] == "communication" and two["rerun_removed"] == "neither"
    assert "exposed communication 35%" in two["bottleneck_evidence"]
    # a cause that is not input-side already stands when neither rerun removes the drop
    kept = add_differential(frame(0.5, "communication"), reruns((100, 110), (150, 160)), bound, never)
    assert kept[kept["gpus"] == 2].iloc[0]["cause_check"] == "confirmed"


def test_a_failed_rerun_confirms_nothing_and_says_which():
    out = add_differential(frame(0.5, "storage"), reruns((100, 190), (150, 290), valid=False), bound, never)
    two = out[out["gpus"] == 2].iloc[0]
    assert two["bottleneck"] == "storage" and two["rerun_removed"] == ""
    assert two["cause_check"].startswith("not confirmed") and "warm at 2" in two["cause_check"]


def test_no_reruns_leave_the_columns_empty():
    out = add_differential(frame(0.5, "storage"), reruns((1, 1), (1, 1)).iloc[0:0], bound, never)
    assert out["rerun_removed"].eq("").all() and out["warm_efficiency"].isna().all()


def test_a_scale_judged_against_its_node_ceiling_is_compared_with_the_reruns_on_one_basis():
    """Node ceiling 1.6x one rank; the scale reads 0.80x linear, 0.5 of its ceiling (bound 0.7 there, 0.56
    against linear). The warm rerun scales at 0.55 of linear: it wins back most of the shortfall on the
    linear basis (0.40 -> 0.55 of a 0.16 gap). Against the ceiling-based 0.5 it looked like 'neither'."""
    f = frame(0.5, "storage")
    f["ideal"] = ["independent", "independent"]
    f["linear_efficiency"] = [1.0, 0.4]
    f.loc[1, "throughput_img_s"] = 80.0  # 0.4 of linear at 2 ranks
    out = add_differential(f, reruns((100.0, 110.0), (120.0, 132.0)), bound, never).iloc[1]
    assert out["rerun_removed"] == "warm" and out["bottleneck"] == "storage", out.to_dict()
    assert out["cause_check"] == "confirmed"
    assert "against linear, the bound 0.56 there" in out["bottleneck_evidence"]
    assert out["warm_efficiency"] == pytest.approx(0.55)
