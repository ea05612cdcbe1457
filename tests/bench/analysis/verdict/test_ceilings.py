"""Expected throughput from measured ceilings: each component binds where its figures say it does."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from bench.analysis.verdict.ceilings import BACKWARD_SHARE, LAST_BUCKET_SHARE, expected, ideal_efficiency
from bench.config.models import SweepConfig, TrainConfig


def test_a_node_that_gives_two_ranks_1_6x_one_expects_0_8_and_compute_binds():
    e = expected(gpus=2, batch_size=8, baseline_per_rank_img_s=100.0, independent_img_s=160.0, allreduce_s=None)
    assert e.expected_img_s == pytest.approx(160.0) and e.expected_efficiency == pytest.approx(0.8)
    assert e.bound_by == "compute" and e.exposed_comm_s == 0


def test_an_allreduce_longer_than_backward_is_exposed_and_communication_binds():
    step = 8 * 2 / 200.0  # 80 ms per rank at 100 images/s each
    e = expected(gpus=2, batch_size=8, baseline_per_rank_img_s=100.0, independent_img_s=200.0, allreduce_s=0.2)
    assert e.exposed_comm_s == pytest.approx(0.2 - BACKWARD_SHARE * step)
    assert e.expected_img_s == pytest.approx(16 / (step + e.exposed_comm_s)) and e.bound_by == "communication"


def test_a_short_allreduce_still_exposes_its_last_bucket():
    e = expected(gpus=4, batch_size=8, baseline_per_rank_img_s=100.0, independent_img_s=400.0, allreduce_s=0.004)
    assert e.exposed_comm_s == pytest.approx(0.004 * LAST_BUCKET_SHARE) and e.bound_by == "compute"


def test_storage_binds_when_its_ceiling_feeds_fewer_images():
    e = expected(2, 8, 100.0, 200.0, None, storage_ceiling_mb_s=5.0, bytes_per_image=50_000)
    assert e.expected_img_s == pytest.approx(100.0) and e.bound_by == "storage" and "5.0 MB/s" in e.evidence


def test_without_a_node_ceiling_nothing_is_expected():
    assert expected(2, 8, 100.0, None, 0.1) is None and expected(2, 8, math.nan, 150.0, None) is None


def test_the_ideal_follows_the_slot_and_both_efficiencies_differ_as_they_should(tmp_path):
    """`auto` is SweepConfig.resolved_ideal's one rule (ceilings.default_ideal, which forgot that no node
    ceiling means linear, is gone): GPU slots linear, CPU slots independent, linear without ceilings."""
    train = TrainConfig(workload="ssd", synthetic=True, steps=1)

    def ideal(**kw) -> str:
        return SweepConfig(dataset_path=tmp_path, output_dir=tmp_path, train=train, **kw).resolved_ideal()

    assert ideal(gpus_per_node=0) == "independent" and ideal(gpus_per_node=8) == "linear"
    assert ideal(gpus_per_node=0, ceilings=False) == "linear"
    assert ideal_efficiency("linear", 150.0, 2, 100.0, 160.0) == pytest.approx(0.75)
    assert ideal_efficiency("independent", 150.0, 2, 100.0, 160.0) == pytest.approx(0.9375)
    assert math.isnan(ideal_efficiency("independent", 150.0, 2, 100.0, None))


def _rank(rank: int, foreign: float = 0.0, top: str | None = None) -> dict:
    return {
        "rank": rank,
        "host": "node1",
        "images": 800,
        "measured_s": 10.0,
        "images_per_s": 80.0,
        "data_wait_share": 0.05,
        "compute_share": 0.9,
        "comm_share": 0.05,
        "comm_s": 0.5,
        "compute_s": 9.0,
        "data_wait_s": 0.5,
        "compute_median_s": 0.09,
        "foreign_cpu_share": foreign,
        "foreign_top": top,
    }


def test_a_foreign_process_on_a_ranks_cores_is_named_as_interference():
    import json

    from bench.analysis.verdict.bottleneck import diagnose

    row = {
        "gpus": 2,
        "data_wait_share": 0.05,
        "comm_share": 0.05,
        "compute_share": 0.9,
        "straggler_gap": 0.3,
        "rank_breakdown": json.dumps([_rank(0), _rank(1, 0.45, "python3 (pid 4242) on core 1")]),
    }
    base = {"gpus": 1, "data_wait_share": 0.05, "comm_share": 0.0, "rank_breakdown": json.dumps([_rank(0)])}
    cause, evidence = diagnose(row, base, 0.1, None, False)
    assert cause == "interference" and "pid 4242" in evidence and "core 1" in evidence and "45%" in evidence
    row["rank_breakdown"] = json.dumps([_rank(0), _rank(1, 0.02)])
    assert diagnose(row, base, 0.1, None, False)[0] != "interference"


def test_the_ceilings_cross_check_says_where_they_disagree_with_the_rules():

    from bench.analysis.verdict.ceilings import cross_check

    frame = pd.DataFrame(
        [
            {
                "bottleneck": "communication",
                "bottleneck_evidence": "comm grew",
                "expected_bound_by": "compute",
                "expected_img_s": 160.0,
                "efficiency_vs_expected": 0.95,
            },
            {
                "bottleneck": "contention",
                "bottleneck_evidence": "compute grew",
                "expected_bound_by": "compute",
                "expected_img_s": 160.0,
                "efficiency_vs_expected": 0.97,
            },
            {
                "bottleneck": "straggler",
                "bottleneck_evidence": "rank 1",
                "expected_bound_by": "compute",
                "expected_img_s": 160.0,
                "efficiency_vs_expected": 0.6,
            },
        ]
    )
    out = cross_check(frame)["bottleneck_evidence"].tolist()
    assert "disagree (compute vs communication)" in out[0]
    assert "compute binds" in out[1] and "disagree" not in out[1]
    assert "do not explain" in out[2]


def _scales(throughput: list[float], ceiling: list[float], **columns) -> pd.DataFrame:
    """A workload's results at 1, 2 and 6 ranks (valid, each with its node ceiling), plus `columns`."""
    return pd.DataFrame(
        {
            "workload": ["ssd"] * 3,
            "gpus": [1, 2, 6],
            "throughput_img_s": throughput,
            "epoch_time_s": [1.0] * 3,
            "valid": [True] * 3,
            "independent_img_s": ceiling,
            **columns,
        }
    )


def test_an_oversubscribed_scale_is_judged_against_linear_not_its_contended_ceiling():
    from bench.analysis.verdict.scaling import derive

    frame = _scales([100.0, 160.0, 150.0], [100.0, 170.0, 155.0], oversubscribed=[False, False, True])
    out = derive(frame, None, "independent").set_index("gpus")
    assert out.loc[2, "ideal"] == "independent" and out.loc[2, "scaling_efficiency"] == pytest.approx(160 / 170)
    assert out.loc[6, "ideal"] == "linear" and out.loc[6, "scaling_efficiency"] == pytest.approx(0.25)


def test_bandwidth_is_judged_against_the_same_ideal_as_throughput():
    """Epoch-1 bytes per image are fixed: a scale at 0.94 of its node ceiling reads at 0.94 of what the
    ceiling would read, not at the 0.76 of linear it was held to (a clean 2-core sweep failed on that)."""
    from bench.analysis.verdict.scaling import derive

    frame = _scales([100.0, 152.0, 150.0], [100.0, 162.0, 155.0], avg_read_mb_s=[10.0, 15.2, 15.0])
    frame["oversubscribed"] = frame["gpus"] > 2
    independent = derive(frame, None, "independent").set_index("gpus")
    linear = derive(frame.drop(columns="oversubscribed"), None, "linear").set_index("gpus")
    assert linear.loc[2, "bandwidth_efficiency"] == pytest.approx(0.76)
    assert independent.loc[2, "bandwidth_efficiency"] == pytest.approx(152 / 162)
    assert independent.loc[6, "bandwidth_efficiency"] == pytest.approx(0.25)  # oversubscribed: linear
    # without an `oversubscribed` column every scale is its own slots' (the mask is a Series, never a bool)
    plain = derive(frame.drop(columns="oversubscribed"), None, "independent").set_index("gpus")
    assert plain.loc[6, "bandwidth_efficiency"] == pytest.approx(150 / 155)


def _ceiling_runs(warm: str, probe: dict | None) -> list[dict]:
    """A 2-rank scale's run (with its allreduce probe) and its node ceiling's, as the suite records them."""

    def result(rate: float, **summary) -> dict:
        return {"state": "COMPLETED", "summary": {"images_per_s": rate, "synthetic": False, **summary}}

    return [
        {"workload": "ssd", "gpus": 2, "result": result(150.0, allreduce=probe)},
        {
            "workload": "ssd",
            "gpus": 2,
            "variant": "independent",
            "result": result(170.0, storage={"drop_caches": warm}),
        },
    ]


def test_the_probe_fills_the_allreduce_columns_and_a_ceiling_that_read_the_store_says_so():

    from bench.analysis.verdict.ceilings import with_node_ceilings

    frame = pd.DataFrame({"workload": ["ssd"], "gpus": [2], "throughput_img_s": [150.0]})
    probe = {"seconds": 0.02, "bytes": 2_400_000, "buckets": 2, "bus_gb_s": 0.12, "latency_s": 1e-4, "reps": 5}
    row = with_node_ceilings(frame, _ceiling_runs("warmed", probe)).iloc[0]
    assert row["independent_img_s"] == 170.0 and row["ceiling_note"] == ""
    assert (row["allreduce_s"], row["allreduce_bytes"], row["allreduce_bus_gb_s"], row["allreduce_latency_s"]) == (
        0.02,
        2_400_000,
        0.12,
        1e-4,
    )
    # a dataset larger than the nodes' memory: the copies read the store as well, and the row says so
    row = with_node_ceilings(frame, _ceiling_runs("incomplete", None)).iloc[0]
    assert row["independent_img_s"] == 170.0 and "read the store as well" in row["ceiling_note"]
    assert math.isnan(row["allreduce_s"]) and math.isnan(row["allreduce_bytes"])  # no probe: no figure
