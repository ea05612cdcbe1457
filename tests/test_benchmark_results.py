"""benchmarks/RESULTS.md holds only what scripts/bench.sh's sections write (issue 51: rows no script wrote, a
section label edited by hand, a '14 backends' row whose script bench.sh never ran). A row is scripted when a
`benchmarks/bench_NN_*.py` (its NUMBER the row's section) has an `add(...)` call making its label and figure."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import runner  # noqa: E402

GPU_ROW = ("7 GPU", "GPU table, SSD300 R50 img/s per GPU vs NVIDIA (663 img/s A100)", "not run", "no GPU")


def test_every_row_of_results_md_has_its_script():
    wrong = runner.unscripted((BENCHMARKS / "RESULTS.md").read_text())
    assert not wrong, "\n".join(wrong)


def test_every_section_module_is_run_by_bench_sh():
    """bench.sh runs runner.py, which runs every bench_NN_*.py: a benchmark outside that pattern is never run."""
    outside = [p.name for p in BENCHMARKS.glob("bench_*.py") if p.stem.split("_")[1].isdigit() is False]
    assert outside == [], outside
    assert "benchmarks/runner.py" in (BENCHMARKS.parent / "scripts" / "bench.sh").read_text()


@pytest.mark.parametrize(
    "row,why",
    [
        (
            "| 8 bound | embedded default sweeps PASSED (by hand) | 20 of 20 | |",
            "bench_08_default_bound.py writes no such",
        ),
        (
            "| 14 backends | ssd tiny synthetic, 2 ranks x 1 core, local launcher: DDP / Horovod images/s | 1.2 | |",
            "bench_14",
        ),
        ("| 99 new | a figure | 1 | |", "no benchmarks/bench_NN_*.py writes a row of section '99 new'"),
        ("| ssd: a GPU figure | 1299 | by hand |", "no benchmarks/bench_NN_*.py writes a row of section"),
    ],
)
def test_a_row_without_a_script_is_found_and_never_written(tmp_path, row, why):
    (wrong,) = runner.unscripted(f"| section | figure | value | target / detail |\n| --- | --- | --- | --- |\n{row}\n")
    assert why in wrong, wrong
    out = tmp_path / "RESULTS.md"
    out.write_text(
        f"# Benchmark results\n\n| section | figure | value | target / detail |\n| --- | --- | --- | --- |\n{row}\n"
    )
    if row.count(" | ") != 3:  # not a result row's shape: the runner never keeps it
        runner.write_results([GPU_ROW], {7}, 1, out)
        assert row not in out.read_text() and "| 7 GPU |" in out.read_text()
        return
    with pytest.raises(runner.UnscriptedRows, match="rows without a script"):
        runner.write_results([GPU_ROW], {7}, 1, out)
    assert row in out.read_text() and "7 GPU" not in out.read_text()  # nothing written


def test_a_sections_own_rows_are_written(tmp_path):
    out = tmp_path / "RESULTS.md"
    runner.write_results([GPU_ROW], {7}, 1, out)
    assert (
        "| 7 GPU | GPU table, SSD300 R50 img/s per GPU vs NVIDIA (663 img/s A100) | not run | no GPU |"
        in out.read_text()
    )


def test_a_section_measured_again_keeps_one_note_saying_when(tmp_path):
    """Re-running a section replaces its provenance note: two notes for one section (one of them stale)
    left a reader unsure which run the rows came from."""
    out = tmp_path / "RESULTS.md"
    runner.write_results([GPU_ROW], {7}, 1, out)
    runner.write_results([GPU_ROW], {7}, 1, out)
    assert sum(line.startswith("Sections 7 measured") for line in out.read_text().splitlines()) == 1
