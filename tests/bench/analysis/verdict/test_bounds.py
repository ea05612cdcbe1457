"""Each bound is compared in one place (bench.analysis.verdict.bounds): the differential reruns, the row
verdicts, the GX suite and the dashboard agree with `bounds.passes` on the edge cases (a figure exactly
at its bound, per-GPU table entries, missing figures), and no module compares a threshold inline."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pandas as pd
import pytest

from bench.analysis.verdict import bounds, differential
from bench.analysis.verdict import expectations as names
from bench.analysis.verdict.differential import add_differential, rerun_plan
from bench.analysis.verdict.expectations import prepare, validate
from bench.analysis.verdict.rules import FAIL, PASS, row_verdicts
from bench.config.models import Thresholds
from bench.report.history import _bound as dashboard_bound

ROOT = Path(__file__).resolve().parents[4]
SINGLE = Thresholds(min_scaling_efficiency=0.7)
TABLE = Thresholds(min_scaling_efficiency=0.5, min_scaling_efficiency_by_gpus={4: 0.9, 16: 0.8})
NAN = math.nan

# (thresholds, gpus, scaling efficiency): exactly at the bound, either side of it, per-GPU table entries
# (a scale takes the smallest listed count at or above it, the largest beyond the table), missing figures.
CASES = [
    (SINGLE, 2, 0.7),
    (SINGLE, 2, 0.6999),
    (SINGLE, 4, 0.7001),
    (SINGLE, 8, NAN),
    (TABLE, 2, 0.9),  # 2 GPUs: the 4-GPU entry covers it
    (TABLE, 3, 0.8999),
    (TABLE, 4, 0.9),
    (TABLE, 8, 0.8),  # between the entries: the 16-GPU one
    (TABLE, 16, 0.7999),
    (TABLE, 32, 0.8),  # beyond the table: the largest entry's
    (TABLE, 64, 0.79),
    (TABLE, 16, NAN),
]
EXPECTED = [True, False, True, True, True, False, True, True, False, True, False, True]


def test_the_table_means_what_it_says():
    assert [bounds.passes(bounds.SCALING_EFFICIENCY, v, g, th) for th, g, v in CASES] == EXPECTED
    assert bounds.passes(bounds.SCALING_EFFICIENCY, None, 2, SINGLE)
    assert bounds.meets(bounds.SCALING_EFFICIENCY, None, 0.7) is None
    assert bounds.meets(bounds.SCALING_EFFICIENCY, 0.7, None) is None


def scales(thresholds: Thresholds) -> pd.DataFrame:
    """One workload per case with this thresholds: its 1-GPU baseline and the case's scale."""
    rows = []
    for i, (th, gpus, eff) in enumerate(CASES):
        if th is not thresholds:
            continue
        common = {"workload": f"w{i}", "state": "COMPLETED", "valid": True, "reason": "", "baseline_gpus": 1}
        common |= {"oversubscribed": False, "inconclusive_reason": "", "bottleneck": "", "bottleneck_evidence": ""}
        rows.append(common | {"gpus": 1, "throughput_img_s": 100.0, "scaling_efficiency": 1.0})
        ci = (eff - 0.01, eff)  # an interval whose high end is the figure: borderline only where it passes
        rows.append(
            common
            | {
                "gpus": gpus,
                "throughput_img_s": 100.0 * gpus * (eff if eff == eff else 1.0),
                "scaling_efficiency": eff,
                "scaling_efficiency_ci_low": ci[0],
                "scaling_efficiency_ci_high": ci[1],
            }
        )
    return pd.DataFrame(rows)


def case_rows(thresholds: Thresholds) -> list[tuple[str, int, float, bool]]:
    return [(f"w{i}", g, v, EXPECTED[i]) for i, (th, g, v) in enumerate(CASES) if th is thresholds]


@pytest.mark.parametrize("thresholds", [SINGLE, TABLE], ids=["single", "per_gpu_table"])
def test_the_callers_agree_with_bounds_passes(thresholds, monkeypatch):
    frame = scales(thresholds)
    expected = case_rows(thresholds)

    # 1. the differential reruns, as evaluate and the suite's rerun plan call them
    for bound_at in (bounds.bound_at(bounds.SCALING_EFFICIENCY, thresholds), thresholds.scaling_bound):
        planned = {(i["workload"], i["gpus"]) for i in rerun_plan(frame, bound_at)}
        assert [(w, g) in planned for w, g, _, _ in expected] == [not ok for *_, ok in expected]

    # 2. the GX suite (its bound column from bounds.scaling_bound)
    prepared = prepare(frame, thresholds)
    verdict = validate(prepared, thresholds)
    failed = [names.SCALING_EFFICIENCY_AT_LEAST_BOUND in verdict.per_row[(w, g)] for w, g, _, _ in expected]
    assert failed == [not ok for *_, ok in expected]
    for w, g, _, _ in expected:
        row = prepared[(prepared["workload"] == w) & (prepared["gpus"] == g)].iloc[0]
        assert row["min_scaling_efficiency"] == bounds.scaling_bound(g, thresholds)

    # 3. the row verdicts: failed where GX failed it, borderline where the interval's high end passes
    judged = row_verdicts(prepared, verdict.per_row).set_index(["workload", "gpus"])
    assert [judged.at[(w, g), "verdict"] for w, g, _, _ in expected] == [PASS if ok else FAIL for *_, ok in expected]
    borderline = [bool(judged.at[(w, g), "borderline"]) for w, g, _, _ in expected]
    assert borderline == [ok and v == v for _, _, v, ok in expected]

    # 4. the differential's cause check holds each rerun scale to the same bound
    held: dict[int, float] = {}
    original = differential._on_linear_basis

    def spy(row, bound):
        held[int(row["gpus"])] = bound
        return original(row, bound)

    monkeypatch.setattr(differential, "_on_linear_basis", spy)
    reruns = pd.DataFrame(
        [
            {"workload": w, "gpus": n, "variant": v, "valid": True, "throughput_img_s": 100.0 * n}
            for w, g, _, _ in expected
            for n in (1, g)
            for v in differential.VARIANTS
        ]
    )
    add_differential(frame, reruns, bounds.bound_at(bounds.SCALING_EFFICIENCY, thresholds), lambda row: ("", ""))
    assert held == {g: bounds.scaling_bound(g, thresholds) for _, g, _, _ in expected}

    # 5. the dashboard draws the same bound from the run's stored thresholds
    stored = {"bounds": thresholds.model_dump(mode="json")}  # as a run stores its bounds group
    assert all(dashboard_bound(stored, g) == bounds.scaling_bound(g, thresholds) for _, g, _, _ in expected)


COLUMN_CASES = [
    # (bound, the frame's column, thresholds, value, passes)
    (bounds.GPU_UTIL, "gpu_util", Thresholds(min_gpu_util=50.0), 50.0, True),
    (bounds.GPU_UTIL, "gpu_util", Thresholds(min_gpu_util=50.0), 49.99, False),
    (bounds.GPU_UTIL, "gpu_util", Thresholds(min_gpu_util=50.0), NAN, True),
    (bounds.AU, "au", Thresholds(min_au=0.9), 0.9, True),
    (bounds.AU, "au", Thresholds(min_au=0.9), 0.8999, False),
    (bounds.AU, "au", Thresholds(min_au=0.9), NAN, True),
    (bounds.FOREIGN_SHARE, "foreign_cpu_share", Thresholds(max_foreign_share=0.25), 0.25, True),
    (bounds.FOREIGN_SHARE, "foreign_cpu_share", Thresholds(max_foreign_share=0.25), 0.2501, False),
    (bounds.FOREIGN_SHARE, "foreign_cpu_share", Thresholds(max_foreign_share=0.25), NAN, True),
    (bounds.BANDWIDTH_EFFICIENCY, "bandwidth_efficiency", Thresholds(min_bandwidth_efficiency=0.7), 0.7, True),
    (bounds.BANDWIDTH_EFFICIENCY, "bandwidth_efficiency", Thresholds(min_bandwidth_efficiency=0.7), 0.69, False),
    (bounds.BANDWIDTH_EFFICIENCY, "bandwidth_efficiency", Thresholds(min_bandwidth_efficiency=0.7), NAN, True),
]
EXPECTATION = {
    bounds.GPU_UTIL: names.GPU_UTILISATION_AT_LEAST_FLOOR,
    bounds.AU: names.ACCELERATOR_UTILISATION_AT_LEAST,
    bounds.FOREIGN_SHARE: names.NO_FOREIGN_WORK_ON_SLOTS,
    bounds.BANDWIDTH_EFFICIENCY: names.BANDWIDTH_EFFICIENCY_AT_LEAST_BOUND,
}


@pytest.mark.parametrize("case", range(0, len(COLUMN_CASES), 3), ids=lambda i: COLUMN_CASES[i][0])
def test_the_gx_suite_takes_each_threshold_and_its_direction_from_bounds(case):
    """At the bound, just past it, missing: GX fails exactly the rows bounds.passes fails, and names the
    bound bounds.bound gives."""
    group = COLUMN_CASES[case : case + 3]
    name, column, thresholds = group[0][:3]
    common = {"state": "COMPLETED", "valid": True, "reason": "", "baseline_gpus": 1, "inconclusive_reason": ""}
    rows = []
    for i, (*_, value, _) in enumerate(group):
        rows.append(common | {"workload": f"w{i}", "gpus": 1, "throughput_img_s": 100.0, "scaling_efficiency": 1.0})
        rows.append(
            common
            | {"workload": f"w{i}", "gpus": 2, "throughput_img_s": 200.0, "scaling_efficiency": 1.0, column: value}
        )
    verdict = validate(prepare(pd.DataFrame(rows), thresholds), thresholds)
    expectation = EXPECTATION[name]
    failed = [expectation in verdict.per_row[(f"w{i}", 2)] for i in range(len(group))]
    assert failed == [not bounds.passes(name, value, 2, thresholds) for *_, value, _ in group]
    assert failed == [not ok for *_, ok in group]
    for item in (f for f in verdict.failures if f["expectation"] == expectation):
        assert item["bound"] == bounds.bound(name, 2, thresholds)


def test_a_regression_floor_is_met_at_the_floor():
    assert bounds.meets(bounds.REGRESSION, 90.0, 90.0) is True
    assert bounds.fails(bounds.REGRESSION, 89.99, 90.0)
    assert not bounds.fails(bounds.REGRESSION, 80.0, NAN)  # no floor yet: not judged
    assert not bounds.fails(bounds.REGRESSION, NAN, 90.0)
    with pytest.raises(ValueError):
        bounds.bound(bounds.REGRESSION, 2, SINGLE)


def test_a_step_time_spread_at_its_limit_is_steady():
    from bench.analysis.verdict.rules import measurement_problems

    th = Thresholds(max_step_time_spread=0.5)
    frame = pd.DataFrame(
        [{"valid": True, "throughput_img_s": 10.0, "step_time_spread": s, "gpus": 2} for s in (0.5, 0.5001, NAN)]
    )
    assert [not p for p in measurement_problems(frame, th)] == [
        bounds.passes(bounds.STEP_TIME_SPREAD, s, 2, th) for s in (0.5, 0.5001, NAN)
    ]
    assert [not p for p in measurement_problems(frame, th)] == [True, False, True]


# Thresholds' bound settings (min_*/max_*), the function that turns them into a bound, and the per-row
# bound columns the verdict writes: a comparison with any of them belongs in the bounds module.
# Every threshold the schema's bounds name too (straggler_gap has no min_/max_ prefix), and a local
# variable named after one (`min_au = w["min_au"]`) or called a threshold.
BOUND_SETTINGS = {n for n in Thresholds.model_fields if n.startswith(("min_", "max_"))}
BOUND_SETTINGS |= {b.threshold for b in bounds.BOUNDS.values() if b.threshold is not None}
BOUND_CALLS = {"scaling_bound", "bound_at", "bound"}
BOUND_COLUMNS = BOUND_SETTINGS | {"regression_floor", "min_supported_gpus_checked"}
BOUND_NAMES = {"bound", "floor", "threshold"} | BOUND_SETTINGS  # a bound's value once a caller has it
ORDERING = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)
EXEMPT = {"bench/analysis/verdict/bounds.py", "bench/config/models.py"}  # the comparison itself; the table lookup


def _is_bound(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and sub.attr in BOUND_SETTINGS:
            return True
        if isinstance(sub, ast.Call):
            func = sub.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in BOUND_CALLS:
                return True
        if isinstance(sub, ast.Constant) and sub.value in BOUND_COLUMNS:
            return True
        if isinstance(sub, ast.Name) and sub.id in BOUND_NAMES:
            return True
    return False


def _compares_a_bound(node: ast.AST) -> bool:
    if not isinstance(node, ast.Compare) or not any(isinstance(op, ORDERING) for op in node.ops):
        return False
    return any(_is_bound(x) for x in (node.left, *node.comparators))


def inline_bound_comparisons() -> list[str]:
    found = []
    for top in ("bench", "plugins", "dags"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in EXEMPT:
                continue
            for node in ast.walk(ast.parse(path.read_text(), rel)):
                if _compares_a_bound(node):
                    found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_caller_compares_a_threshold_inline():
    assert inline_bound_comparisons() == [], "compare through bench.analysis.verdict.bounds"


def test_the_inline_check_catches_an_inline_comparison():
    tree = ast.parse(
        "x = spread > thresholds.max_step_time_spread\ny = eff < bound_at(gpus)\nz = r['regression_floor'] > v\n"
        "b = lo < bound <= hi\nf = rate < floor"
    )
    compares = [n for n in ast.walk(tree) if isinstance(n, ast.Compare)]
    assert len(compares) == 5 and all(_compares_a_bound(c) for c in compares)
    # the ones issue 52 found: AU with its own slack, the straggler gap in bottleneck.py (twice)
    tree = ast.parse("a = au + eps < min_au\nb = gap > straggler_gap\nc = 1.0 - r > threshold")
    compares = [n for n in ast.walk(tree) if isinstance(n, ast.Compare)]
    assert len(compares) == 3 and all(_compares_a_bound(c) for c in compares)


def test_one_table_of_bounds_read_from_the_results_schema():
    """Which threshold bounds which figure is declared once, on the schema's columns; bounds.BOUNDS is that
    table, every name the verdict uses is in it, and one class is called Bound."""
    from bench.results import schema

    assert bounds.BOUNDS is schema.VERDICT_BOUNDS
    names_used = {v for k, v in vars(bounds).items() if k.isupper() and isinstance(v, str)}
    assert names_used == set(bounds.BOUNDS)
    for name, bound in bounds.BOUNDS.items():
        assert bound.figure in schema.NAMES and bound.side in ("min", "max"), name
        assert bound.threshold is None or bound.threshold in Thresholds.model_fields, name
    assert not bounds.BOUNDS[bounds.STRAGGLER_GAP].floor and bounds.BOUNDS[bounds.AU].floor
    classes = [
        f"{path.relative_to(ROOT)}"
        for top in ("bench", "plugins")
        for path in (ROOT / top).rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and node.name == "Bound"
    ]
    assert classes == ["bench/results/schema.py"], classes


def test_the_straggler_gap_and_au_meet_their_bounds_where_the_verdict_does():
    """A rank exactly at the gap is not named (a ceiling: at it passes); AU exactly at min_au held, and a
    hair under it fell (accelerators.py kept its own 1e-9 slack before, which the verdict never had)."""
    from bench.analysis.verdict.accelerators import measured_count
    from bench.analysis.verdict.bottleneck import add_bottlenecks

    frame = pd.DataFrame(
        {
            "workload": ["w"] * 3,
            "gpus": [1, 2, 4],
            "straggler_gap": [0.1, 0.1000001, NAN],
            "slowest_rank": [0, 1, 2],
            "slowest_host": ["a", "b", "c"],
            "verdict": ["pass"] * 3,
            "borderline": [False] * 3,
            "state": ["RUNNING"] * 3,
        }
    )
    named = add_bottlenecks(frame, 0.1, None, set())
    assert named["slowest_host"].tolist() == ["", "b", ""]
    rows = pd.DataFrame({"gpus": [1, 2, 4], "au": [0.95, 0.9, 0.9 - 1e-12], "valid": [True] * 3})
    assert measured_count(rows, 0.9) == (2, 4)
    assert bounds.passes(bounds.AU, 0.9, 2, Thresholds(min_au=0.9))
    assert not bounds.passes(bounds.AU, 0.9 - 1e-12, 2, Thresholds(min_au=0.9))
