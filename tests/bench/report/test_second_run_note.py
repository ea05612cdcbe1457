"""The report's `why` cell for a scale that passed on its second run (issue 62 item 4): its table shows the
first run's efficiency, under the bound, beside `pass`; the cell says the second run met the bound, so
the table never shows a pass it does not explain (README command 1 here: ssd at 2 ranks 0.677, then
0.830 against 0.70)."""

from __future__ import annotations

from bench.report.html import SCALING_COLUMNS

ROW = {"workload": "ssd", "gpus": 2, "state": "COMPLETED", "verdict": "pass", "min_scaling_efficiency": 0.7}


def _why_cell(**row) -> str:
    """The scaling table's `why` column, as the report renders it for this row."""
    (cell,) = [fn for header, fn in SCALING_COLUMNS if header == "why"]
    return cell(ROW | row)


def test_a_pass_on_the_second_run_says_so_beside_the_first_runs_figure():
    cell = _why_cell(scaling_efficiency=0.6773, repeat_scaling_efficiency=0.8298)
    assert cell == "first run 0.677 under the 0.70 bound; the second run 0.830 met it: passed"
    # nothing to explain: a first run that met its bound, a row with no second run, a failed row
    assert _why_cell(scaling_efficiency=0.83, repeat_scaling_efficiency=0.84) == ""
    assert _why_cell(scaling_efficiency=0.83, repeat_scaling_efficiency=float("nan")) == ""
    assert _why_cell(scaling_efficiency=0.6, repeat_scaling_efficiency=0.65, verdict="fail") == ""
